"""Observability: JSON logs with request ids, /metrics, and the log audit's own detector."""

from __future__ import annotations

import gc
import io
import json
import logging
import re
import subprocess
import sys
import textwrap
import time
import traceback
import uuid
from collections.abc import Iterator
from datetime import timedelta

import falcon
import falcon.testing
import pytest
import redis
import requests
import webtest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rq import Queue, Retry, SimpleWorker

from console import help as help_pages
from jobs import metrics as job_metrics
from models import Call
from plumbing import logs, metrics
from plumbing.database import db
from tests.conftest import REDIS_URL, ROOT
from tests.support import bearer, clinic, issue_token, load, log_audit, organization, switchboard_url
from tests.support.live_service import concurrently, serve
from web import errors
from web import metrics as web_metrics

Samples = dict[tuple[str, frozenset], float]


def scrape(text: str) -> Samples:
    """Every sample of a Prometheus text exposition: (name, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def json_lines(caplog: pytest.LogCaptureFixture) -> Iterator[io.StringIO]:
    """The service's own JSON handler on the root logger, into a buffer, at DEBUG."""
    stream = io.StringIO()
    handler = logs.make_handler("json", stream)
    caplog.set_level(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    try:
        yield stream
    finally:
        logging.getLogger().removeHandler(handler)


def parsed(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


# --- request id --------------------------------------------------------------------------------


def test_request_id_is_generated_when_absent(app):
    first = app.get("/healthz").headers["X-Request-Id"]
    second = app.get("/healthz").headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second


def test_valid_request_id_is_echoed_and_invalid_ones_are_replaced(app):
    for given in ("abc-123", "0f8fad5b-d9cb-469f-a165-70867728950e", "trace.1:span_2", "x" * 128):
        assert app.get("/healthz", headers={"X-Request-Id": given}).headers["X-Request-Id"] == given
    for hostile in ("x" * 129, "has space", 'quote"d', "semi;colon", "<script>", "ünïcode", ""):
        echoed = app.get("/healthz", headers={"X-Request-Id": hostile}).headers["X-Request-Id"]
        assert re.fullmatch(r"[0-9a-f]{32}", echoed), hostile


def test_request_id_is_echoed_on_every_error(app, config):
    rid = {"X-Request-Id": "err-check-1"}
    checks = [
        app.get("/no/such/path", headers=rid, status=404),  # no route
        app.delete("/healthz", headers=rid, status=405),  # wrong method
        app.post(switchboard_url("clinic-a", "is-clinic-opened"), headers=rid, status=401),  # auth middleware
        app.post(
            switchboard_url("clinic-a", "has-active-request"),
            b"x" * (config.max_body_bytes + 1),
            headers={**rid, "Content-Type": "application/json"},
            status=413,
        ),  # body limit
    ]
    for resp in checks:
        assert resp.headers["X-Request-Id"] == "err-check-1", resp.status
        assert resp.json["code"]  # still the one error serializer


def test_log_records_of_a_request_carry_its_id_and_others_do_not(app, json_lines):
    load(organization(clinic()))
    token = issue_token(["clinic-a"], ["read"])
    app.post(switchboard_url("clinic-a", "is-clinic-opened"), headers={**bearer(token), "X-Request-Id": "rid-logs-1"})
    logging.getLogger("after").info("outside any request")
    lines = parsed(json_lines)
    during = [line for line in lines if line.get("request_id") == "rid-logs-1"]
    assert any(line["logger"] == "peewee" for line in during), "the request's SQL is logged under its id"
    access = [line for line in during if line["logger"] == "access"]
    assert len(access) == 1 and access[0]["status"] == 200 and access[0]["method"] == "POST"
    assert access[0]["route"] == "/external/v1/clinics/{clinic_slug}/switchboard/is-clinic-opened"
    assert access[0]["path"] == switchboard_url("clinic-a", "is-clinic-opened") and access[0]["duration_ms"] > 0
    after = [line for line in lines if line["logger"] == "after"]
    assert after and "request_id" not in after[0], "the id does not outlive its request"


def test_access_line_never_carries_the_query_string(app, json_lines):
    app.get("/healthz?signature=PLANTED-QUERY&expires=1", headers={"X-Request-Id": "rid-query"})
    access = [line for line in parsed(json_lines) if line["logger"] == "access"]
    assert access[-1]["request_id"] == "rid-query" and access[-1]["path"] == "/healthz"
    assert "PLANTED-QUERY" not in json_lines.getvalue()


def access_lines(stream: io.StringIO) -> dict[str, dict]:
    return {line["request_id"]: line for line in parsed(stream) if line["logger"] == "access"}


def test_access_line_of_a_form_refused_before_routing_names_the_route_not_the_link(app, json_lines):
    """A set-password link's POST that the CSRF check refuses never reaches routing: the
    access line still names the route's template, never the link's token."""
    link_token = "PLANTED-set-password-token-" + uuid.uuid4().hex
    app.post(f"/console/password/{link_token}", {"password": "x"}, headers={"X-Request-Id": "rid-csrf"}, status=403)
    app.get(f"/console/password/{link_token}", headers={"X-Request-Id": "rid-link"}, status="*")
    lines = access_lines(json_lines)
    for rid in ("rid-csrf", "rid-link"):
        assert lines[rid]["path"] == lines[rid]["route"] == "/console/password/{token}", lines[rid]
    assert lines["rid-csrf"]["status"] == 403 and lines["rid-csrf"]["message"].startswith(
        "POST /console/password/{token}"
    )
    assert link_token not in json_lines.getvalue()


def test_access_line_shows_ids_and_slugs_and_names_every_other_parameter(app, config, json_lines):
    """Refused before routing too (a body too large): the clinic's slug and the request's id
    are shown, a storage key never; a value that is not a slug's or an id's shape is named."""
    request_id = str(uuid.uuid4())
    app.post(
        f"/external/v1/clinics/clinic-a/patientRequests/{request_id}/attachments",
        b"x" * (config.max_body_bytes + 1),
        headers={"Content-Type": "application/json", "X-Request-Id": "rid-413"},
        status="*",
    )
    app.put(
        "/storage/clinic-a/PLANTED-KEY/consent.pdf?signature=x&expires=1",
        b"%PDF",
        headers={"X-Request-Id": "rid-storage"},
        status="*",
    )
    app.get("/external/v1/clinics/601123456/tags", headers={"X-Request-Id": "rid-digits"}, status="*")
    lines = access_lines(json_lines)
    assert lines["rid-413"]["path"] == f"/external/v1/clinics/clinic-a/patientRequests/{request_id}/attachments"
    assert lines["rid-413"]["route"] == "/external/v1/clinics/{clinic_slug}/patientRequests/{request_id}/attachments"
    assert lines["rid-storage"]["path"] == "/storage/{key}" and lines["rid-storage"]["route"] == "/storage/{key:path}"
    assert lines["rid-digits"]["path"] == "/external/v1/clinics/{clinic_slug}/tags"
    assert "PLANTED" not in json_lines.getvalue() and "601123456" not in json_lines.getvalue()


def test_access_line_of_an_unknown_path_keeps_its_first_segment_and_a_hash(app, json_lines):
    secret = "PLANTED-" + uuid.uuid4().hex
    app.get(f"/console/no-such-page/{secret}", headers={"X-Request-Id": "rid-console"}, status=404)
    app.get(f"/{secret}/x", headers={"X-Request-Id": "rid-root"}, status=404)
    app.get("/console/no-such-page", headers={"X-Request-Id": "rid-other"}, status=404)
    lines = access_lines(json_lines)
    assert lines["rid-console"]["path"] == f"/console/…#{logs.short_hash(f'/console/no-such-page/{secret}')}"
    assert lines["rid-root"]["path"] == f"/…#{logs.short_hash(f'/{secret}/x')}"  # not a segment of the app's
    assert lines["rid-other"]["path"] != lines["rid-console"]["path"], "two paths, two hashes"
    assert all(lines[rid]["route"] is None for rid in ("rid-console", "rid-root", "rid-other"))
    assert secret not in json_lines.getvalue() and "no-such-page" not in json_lines.getvalue()


def test_error_lines_name_the_path_as_the_access_line_does(caplog):
    """web/errors.py's lines (an unexpected error, the database down) use the same form."""
    req = falcon.testing.create_req(method="POST", path="/console/password/PLANTED-link-token")
    router = falcon.routing.CompiledRouter()
    router.add_route("/console/password/{token}", object())
    req.context.path_names = logs.PathNames(router.find, {}, {"console"})
    caplog.set_level(logging.INFO)
    with pytest.raises(falcon.HTTPError):
        errors._unexpected(req, falcon.Response(), RuntimeError("boom"), {})
    with pytest.raises(falcon.HTTPError):
        errors._database_unavailable(req, falcon.Response(), RuntimeError("server closed the connection"), {})
    messages = [r.getMessage() for r in caplog.records if r.name == "web.errors"]
    assert messages[-2:] == [
        "unhandled error on POST /console/password/{token}",
        "database unavailable on POST /console/password/{token}: RuntimeError: server closed the connection",
    ]
    assert "PLANTED" not in caplog.text


def test_gunicorn_request_errors_name_no_path_and_no_request_line(caplog):
    """gunicorn's own lines: a failed request's URI, a malformed request line."""
    caplog.set_level(logging.INFO)
    gunicorn = logging.getLogger("gunicorn.error")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        gunicorn.exception("Error handling request %s %s", "GET", "/console/password/PLANTED1?signature=PLANTED2")
    gunicorn.warning("Invalid request from ip=127.0.0.1: Invalid HTTP request line: 'GET /PLANTED3 HTTP/9'")
    first, second = [r.getMessage() for r in caplog.records if r.name == "gunicorn.error"][-2:]
    assert first == f"Error handling request GET /…#{logs.short_hash('/console/password/PLANTED1')}"
    assert second == (
        f"Invalid request from ip=127.0.0.1: Invalid HTTP request line: '#{logs.short_hash('GET /PLANTED3 HTTP/9')}'"
    )
    assert "PLANTED" not in caplog.text


def test_database_errors_quote_no_values_in_logs(wsgi_app, json_lines):
    """PostgreSQL's DETAIL line quotes the row's values (a unique key's: a phone number),
    psycopg2's LINE the statement as sent: neither reaches a log, the error's kind does."""
    phone = "+420601987654"
    with db.connection_context(), pytest.raises(Exception) as info, db.atomic():
        db.execute_sql("CREATE TEMPORARY TABLE obs_phones (phone text UNIQUE)")
        db.execute_sql("INSERT INTO obs_phones VALUES (%s), (%s)", (phone, phone))
    assert phone in str(info.value), "PostgreSQL quotes the value"
    try:
        raise info.value
    except Exception:
        logging.getLogger("obs.db").exception("write failed")
    # RQ writes a failed job's traceback into the message itself.
    logging.getLogger("rq.worker").error(
        "job failed (ingest_call)\n%s", "".join(traceback.format_exception(info.value))
    )
    entry, job = parsed(json_lines)[-2:]
    assert "UniqueViolation" in entry["exc"] or "IntegrityError" in entry["exc"]
    assert "duplicate key value violates unique constraint" in entry["exc"] and phone not in entry["exc"]
    assert "duplicate key value violates unique constraint" in job["message"] and phone not in job["message"]
    text = io.StringIO()
    logs.make_handler("text", text).handle(
        logging.LogRecord(
            "obs.db", logging.ERROR, __file__, 1, "write failed", (), (type(info.value), info.value, None)
        )
    )
    assert "duplicate key" in text.getvalue() and phone not in text.getvalue()


def test_access_line_names_the_token_by_id_never_its_secret(app, json_lines):
    """the access line of an authenticated request carries the token's id (the
    one the audit trail names), also when the clinic or scope check refuses it; never the
    token text or its secret, and no token field when nothing authenticated."""
    load(organization(clinic(), clinic("clinic-b")))
    token = issue_token(["clinic-a"], ["read"])
    token_id = str(uuid.UUID(hex=token.split("_")[1]))
    h = bearer(token)
    app.post(switchboard_url("clinic-a", "is-clinic-opened"), headers={**h, "X-Request-Id": "rid-tok-ok"})
    app.post(switchboard_url("clinic-b", "is-clinic-opened"), headers={**h, "X-Request-Id": "rid-tok-403"}, status=403)
    app.post(
        switchboard_url("clinic-a", "is-clinic-opened"),
        status=401,
        headers={"Authorization": token[:-4] + "xxxx", "X-Request-Id": "rid-tok-bad"},
    )
    access = {line["request_id"]: line for line in parsed(json_lines) if line["logger"] == "access"}
    assert access["rid-tok-ok"]["token"] == token_id and access["rid-tok-ok"]["status"] == 200
    assert access["rid-tok-403"]["token"] == token_id and access["rid-tok-403"]["status"] == 403
    assert "token" not in access["rid-tok-bad"]
    assert token.split("_", 2)[2] not in json_lines.getvalue()


def test_concurrent_requests_in_threads_keep_their_own_ids(wsgi_app):
    with serve() as base:
        ids = iter([f"thread-{i:02d}" for i in range(20)])

        def one() -> tuple[str, str]:
            rid = next(ids)
            return rid, requests.get(f"{base}/healthz", headers={"X-Request-Id": rid}, timeout=10).headers[
                "X-Request-Id"
            ]

        answers = concurrently(one, n=20)
    assert len(answers) == 20 and all(sent == echoed for sent, echoed in answers)


# --- log format and safety ---------------------------------------------------------------------


def test_json_lines_have_the_fields_and_the_exception_text(json_lines):
    log = logging.getLogger("obs.test")
    log.info("plain %s", "message", extra={"call_id": "c-1"})
    try:
        raise RuntimeError("boom in a job")
    except RuntimeError:
        log.exception("job failed")
    first, second = parsed(json_lines)[-2:]
    assert first["message"] == "plain message" and first["level"] == "INFO" and first["logger"] == "obs.test"
    assert first["call_id"] == "c-1" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert second["level"] == "ERROR" and "Traceback" in second["exc"] and "boom in a job" in second["exc"]


def test_a_service_process_writes_one_json_object_per_line():
    """What `create_app` and the worker do at start, in a fresh process: every line on
    stderr is JSON, SQL parameters dropped, multi-line tracebacks inside one line."""
    code = textwrap.dedent("""
        import logging
        from plumbing import logs
        logs.setup("DEBUG", "json")
        logging.getLogger("peewee").debug(("SELECT 1 WHERE url = %s", ["https://r.example.com/a?sig=PLANTED"]))
        try:
            raise ValueError("first line\\nsecond line")
        except ValueError:
            logging.getLogger("worker").exception("job failed")
    """)
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    lines = [json.loads(line) for line in run.stderr.splitlines()]
    assert [line["logger"] for line in lines] == ["peewee", "worker"]
    assert lines[0]["message"] == "SELECT 1 WHERE url = %s -- parameters not logged"
    assert "second line" in lines[1]["exc"] and "PLANTED" not in run.stderr


def test_text_format_is_one_readable_line():
    stream = io.StringIO()
    record = logging.LogRecord("obs.text", logging.WARNING, __file__, 1, "hello %s", ("there",), None)
    handler = logs.make_handler("text", stream)
    handler.handle(record)
    assert re.fullmatch(r"\S+ \S+ WARNING obs\.text \[-\] hello there\n", stream.getvalue())
    with pytest.raises(ValueError):
        logs.setup("INFO", "xml")


def test_sql_parameters_never_reach_the_log(wsgi_app, caplog):
    """Peewee logs `(sql, params)` at DEBUG; the parameters (recording URLs with their
    signatures, token hashes, patient data) are dropped, the statement kept."""
    caplog.set_level(logging.DEBUG, logger="peewee")
    with db.connection_context():
        list(Call.select().where(Call.recording_url == "https://rec.example.com/v.wav?sig=PLANTED-SIG-123"))
    sql = [r.getMessage() for r in caplog.records if r.name == "peewee"]
    assert any('FROM "call"' in m for m in sql)
    assert "PLANTED-SIG-123" not in caplog.text


def test_http_client_libraries_stay_at_info_under_a_debug_root(app):
    # Their DEBUG lines carry full URLs (presigned query strings) and signed headers.
    assert logging.getLogger().getEffectiveLevel() == logging.DEBUG  # the audit's session setting
    for name in ("urllib3", "botocore", "boto3", "s3transfer"):
        assert logging.getLogger(name).getEffectiveLevel() >= logging.INFO, name


def test_rendering_the_staff_guides_logs_nothing_under_a_debug_root(caplog):
    """markdown-it-py traces each block rule it tries at DEBUG: thousands of lines at every
    process's start, none of them the service's."""
    logs.install_safety()  # as every entry point does
    caplog.set_level(logging.DEBUG)
    guides = help_pages.Guides()
    assert guides.listed("cs")
    assert [r for r in caplog.records if r.name.startswith("markdown_it")] == []


# --- /metrics ----------------------------------------------------------------------------------


def flush_every_app() -> None:
    """Every app this process built adds what it counted to its Redis now. Each has its own
    recorder and flusher, as each production process has one; an earlier test's app would
    otherwise add its last counts of a route on its flusher's next round, which may fall
    between a test's two scrapes."""
    for flusher in [o for o in gc.get_objects() if isinstance(o, metrics.Flusher)]:
        flusher.recorder.flush(flusher.connection)


def test_metrics_count_and_time_requests_by_route_template(app):
    load(organization(clinic()))
    token = issue_token(["clinic-a"], ["read"])
    route = "/external/v1/clinics/{clinic_slug}/switchboard/is-clinic-opened"
    flush_every_app()
    before = scrape(app.get("/metrics").text)
    for _ in range(3):
        app.post(switchboard_url("clinic-a", "is-clinic-opened"), headers=bearer(token))
    app.post(switchboard_url("clinic-a", "is-clinic-opened"), status=401)
    app.get("/no/such/zzraw-path-id", status=404)
    text = app.get("/metrics").text
    after = scrape(text)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("clinic_http_requests_total", route=route, method="POST", status="200") == 3
    assert delta("clinic_http_requests_total", route=route, method="POST", status="401") == 1
    assert delta("clinic_http_requests_total", route="unmatched", method="GET", status="404") == 1
    assert delta("clinic_http_request_duration_seconds_count", route=route, method="POST", status="200") == 3
    assert (
        delta("clinic_http_request_duration_seconds_bucket", route=route, method="POST", status="200", le="+Inf") == 3
    )
    assert delta("clinic_http_request_duration_seconds_sum", route=route, method="POST", status="200") > 0
    # No tenant data and no raw paths as label values.
    labels = {v for family in text_string_to_metric_families(text) for s in family.samples for v in s.labels.values()}
    assert not any("clinic-a" in v or "zzraw" in v for v in labels) and token not in text


def test_metrics_show_queue_depths_and_redis_state(app):
    samples = scrape(app.get("/metrics").text)
    assert value(samples, "clinic_metrics_redis_up") == 1
    for queue in ("calls", "outbox", "recordings"):  # the worker's queues, and only those
        for state in ("queued", "started", "scheduled", "deferred", "failed"):
            assert ("clinic_queue_jobs", frozenset({"queue": queue, "state": state}.items())) in samples, (queue, state)
    queues = {dict(labels)["queue"] for name, labels in samples if name == "clinic_queue_jobs"}
    assert queues == {"calls", "outbox", "recordings"}


def test_queue_depths_are_read_from_rq_at_scrape_time():
    connection = redis.Redis.from_url(REDIS_URL)
    name = f"obs-{uuid.uuid4().hex[:8]}"  # no worker listens here
    queue = Queue(name, connection=connection)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.RedisCollector(connection, [name]))
    try:
        for _ in range(3):
            queue.enqueue("tests.test_observability.job_returning_word")
        queue.enqueue_in(timedelta(hours=1), "tests.test_observability.job_returning_word")  # not due
        samples = scrape(generate_latest(registry).decode())
        assert value(samples, "clinic_queue_jobs", queue=name, state="queued") == 3
        assert value(samples, "clinic_queue_jobs", queue=name, state="scheduled") == 1
        assert value(samples, "clinic_queue_jobs", queue=name, state="failed") == 0
    finally:
        for key in connection.keys(f"rq:*{name}*"):  # the queue, its registries and jobs
            connection.delete(key)


def test_other_processes_metrics_are_aggregated_through_redis(app):
    """A second process (another gunicorn worker, dyno or the RQ worker) flushes to Redis;
    any web process's scrape shows it."""
    route = f"/other-process/{uuid.uuid4().hex[:6]}"
    code = textwrap.dedent(f"""
        import redis
        from plumbing import metrics
        recorder = metrics.Recorder()
        recorder.request({route!r}, "GET", 200, 0.003)
        recorder.request({route!r}, "GET", 200, 0.2)
        assert recorder.flush(redis.Redis.from_url({REDIS_URL!r}))
    """)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
    samples = scrape(app.get("/metrics").text)
    assert value(samples, "clinic_http_requests_total", route=route, method="GET", status="200") == 2
    assert (
        value(
            samples, "clinic_http_request_duration_seconds_bucket", route=route, method="GET", status="200", le="0.005"
        )
        == 1
    )
    assert (
        value(
            samples, "clinic_http_request_duration_seconds_bucket", route=route, method="GET", status="200", le="0.25"
        )
        == 2
    )


def test_clinic_workers_counts_the_workers_alive_now_even_after_redis_restarted_empty(tmp_path):
    """RQ registers a worker only as it starts: after a Redis restart without persistence
    `rq:workers` was empty and `clinic_workers` read 0 while the workers were busy. Each
    worker's beat (jobs/rq_worker.py, `Presence`) puts it back: the count and RQ's own
    registration are right within a beat of Redis's return; a worker that stops leaves it."""
    from rq import Worker

    from jobs.rq_worker import ClinicWorker
    from tests.support.faults import RedisServer
    from tests.support.servers import wait_until

    with RedisServer(tmp_path) as server:
        connection = server.client()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(metrics.RedisCollector(connection, ["calls"]))

        def counted() -> float:
            return value(scrape(generate_latest(registry).decode()), "clinic_workers")

        workers = [ClinicWorker([Queue("calls", connection=connection)], connection=connection) for _ in range(2)]
        try:
            for worker in workers:
                worker.register_birth()  # as work() starts it (its loop is not needed here)
            assert counted() == 2
            before = connection.info("server")["run_id"]
            server.stop()
            server.start()  # the same port, empty
            # Another server process (a beat may already have put a worker back: asserting
            # an empty count here raced with it on a loaded machine).
            assert connection.info("server")["run_id"] != before
            started = time.monotonic()
            assert wait_until(lambda: counted() == 2, timeout=metrics.WORKER_BEAT_SECONDS + 5, interval=0.1)
            print(f"counted again {time.monotonic() - started:.1f} s after Redis's return")
            assert wait_until(
                lambda: {w.name for w in Worker.all(connection=connection)} == {w.name for w in workers},
                timeout=metrics.WORKER_BEAT_SECONDS + 5,
                interval=0.1,
            ), "RQ's registration is back"
            workers[0].register_death()
            assert counted() == 1, "a worker that stops is no longer counted"
        finally:
            for worker in workers:
                worker.stop_presence()


def _metrics_app(connection_url: str, token: str = "") -> webtest.TestApp:
    app = falcon.App()
    errors.install(app)
    app.add_route(
        "/metrics",
        web_metrics.MetricsEndpoint(
            redis.Redis.from_url(connection_url, socket_connect_timeout=1),
            ["calls"],
            metrics.Recorder(),
            token,
        ),
    )
    return webtest.TestApp(app)


def test_metrics_answer_with_redis_down_and_say_so():
    samples = scrape(_metrics_app("redis://127.0.0.1:1/0").get("/metrics", status=200).text)
    assert value(samples, "clinic_metrics_redis_up") == 0


def test_metrics_token_when_set_is_required():
    app = _metrics_app(REDIS_URL, token="metrics-token-xyz-123")
    assert app.get("/metrics", status=401).json["code"] == "UNAUTHORIZED"
    assert app.get("/metrics", headers={"Authorization": "Bearer wrong"}, status=401)
    assert "clinic_metrics_redis_up" in app.get("/metrics", headers=bearer("metrics-token-xyz-123")).text


def test_unflushed_metrics_survive_a_redis_outage():
    recorder = metrics.Recorder()
    recorder.count(metrics.JOBS, ("outage_probe", "ok"), 2)
    assert recorder.flush(redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)) is False
    connection = redis.Redis.from_url(REDIS_URL)
    before = float(connection.hget(metrics.JOBS.key, "outage_probe\x1fok") or 0)
    assert recorder.flush(connection) is True
    assert float(connection.hget(metrics.JOBS.key, "outage_probe\x1fok")) - before == 2


# --- job metrics (a real RQ worker, in this process, on a private queue) ------------------------


def job_returning_word() -> str:
    return "voice_message"


def job_failing() -> None:
    raise RuntimeError("planted job failure")


def test_job_durations_and_outcomes_are_recorded_by_the_worker(app):
    connection = redis.Redis.from_url(REDIS_URL)
    queue = Queue(f"obs-jobs-{uuid.uuid4().hex[:8]}", connection=connection)
    before = scrape(app.get("/metrics").text)
    queue.enqueue(job_returning_word)
    queue.enqueue(job_failing, retry=Retry(max=1))  # fails, is retried at once, fails for good
    counted = type("Counted", (job_metrics.JobMetrics, SimpleWorker), {"recorder": metrics.Recorder()})
    counted([queue], connection=connection).work(burst=True)
    after = scrape(app.get("/metrics").text)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("clinic_jobs_total", function="job_returning_word", outcome="voice_message") == 1
    assert delta("clinic_jobs_total", function="job_failing", outcome="retried") == 1
    assert delta("clinic_jobs_total", function="job_failing", outcome="failed") == 1
    assert delta("clinic_job_duration_seconds_count", function="job_failing", outcome="failed") == 1
    assert (
        delta("clinic_job_duration_seconds_bucket", function="job_returning_word", outcome="voice_message", le="+Inf")
        == 1
    )


def test_transcription_real_time_factor_is_exposed(app):
    model = f"ggml-probe-{uuid.uuid4().hex[:6]}.bin"
    recorder = metrics.Recorder()  # a worker's
    recorder.transcription(model, audio_seconds=20.0, elapsed_seconds=4.0)  # RTF 0.2
    recorder.transcription(model, audio_seconds=10.0, elapsed_seconds=6.0)  # RTF 0.6
    recorder.transcription(model, audio_seconds=0.0, elapsed_seconds=1.0)  # no audio: not a factor
    assert recorder.flush(redis.Redis.from_url(REDIS_URL))
    samples = scrape(app.get("/metrics").text)
    assert value(samples, "clinic_transcription_real_time_factor_count", model=model) == 2
    assert value(samples, "clinic_transcription_real_time_factor_bucket", model=model, le="0.2") == 1
    assert value(samples, "clinic_transcription_real_time_factor_bucket", model=model, le="0.75") == 2
    assert value(samples, "clinic_transcription_audio_seconds_total", model=model) == 30
    assert value(samples, "clinic_transcription_seconds_total", model=model) == 10


# --- the log audit itself ------------------------------------------------------------------------


def test_audit_detector_finds_each_kind_of_planted_secret():
    audit = log_audit.Audit()
    token = f"csk_{uuid.uuid4().hex}_{'s' * 43}"
    audit.remember("hunter2-password", "provider password")
    planted = [
        f"auth with {token}",
        "downloaded https://rec.example.com/v.wav?sig=PLANTED1",
        "GET /bucket/key?X-Amz-Credential=PLANTED2%2F20260101&X-Amz-Signature=PLANTED2b",
        "headers={'Authorization': 'AWS4-HMAC-SHA256 Credential=AK/x, Signature=" + "a" * 64 + "'}",
        "PUT /storage/k?expires=1700000000&signature=PLANTED3",
        "platform login failed for password hunter2-password",
        "sent Authorization: Bearer PLANTED4eyJhbGciOiJIUzI1NiJ9.payload",
        "(\"INSERT INTO call ...\", ['CA-1', 'https://r.example.com/a.mp3?X=PLANTED5'])",  # peewee's raw form
    ]
    clean = [
        "downloaded 1234 bytes from https://rec.example.com/…#3f2a9c1b",
        'SELECT "t1"."id" FROM "call" AS "t1" WHERE ("t1"."recording_url" = %s) -- parameters not logged',
        "call 6f1c: transcribed 12.0 s of audio in 2.10 s (ggml-base.bin)",
    ]
    for index, line in enumerate(planted + clean):
        audit.add(f"line {index}", line)
    found = {f.source for f in audit.findings()}
    assert found == {f"line {i}" for i in range(len(planted))}
    # The report names the line but masks the secret: CI output is a log too.
    for finding in audit.findings():
        assert "PLANTED" not in finding.excerpt and "hunter2" not in finding.excerpt, finding
        assert token[4:36] not in finding.excerpt and "a" * 64 not in finding.excerpt, finding


def test_audit_detector_finds_personal_data_at_info_and_above():
    audit = log_audit.Audit()
    audit.remember_personal("Jana Nováková", "a patient's name")
    audit.remember_personal("I have a fever since Monday.", "a transcript's sentence")
    planted = [
        "matched caller +420601123456 to a patient",
        "caller +420 601 123 456",
        "callback +1 201-555-0198",
        "heard 601123456",
        "heard 601 123 456 in the recording",
        "login failed for eva.dvorakova@clinic.example.cz",
        "patient Jana Nováková created",
        "transcript: I have a fever since Monday. Call me.",
    ]
    for index, line in enumerate(planted):
        audit.add(f"planted {index}", line, logging.INFO)
    for index, line in enumerate(planted):  # the same at DEBUG: allowed (never on in production)
        audit.add(f"debug {index}", line, logging.DEBUG)
    clean = [
        "call 0b6f1c3e-8d2a-4c55-9a0e-601123456789: downloaded in 0.21 s, transcribed 12.0 s of audio in 2.10 s",
        "GET /external/v1/clinics/clinic-a/patientRequests/3f2a9c1b-6011-2345-6789-601123456000 200 12.34ms",
        "downloaded 123456 bytes from https://rec.example.com/…#3f2a9c1b",
        "request 601123456abcdef0601123456abcdef0 (rid 9e107d9d372bb6826bd81d3542a419d6)",
        "storage purge removed 12 unregistered upload(s); next round in 86400 s, epoch 1700000000",
        "clinic 42: platform token obtained (valid 3600s), expires 2026-01-07T12:00:00+01:00",
        "Listening at: http://127.0.0.1:40123 (4194304), pid 123456, 1234567.891 ms",
        "postgresql://postgres@127.0.0.1:5432/clinic_test ready; redis://127.0.0.1:6379/15",
        "took 601.123456 s; ratio 0.601123456",
    ]
    for index, line in enumerate(clean):
        audit.add(f"clean {index}", line, logging.WARNING)
    found = audit.findings()
    assert {f.source for f in found} == {f"planted {i}" for i in range(len(planted))}, found
    for finding in found:
        assert not re.search(r"601.?123|555|dvorakova|Nováková|fever", finding.excerpt), finding


def test_audit_reads_the_level_of_each_subprocess_line(tmp_path):
    """JSON lines, LOG_FORMAT=text lines and gunicorn's own; a traceback's lines take their
    record's level; a line with no level (a command's stderr) counts as INFO."""
    log = tmp_path / "service.log"
    log.write_text(
        "\n".join(
            [
                '{"ts": "2026-01-07T10:00:00.000Z", "level": "DEBUG", "logger": "transcription", '
                '"message": "+420601000001"}',
                '{"ts": "2026-01-07T10:00:00.000Z", "level": "INFO", "logger": "jobs.calls", '
                '"message": "+420601000002"}',
                "2026-01-07 10:00:00,123 DEBUG transcription [-] heard 601 000 003",
                "Traceback (most recent call last):",
                "ValueError: 601000004",
                "2026-01-07 10:00:00,124 ERROR worker [-] job failed",
                "ValueError: 601000005",
                "[2026-01-07 10:00:00 +0000] [4242] [DEBUG] GET 601000006",
                "[2026-01-07 10:00:00 +0000] [4242] [WARNING] Invalid request 601000007",
                '{"ts": "2026-01-07T10:00:00.000Z", "level": "DEBUG", "logger": "peewee", "message": "SELECT 1"}',
                "printed after a JSON line: 601000008",  # a JSON record is one line: this is no part of it
            ]
        )
        + "\n"
    )
    audit = log_audit.Audit()
    audit.watch(log)
    audit.add("stderr of manage.py user", "user eva@clinic.example.cz created")
    found = audit.findings()
    excerpts = " ".join(f.excerpt for f in found)
    assert {f.source for f in found} == {"service.log", "stderr of manage.py user"}
    assert len([f for f in found if f.source == "service.log"]) == 4, found  # ...02, ...05, ...07, ...08
    assert "+420601000001" not in excerpts  # masked or not found at all: never printed


def test_audit_fails_a_pytest_session_that_logs_a_secret(tmp_path):
    """The real plugin in a real pytest run: a test that passes but logs a token (at any
    level) or a phone number (at INFO) fails the session, and the report prints neither."""
    token = f"csk_{uuid.uuid4().hex}_{'Q' * 43}"
    (tmp_path / "test_leaky.py").write_text(
        textwrap.dedent(f"""
        import logging

        def test_passes_but_leaks():
            logging.getLogger("leaky").debug("using %s", {token!r})

        def test_passes_but_names_a_caller():
            logging.getLogger("leaky").debug("caller +420601000008 (DEBUG: allowed)")
            logging.getLogger("leaky").info("caller %s", "+420 601 000 009")
    """)
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.support.log_audit",
            "-p",
            "no:cacheprovider",
            "-c",
            str(tmp_path / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "2 passed" in run.stdout, run.stdout[-2000:]
    assert run.returncode == 1 and "log audit FAILED: 2 finding(s)" in run.stdout, run.stdout[-2000:]
    assert "API token" in run.stdout and token not in run.stdout + run.stderr
    assert "phone number in test process" in run.stdout and "000 009" not in run.stdout


def test_worker_log_is_audited_at_debug(worker_log):
    from tests.support.worker import worker_env

    assert worker_env("ca.pem")["LOG_LEVEL"] == "DEBUG"
    assert worker_log in log_audit.AUDIT.files
