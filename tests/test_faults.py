"""Faults, each scripted with real parts and asserting an outcome.

1. A worker killed with SIGKILL in the middle of a transcription: the call still ends as
   one request within two minutes of a worker being back, never two.
2. Redis stopped during a burst of recording-complete calls: every call answered 200, and
   every one processed after Redis returns.
3. PostgreSQL stopped and restarted under load: the web process recovers without a
   restart, answers 503 in between, and no 200 claims a call that was not stored.
4. The recording server and the platform API slow beyond their timeouts, or failing:
   retries, then the documented outcome.

1-3 run gunicorn (as the Procfile) and `manage.py worker` as subprocesses on a private
`redis-server` (stopping the shared one is not ours to do; two workers on one Redis would
take each other's jobs), on a database of their own (1, 2) or a private PostgreSQL
cluster (3). 4 uses the session's worker (RECORDING_FETCH_TIMEOUT=5, retries after 1 s, 1 s).
"""

from __future__ import annotations

import io
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import psycopg2
import pytest
import redis
import soundfile as sf
import webtest
from rq import Worker
from rq.job import Job, JobStatus

from app import create_app
from jobs.queueing import is_live
from jobs.refetch import job_id as refetch_job_id
from jobs.relay import job_id
from models import Call, PatientRequest
from plumbing.database import db
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.fault_calls import Store, call_body
from tests.support.faults import PostgresCluster, RedisServer, gunicorn, post_json, prepare_database
from tests.support.https_server import HTTPSTestServer, hang, static
from tests.support.ports import free_port
from tests.support.processes import children, start_worker
from tests.support.processes import stop_process as stop
from tests.support.recordings import FakePlatform, detail_call, play, received_at, stored_call
from tests.support.recordings import onboard as rec_onboard
from tests.support.servers import wait_until
from tests.support.tiers import needs
from tests.support.worker import MODEL, MODEL_EN, processed_call, worker_env
from voicemail import transcription

# Private servers, the web process and workers started and broken, in fixtures and in the tests.
pytestmark = [pytest.mark.gunicorn, pytest.mark.rq_worker, pytest.mark.engine]

AUDIO = ROOT / "tests" / "audio"
SLUG = "fault-clinic"
PATH = f"/external/v1/clinics/{SLUG}/switchboard/recording-complete"
FAULT_DB = PG_URL.rsplit("/", 1)[0] + "/" + PG_URL.rsplit("/", 1)[1].split("?")[0] + "_faults"


# --- the private stack of faults 1 and 2 ---------------------------------------------------


@pytest.fixture(scope="module")
def voicemail(tmp_path_factory) -> bytes:
    """A 85 s voicemail of ten different English messages: long enough that a kill lands
    while whisper.cpp is busy with it."""
    clips = [
        "msg_appointment",
        "msg_callback_short",
        "msg_cancel",
        "msg_earache",
        "msg_fast",
        "msg_fever",
        "msg_refill",
        "msg_results",
        "msg_slow",
        "msg_vaccine",
    ]
    audio = np.concatenate([transcription.load_audio(AUDIO / f"{c}.mp3") for c in clips])
    path = tmp_path_factory.mktemp("voicemail") / "long.wav"
    sf.write(path, audio, transcription.SAMPLE_RATE, subtype="PCM_16")
    assert audio.size / transcription.SAMPLE_RATE > 60
    return path.read_bytes()


@pytest.fixture(scope="module")
def recordings_server(https_ca, voicemail) -> Iterator[HTTPSTestServer]:
    with HTTPSTestServer(ca=https_ca) as server:
        server.route("/long.wav", static(voicemail, "audio/wav"))
        server.route("/short.mp3", static((AUDIO / "msg_callback_short.mp3").read_bytes(), "audio/mpeg"))
        yield server


@pytest.fixture(scope="module")
@needs("gunicorn", "rq_worker", "engine")
def stack(tmp_path_factory, ca_bundle) -> Iterator[dict]:
    """A private Redis, a database of its own, gunicorn on both; workers are per test."""
    workdir = tmp_path_factory.mktemp("fault-stack")
    with RedisServer(workdir) as private_redis:
        # tiny.en for every clinic: the worker warms one small model (faster start).
        env = worker_env(
            ca_bundle,
            DATABASE_URL=FAULT_DB,
            REDIS_URL=private_redis.url,
            WHISPER_MODEL=str(MODEL_EN),
            WHISPER_MODEL_EN=str(MODEL_EN),
            LOG_LEVEL="INFO",
        )
        token = prepare_database(env, SLUG)
        web, base_url = gunicorn(env, workdir / "web.log")
        try:
            yield {
                "env": env,
                "redis": private_redis,
                "token": token,
                "url": base_url + PATH,
                "store": Store(FAULT_DB),
                "dir": workdir,
            }
        finally:
            stop(web)


def _hand_off(stack, recordings_server, sid: str, path: str) -> dict[str, object]:
    """The switchboard hands off a call whose recording is ``path``; its row."""
    assert (
        post_json(stack["url"], stack["token"], call_body(sid, recordings_server.url(path, host="localhost")))[0] == 200
    )
    return stack["store"].call(sid)


def _running(connection, call_id: int) -> bool:
    """The call's ingest job is being worked on."""
    return (
        Job.exists(job_id(call_id), connection)
        and Job.fetch(job_id(call_id), connection=connection).get_status() == JobStatus.STARTED
    )


# --- 1. worker killed mid-transcription ---------------------------------------------------


def test_worker_killed_mid_transcription_still_gives_one_request_soon_after_a_worker_is_back(
    stack, recordings_server, voicemail
):
    env, store, connection = stack["env"], stack["store"], stack["redis"].client()
    log = stack["dir"] / "worker-kill.log"
    first = start_worker(env, log)
    try:
        call = _hand_off(stack, recordings_server, "CA-killed", "/long.wav")

        # Mid-transcription: the whole file is downloaded and the job is still running.
        # (The job is queued by the web request or by the worker's relay.)
        def transcribing() -> bool:
            return recordings_server.bytes_sent("/long.wav") == len(voicemail) and _running(connection, call["id"])

        assert wait_until(transcribing, timeout=60, interval=0.02), log.read_text()[-2000:]
        job = Job.fetch(job_id(call["id"]), connection=connection)
        assert is_live(job), "a running job of a live worker is live"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        stop(first)

    # What the dead worker leaves: the call pending, no request, the job still STARTED
    # and the worker still registered (its key outlives it), yet the job is not live.
    assert store.call("CA-killed")["state"] == "pending" and store.call("CA-killed")["requests"] == 0
    assert job.get_status(refresh=True) == JobStatus.STARTED
    assert connection.exists(f"rq:worker:{job.worker_name}")
    assert not is_live(job)

    second = start_worker(env, log)
    back = time.monotonic()
    try:

        def processed() -> bool:
            found = store.call("CA-killed")
            return found["state"] == "done"

        assert wait_until(processed, timeout=120, interval=0.2), log.read_text()[-3000:]
        recovered_in = time.monotonic() - back
        done = store.call("CA-killed")
        assert done["outcome"] == "voice_message" and done["attempts"] == 2 and done["requests"] == 1
        # Never two: once nothing is queued or running for the call, still one request.
        assert wait_until(lambda: not is_live(Job.fetch(job_id(done["id"]), connection=connection)), timeout=30)
        assert store.call("CA-killed")["requests"] == 1
        print(f"recovered {recovered_in:.1f} s after the new worker registered")
    finally:
        stop(second)


# --- 1b. a job never runs past its limit; attempts are capped -----------------------------


@pytest.mark.alone  # the stop is timed against the job limit: not beside other processes' transcriptions
def test_a_transcription_longer_than_the_job_limit_is_stopped_inside_it_and_still_a_voice_message(
    stack, recordings_server, voicemail
):
    """JOB_TIMEOUT 15 s on an 85 s voicemail with the multilingual model (about 25 s of
    work here): whisper.cpp is stopped from inside before RQ's timeout, which could not
    interrupt it, and the call becomes a voice message with the part transcribed."""
    env = {**stack["env"], "JOB_TIMEOUT": "15", "WHISPER_MODEL": str(MODEL), "WHISPER_MODEL_EN": ""}
    store, connection = stack["store"], stack["redis"].client()
    log = stack["dir"] / "worker-limit.log"
    worker = start_worker(env, log)
    try:
        call = _hand_off(stack, recordings_server, "CA-limit", "/long.wav")
        assert wait_until(lambda: _running(connection, call["id"]), timeout=60, interval=0.05)
        started = time.monotonic()
        assert wait_until(lambda: store.call("CA-limit")["state"] == "done", timeout=60, interval=0.1), log.read_text()[
            -3000:
        ]
        assert time.monotonic() - started < 15 + 2  # the limit, plus the poll's granularity
        done = store.call("CA-limit")
        assert done["outcome"] == "voice_message" and done["requests"] == 1 and done["attempts"] == 1
        [(status, issue, _transcript)] = store.rows(
            "SELECT transcript_status, transcript_issue, transcript FROM call WHERE call_sid = %s", "CA-limit"
        )
        assert (status, issue) in (("unreliable", "incomplete"), ("failed", "timeout"))
        assert Job.fetch(job_id(call["id"]), connection=connection).get_status() == JobStatus.FINISHED
    finally:
        stop(worker)


def test_a_call_whose_attempts_ran_out_still_becomes_a_voice_message_marked_failed(stack, recordings_server):
    """Workers that died on a call (crash, OOM) again and again: after INGEST_MAX_ATTEMPTS
    the call is not transcribed again, and the clinic still gets the message to listen to."""
    env, store = {**stack["env"], "INGEST_MAX_ATTEMPTS": "3"}, stack["store"]
    _hand_off(stack, recordings_server, "CA-attempts", "/short.mp3")
    store.rows("UPDATE call SET attempts = 3 WHERE call_sid = %s RETURNING id", "CA-attempts")
    fetched_before = recordings_server.request_count("/short.mp3")
    log = stack["dir"] / "worker-attempts.log"
    worker = start_worker(env, log)
    try:
        assert wait_until(lambda: store.call("CA-attempts")["state"] == "done", timeout=60, interval=0.1), (
            log.read_text()[-3000:]
        )
        done = store.call("CA-attempts")
        assert done["outcome"] == "voice_message" and done["requests"] == 1 and done["attempts"] == 4
        assert store.rows(
            "SELECT transcript_status, transcript_issue FROM call WHERE call_sid = %s", "CA-attempts"
        ) == [("failed", "attempts_exhausted")]
        # No download, no transcription: the cap is checked before any work.
        assert recordings_server.request_count("/short.mp3") == fetched_before
    finally:
        stop(worker)


# --- 2. Redis stopped during a burst ------------------------------------------------------


def test_redis_stopped_during_a_burst_every_call_answered_and_processed_after_it_returns(stack, recordings_server):
    env, store, private_redis = stack["env"], stack["store"], stack["redis"]
    log = stack["dir"] / "worker-redis.log"
    worker = start_worker(env, log)
    run = uuid.uuid4().hex[:6]
    # Every tenth call has a (short) recording and becomes a voice message request; the
    # others have none: the call alone is stored and processed.
    calls = {
        f"CA-burst-{run}-{i:02d}": (recordings_server.url("/short.mp3", host="localhost") if i % 10 == 0 else None)
        for i in range(50)
    }
    answers: dict[str, int] = {}
    lock, todo = threading.Lock(), queue.Queue()

    def sender() -> None:
        while (item := todo.get()) is not None:
            status, _ = post_json(stack["url"], stack["token"], call_body(*item))
            with lock:
                answers[item[0]] = status

    def feed(items: list[tuple[str, str | None]]) -> None:
        for item in items:
            todo.put(item)

    items = list(calls.items())
    threads = [threading.Thread(target=sender) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        feed(items[:10])
        assert wait_until(lambda: len(answers) == 10, timeout=30)
        feed(items[10:40])
        private_redis.stop()  # mid-burst; SHUTDOWN NOSAVE: queue, jobs and worker registration gone
        assert wait_until(lambda: len(answers) == 40, timeout=60), "intake stalled while Redis was down"
        private_redis.start()
        back = time.monotonic()
        feed(items[40:])
        assert wait_until(lambda: len(answers) == 50, timeout=60)
        assert answers == {sid: 200 for sid in calls}, "every call is answered 200"

        # Redis came back empty: the worker's relay queues every call still pending.
        def all_processed() -> bool:
            states = store.rows(
                "SELECT state, count(*) FROM call WHERE call_sid LIKE %s GROUP BY state", f"CA-burst-{run}-%"
            )
            return dict(states).get("done") == len(calls)

        # Jobs lost with Redis are re-queued by the relay's sweep (grace 1 min, every 30 s).
        assert wait_until(all_processed, timeout=180, interval=0.5), (
            store.rows(
                "SELECT call_sid, state FROM call WHERE call_sid LIKE %s AND state <> 'done'", f"CA-burst-{run}-%"
            ),
            log.read_text()[-3000:],
        )
        print(f"all {len(calls)} calls processed {time.monotonic() - back:.1f} s after Redis returned")
        for sid, url in calls.items():
            found = store.call(sid)
            assert found["requests"] == (1 if url else 0), (sid, found)
            assert found["outcome"] == ("voice_message" if url else "no_recording"), (sid, found)
    finally:
        for _ in threads:
            todo.put(None)
        for t in threads:
            t.join(timeout=30)
        stop(worker)


# --- 2b. the worker's own start, its children, and an exact sweep ---------------


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        kids = children(todo.pop())
        found |= kids
        todo.extend(kids)
    return found


def _gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped (dead all the same)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _registered(connection, pid: int) -> bool:
    try:
        return any(w.pid == pid for w in Worker.all(connection=connection))
    except redis.RedisError:
        return False


def test_a_worker_started_while_redis_is_down_waits_and_works_once_redis_answers(stack, recordings_server):
    """A deploy during a Redis outage: the worker does not exit (RQ's constructor would
    raise), says it waits, and processes the calls stored meanwhile once Redis is up."""
    late_redis = RedisServer(stack["dir"])  # its port is chosen; nothing listens yet
    env, store = {**stack["env"], "REDIS_URL": late_redis.url}, stack["store"]
    log = stack["dir"] / "worker-late-redis.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "worker"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        assert wait_until(lambda: "waiting for Redis" in log.read_text() or proc.poll() is not None, timeout=60)
        _hand_off(stack, recordings_server, "CA-late-redis", "/short.mp3")  # stored; the web's Redis is up
        # Still waiting, well past the second RQ's constructor needs to fail.
        assert wait_until(
            lambda: log.read_text().count("worker waiting for Redis") >= 3 or proc.poll() is not None, timeout=30
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        assert store.call("CA-late-redis")["state"] == "pending"
        with late_redis:
            assert wait_until(lambda: _registered(late_redis.client(), proc.pid), timeout=60), log.read_text()[-3000:]
            assert wait_until(lambda: store.call("CA-late-redis")["state"] == "done", timeout=60, interval=0.2), (
                log.read_text()[-3000:]
            )
            assert store.call("CA-late-redis")["requests"] == 1
            stop(proc)
    finally:
        stop(proc)


def test_a_worker_killed_with_sigkill_leaves_no_process_and_no_scheduler_lock_behind(stack):
    """The scheduler RQ forks, the playback worker and the webhook workers end with the
    worker, and the scheduler's locks are released, so the next worker's scheduler takes
    over."""
    connection = stack["redis"].client()
    log = stack["dir"] / "worker-orphans.log"
    proc = start_worker({**stack["env"], "WEBHOOK_WORKERS": "2"}, log)

    def children_registered() -> list[list[str]]:
        family = _descendants(proc.pid)
        return sorted(w.queue_names() for w in Worker.all(connection=connection) if w.pid in family)

    try:
        # Every child running: the playback worker (plays and e-mails) and the two webhook
        # workers registered, and the scheduler holds its locks and runs (RQ takes the locks
        # before it starts the scheduler's process: a moment with the locks and no process).
        assert wait_until(
            lambda: (
                connection.exists("rq:scheduler-lock:calls")
                and children_registered() == [["recordings", "outbox"], ["webhooks"], ["webhooks"]]
                and len(_descendants(proc.pid)) >= 4
            ),
            timeout=60,
        ), (children_registered(), _descendants(proc.pid), log.read_text()[-3000:])
        family = _descendants(proc.pid)
        assert len(family) >= 4, family  # the scheduler too
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert wait_until(lambda: all(_gone(pid) for pid in family), timeout=30), [
            pid for pid in family if not _gone(pid)
        ]
        assert wait_until(lambda: not connection.exists("rq:scheduler-lock:calls"), timeout=10)
        # Each child said goodbye to RQ on its way out: no registration is left behind.
        assert wait_until(lambda: not any(w.pid in family for w in Worker.all(connection=connection)), timeout=10)
    finally:
        stop(proc)


def test_a_worker_asked_to_stop_while_redis_is_down_stops_with_its_children(stack):
    """Redis gone first (an outage, or a local Redis stopped before the worker): SIGTERM
    still stops the worker, its playback worker and its scheduler (RQ's shutdown talks
    to Redis, and its error used to send the worker back to waiting for it)."""
    with RedisServer(stack["dir"]) as own_redis:
        env = {**stack["env"], "REDIS_URL": own_redis.url}
        log = stack["dir"] / "worker-stop-redis-down.log"
        proc = start_worker(env, log)
        try:
            assert wait_until(lambda: len(_descendants(proc.pid)) >= 2, timeout=30)
            family = _descendants(proc.pid)
            own_redis.stop()
            assert wait_until(
                lambda: "waiting for Redis" in log.read_text() or "Redis unreachable" in log.read_text(), timeout=60
            ), log.read_text()[-3000:]
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            assert wait_until(lambda: all(_gone(pid) for pid in family), timeout=30), log.read_text()[-3000:]
        finally:
            stop(proc)


def test_after_a_redis_restart_mid_transcription_the_sweep_queues_nothing_already_being_worked_on(
    stack, recordings_server, voicemail
):
    """Redis restarted empty while a job transcribes: RQ forgot the job and the worker,
    yet the job is alive; a sweep (`manage.py requeue`, as the relay's) must not queue
    the call again, and the call is transcribed once."""
    env, store, private_redis = stack["env"], stack["store"], stack["redis"]
    log = stack["dir"] / "worker-sweep.log"
    worker = start_worker(env, log)
    try:
        sent_before = recordings_server.bytes_sent("/long.wav")  # earlier tests fetched it too
        call = _hand_off(stack, recordings_server, "CA-sweep", "/long.wav")
        connection = private_redis.client()
        assert wait_until(
            lambda: (
                recordings_server.bytes_sent("/long.wav") - sent_before == len(voicemail)
                and _running(connection, call["id"])
            ),
            timeout=60,
            interval=0.02,
        ), log.read_text()[-2000:]
        private_redis.stop()
        private_redis.start()
        swept = subprocess.run(
            [sys.executable, "manage.py", "requeue"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert "re-queued 0 pending call(s)" in swept.stderr, swept.stderr[-2000:]
        assert store.call("CA-sweep")["state"] == "pending", "the sweep ran while the job was transcribing"
        assert wait_until(lambda: store.call("CA-sweep")["state"] == "done", timeout=120, interval=0.2), (
            log.read_text()[-3000:]
        )
        done = store.call("CA-sweep")
        assert done["attempts"] == 1 and done["requests"] == 1 and done["outcome"] == "voice_message"
    finally:
        stop(worker)


# --- 3. PostgreSQL restarted under load ---------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    pg = PostgresCluster().init()
    pg.start()
    try:
        yield pg
    finally:
        pg.destroy()


def test_postgresql_restarted_under_load_web_recovers_without_restart_and_never_claims_a_lost_call(
    cluster, tmp_path, ca_bundle
):
    with RedisServer(tmp_path) as private_redis:
        # The per-token rate limit is not what this test measures: six senders in a
        # loop pass 1200 hand-offs a minute on a fast machine.
        env = worker_env(
            ca_bundle,
            DATABASE_URL=cluster.url("clinic"),
            REDIS_URL=private_redis.url,
            RATE_LIMIT_HANDOFFS_PER_MINUTE="0",
        )
        token = prepare_database(env, SLUG)
        web, base_url = gunicorn(env, tmp_path / "web.log")
        workers_before = children(web.pid)
        answers: list[tuple[str, int, str, float, float]] = []  # (sid, status, code, sent, answered)
        lock, done = threading.Lock(), threading.Event()

        def sender(n: int) -> None:
            i = 0
            while not done.is_set():
                i += 1
                sid, sent = f"CA-pg-{n}-{i}", time.monotonic()
                try:
                    status, body = post_json(base_url + PATH, token, call_body(sid), timeout=20)
                    code = str(body.get("code", ""))
                except OSError as exc:  # requests' ConnectionError is an OSError
                    status, code = 0, type(exc).__name__
                with lock:
                    answers.append((sid, status, code, sent, time.monotonic()))

        def count(status: int, since: float = 0.0) -> int:
            with lock:
                return sum(1 for a in answers if a[1] == status and a[4] >= since)

        threads = [threading.Thread(target=sender, args=(n,)) for n in range(6)]
        try:
            for t in threads:
                t.start()
            assert wait_until(lambda: count(200) >= 50, timeout=30), answers[-5:]
            cluster.restart("immediate")  # a crash restart: every pooled connection dies
            restarted = time.monotonic()
            assert wait_until(
                lambda: count(200, since=restarted) >= 50 and time.monotonic() - restarted > 1.5, timeout=30
            ), answers[-5:]

            stopping = time.monotonic()
            cluster.stop("fast")  # an outage long enough for the load to hit it
            stopped = time.monotonic()
            assert wait_until(lambda: count(503, since=stopped) >= 20, timeout=30), answers[-5:]
            cluster.start()
            started = time.monotonic()
            assert wait_until(lambda: count(200, since=started) >= 50, timeout=30), answers[-5:]
        finally:
            done.set()
            for t in threads:
                t.join(timeout=30)
            workers_after = children(web.pid)
            stop(web)

        statuses = {a[1] for a in answers}
        assert statuses <= {200, 503}, f"only 200 and 503, never a 500 or a dropped connection: {statuses}"
        assert {a[2] for a in answers if a[1] == 503} == {"SERVICE_UNAVAILABLE"}
        assert workers_after == workers_before, "the web process recovered without a (worker) restart"
        # Once the database is back, every request is a success: no stale pooled
        # connection fails a request after the crash restart or after the outage.
        # (Requests sent just before the stop may be served after it began: not counted.)
        for back, until in ((restarted, stopping - 0.5), (started, float("inf"))):
            after = [a[1] for a in answers if back <= a[3] < until]
            assert after and set(after) == {200}, [
                (a[1], round(a[3] - back, 3)) for a in answers if back <= a[3] < until and a[1] != 200
            ]
        # No false success: every CallSid answered 200 is stored.
        conn = psycopg2.connect(cluster.url("clinic"))
        with conn.cursor() as cur:
            cur.execute("SELECT call_sid FROM call")
            stored = {row[0] for row in cur.fetchall()}
        conn.close()
        succeeded = {a[0] for a in answers if a[1] == 200}
        assert succeeded <= stored, sorted(succeeded - stored)[:10]
        print(f"answers {len(answers)}: 200 x{len(succeeded)}, 503 x{sum(1 for a in answers if a[1] == 503)}")


# --- 4. recording server and platform API slow or failing --------------------------------
# The session's worker: RECORDING_FETCH_TIMEOUT=5, PLATFORM_FETCH_TIMEOUT=5, retries after 1 s, 1 s.


@pytest.fixture
def web_faults(app, rec_config) -> webtest.TestApp:
    """The app as the session worker sees the world (loopback allowed, the session CA),
    playing expired links after waiting 8 s at most for a re-fetch."""
    return webtest.TestApp(create_app(rec_config))


def hand_off_to(web: webtest.TestApp, sid: str, url: str) -> None:
    token = issue_token(["clinic-en"], ["write"])
    web.post_json(
        switchboard_url("clinic-en", "recording-complete"), call_body(sid, url), headers=bearer(token), status=200
    )


@pytest.mark.parametrize("failure", ["slow beyond the timeout", "connection refused"])
def test_recording_server_slow_or_down_gives_a_request_marked_unfetched_with_the_reason(
    web_faults, https_server, worker, failure
):
    load(organization(clinic("clinic-en", tz="America/New_York", country="US", language="en")))
    if failure == "slow beyond the timeout":
        https_server.route("/slow.mp3", hang(max_wait=20))  # never answers within 5 s
        url, reason = https_server.url("/slow.mp3", host="localhost"), "time limit exceeded"
    else:
        url, reason = f"https://localhost:{free_port()}/gone.mp3", "connection error"
    sid = f"CA-unfetched-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    hand_off_to(web_faults, sid, url)

    call = processed_call(sid, timeout=60)
    assert call.outcome == "recording_unavailable" and reason in call.fetch_error, call.fetch_error
    assert call.attempts == 3, "one try and the two configured retries"
    if failure == "slow beyond the timeout":
        assert https_server.request_count("/slow.mp3") == 3
        assert time.monotonic() - started >= 3 * 5, "each try waited out the whole time limit"
    with db.connection_context():
        [request] = PatientRequest.select().where(PatientRequest.call == call.id)
    assert request.kind == "voice_message" and "could not be fetched" in request.title


@pytest.mark.parametrize("failure", ["slow beyond the timeout", "5xx"])
def test_platform_slow_or_failing_answers_503_never_410_then_plays_once_it_is_back(
    web_faults, clock, https_server, worker, failure
):
    platform = FakePlatform(https_server, clock)
    tokens = redis.Redis.from_url(REDIS_URL)
    for key in tokens.scan_iter("platform-token:*"):  # a cached token of an earlier test's platform
        tokens.delete(key)
    rec_onboard(platform)
    sid = f"CA-pbx-{uuid.uuid4().hex[:6]}"
    request = stored_call(sid, recording_sid=f"{sid}.mp3")
    if failure == "slow beyond the timeout":
        platform.serve(f"{sid}.mp3")
        platform.link_delay = 8.0  # beyond PLATFORM_FETCH_TIMEOUT=5
    else:
        https_server.route(platform.path(f"{sid}.mp3"), static(b"busy", "text/plain", status=503))
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))  # the original link has expired

    busy = play(web_faults, request, reader, 503)
    assert busy.json["code"] == "SERVICE_UNAVAILABLE" and int(busy.headers["Retry-After"]) >= 1

    # The job gives up after its two retries: still 503 (never 410), nothing remembered as gone.
    refetch = Job.fetch(refetch_job_id(request.call_id), connection=redis.Redis.from_url(REDIS_URL))
    assert wait_until(lambda: refetch.get_status(refresh=True) == JobStatus.FAILED, timeout=60, interval=0.2)
    assert platform.lookups(f"{sid}.mp3") == 3
    assert play(web_faults, request, reader, 503).json["code"] == "SERVICE_UNAVAILABLE"
    with db.connection_context():
        assert Call.get_by_id(request.call_id).recording_gone_reason is None
    assert detail_call(web_faults, request, reader)["recording"]["state"] in ("fetching", "available")

    # The platform is back: the next plays get a fresh link.
    platform.link_delay = 0.0
    platform.serve(f"{sid}.mp3")
    assert wait_until(lambda: play(web_faults, request, reader).status_int == 302, timeout=30, interval=0.5)


@pytest.mark.alone  # a long transcription must end within its bound: not beside other processes' transcriptions
def test_a_play_is_answered_while_the_worker_transcribes_a_long_voicemail(
    web_faults, clock, https_server, worker, voicemail
):
    """A doctor's play of an expired link does not wait behind another caller's
    voicemail: the worker command's playback worker re-fetches it while the transcription
    worker is busy (before, the play answered 503 after PLATFORM_PLAY_WAIT_SECONDS)."""
    platform = FakePlatform(https_server, clock)
    tokens = redis.Redis.from_url(REDIS_URL)
    for key in tokens.scan_iter("platform-token:*"):  # a cached token of an earlier test's platform
        tokens.delete(key)
    rec_onboard(platform)
    audio, rate = sf.read(io.BytesIO(voicemail))
    long_wav = io.BytesIO()
    # Almost three minutes: a minute or more of work for the worker's one thread in the suite,
    # and the play is answered within seconds.
    sf.write(long_wav, np.concatenate([audio] * 2), rate, format="WAV", subtype="PCM_16")
    https_server.route("/busy-long.wav", static(long_wav.getvalue(), "audio/wav"))
    busy_sid = f"CA-busy-{uuid.uuid4().hex[:6]}"
    web_faults.post_json(
        switchboard_url("clinic-rec", "recording-complete"),
        call_body(busy_sid, https_server.url("/busy-long.wav", host="localhost")),
        headers=bearer(issue_token(["clinic-rec"], ["write"])),
        status=200,
    )
    with db.connection_context():
        busy_call = Call.get(Call.call_sid == busy_sid).id
    connection = redis.Redis.from_url(REDIS_URL)
    assert wait_until(lambda: _running(connection, busy_call), timeout=60, interval=0.05)

    sid = f"CA-play-{uuid.uuid4().hex[:6]}"
    request = stored_call(sid, recording_sid=f"{sid}.mp3")
    platform.serve(f"{sid}.mp3")
    clock.set(received_at(request) + timedelta(minutes=26))  # the original link has expired
    answer = play(web_faults, request, issue_token(["clinic-rec"], ["read"]))
    assert answer.status_int == 302, answer.status
    assert _running(connection, busy_call), "the transcription was still running when the play was answered"
    assert platform.lookups(f"{sid}.mp3") == 1
    assert processed_call(busy_sid, timeout=180).outcome == "voice_message"  # the session worker is free again
