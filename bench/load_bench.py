"""Load: wrk on each routing check and on recording-complete, 64 connections.

Against gunicorn as the Procfile runs it (WEB_CONCURRENCY gevent workers) on
PostgreSQL and a private redis-server, with a real worker (`manage.py worker`) running.
Baseline, measured in the same run on the same server: a bare Falcon app that parses the
same JSON body and answers the same body (bench/handoff_bench.py's echo, one per path).

Checks: zero socket errors and zero non-2xx answers; afterwards the calls in the database
are counted against the 2xx wrk counted (wrk stops counting at its deadline, so up to one
request per connection and run may be stored but not counted), no CallSid twice, and the
worker processes every stored call.

    .venv/bin/python bench/load_bench.py [--seconds 30] [--connections 64]   (needs wrk)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.handoff_bench import WORKERS, calls_script, wrk  # noqa: E402
from tests.support.databases import recreate_database  # noqa: E402
from tests.support.faults import RedisServer, gunicorn, prepare_database  # noqa: E402
from tests.support.processes import start_worker  # noqa: E402
from tests.support.processes import stop_process as stop  # noqa: E402
from tests.support.servers import wait_until  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/clinic_bench_load"
SLUG = "load-clinic"
BASE = f"/external/v1/clinics/{SLUG}/switchboard"

# Each endpoint: its body (a JSON text) and the baseline's canned answer (same shape).
CHECKS = {
    "is-clinic-opened": ("{}", {"isOpen": True}),
    "is-on-vacation": ("{}", {"isOnVacation": False}),
    "has-active-request": ('{"callFrom": "+1 201 555 0198"}', {"hasActiveRequest": False}),
    "recording-complete": (None, {"success": True}),
}

# bench/handoff_bench.py's bare Falcon echo, one route per endpoint with its answer.
BASELINE_APP = """
import json, falcon
ANSWERS = json.loads({answers!r})
class Echo:
    def __init__(self, answer): self.answer = answer
    def on_post(self, req, resp, **kw):
        req.get_media(default_when_empty=None)
        resp.media = self.answer
app = falcon.App()
for name, answer in ANSWERS.items():
    app.add_route("/external/v1/clinics/{{clinic_slug}}/switchboard/" + name, Echo(answer))
"""

STATIC_SCRIPT = """
wrk.method = "POST"
wrk.body = {body}
"""

# No RecordingUrl: the worker stores the outcome without fetching anything.
CALLS_SCRIPT = calls_script("load", '"Status":"completed","Source":"load","Extra":"{}"')


def script_for(workdir: Path, name: str) -> Path:
    body = CHECKS[name][0]
    path = workdir / f"{name}.lua"
    path.write_text(CALLS_SCRIPT if body is None else STATIC_SCRIPT.format(body=json.dumps(body)))
    return path


def calls_in_database() -> tuple[int, int, int]:
    conn = psycopg2.connect(PG)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*), count(DISTINCT call_sid), count(*) FILTER (WHERE state = 'done') FROM call")
            return cur.fetchone()
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="load-bench-") as tmp, RedisServer(Path(tmp)) as private_redis:
        workdir = Path(tmp)
        env = {
            **os.environ,
            "DATABASE_URL": PG,
            "REDIS_URL": private_redis.url,
            "SECRET_KEY": "bench" * 8,
            "LOG_LEVEL": "WARNING",
            "WHISPER_MODEL": str(ROOT / "var/models/ggml-tiny.en.bin"),
            "WHISPER_MODEL_EN": str(ROOT / "var/models/ggml-tiny.en.bin"),
            # wrk's hand-offs with one token: counted (the limiter's cost is measured), never refused.
            "RATE_LIMIT_HANDOFFS_PER_MINUTE": "100000000",
        }
        recreate_database(PG)
        token = prepare_database(env, SLUG)
        (workdir / "baseline_app.py").write_text(
            BASELINE_APP.format(answers=json.dumps({k: v[1] for k, v in CHECKS.items()}))
        )
        worker = start_worker(env, workdir / "worker.log")
        results: dict[str, dict[str, dict]] = {}
        answered = 0
        try:
            for label, app in (("baseline", "baseline_app:app"), ("service", "wsgi:app")):
                web, base_url = gunicorn(
                    {**env, "PYTHONPATH": f"{workdir}:{ROOT}"}, workdir / f"{label}.log", workers=int(WORKERS), app=app
                )
                try:
                    for name in CHECKS:
                        script = script_for(workdir, name)
                        url = base_url + f"{BASE}/{name}"
                        warm = wrk(url, token, script, 2, args.connections, uuid.uuid4().hex[:10])
                        run = wrk(url, token, script, args.seconds, args.connections, uuid.uuid4().hex[:10])
                        results.setdefault(name, {})[label] = run
                        if label == "service":
                            for r in (warm, run):
                                if r["non2xx"] or r["socket_errors"] != "none":
                                    failures.append(
                                        f"{name}: non-2xx {r['non2xx']}, socket errors {r['socket_errors']}"
                                    )
                            if name == "recording-complete":
                                answered = sum(r["requests"] - r["non2xx"] for r in (warm, run))
                finally:
                    stop(web)
            stored, distinct, _ = calls_in_database()
            # The worker drains the backlog of the whole run (tens of thousands of calls, each
            # a refused download and a request; about 40 a second on a two-core machine): allow it
            # 50 ms a call, at least 3 minutes.
            drain_started, drain_limit = time.monotonic(), max(180.0, stored * 0.05)
            processed = wait_until(lambda: calls_in_database()[2] == stored, timeout=drain_limit, interval=1)
            drained_in = time.monotonic() - drain_started
            done_at = calls_in_database()[2]
            if not processed:
                print((workdir / "worker.log").read_text()[-4000:])
        finally:
            stop(worker, timeout=60)

    print(
        f"\n== wrk -t4 -c{args.connections} -d{args.seconds}s per endpoint; {WORKERS} gunicorn workers "
        f"(as the Procfile), PostgreSQL, Redis, a worker running"
    )
    print(
        f"{'endpoint':22s} {'baseline p50/p99 ms':>22s} {'service p50/p99 ms':>22s} {'req/s (svc)':>12s} "
        f"{'x p99':>6s}  errors"
    )
    for name, by in results.items():
        b, s = by["baseline"], by["service"]
        print(
            f"{name:22s} {b['p50']:10.2f} {b['p99']:10.2f} {s['p50']:10.2f} {s['p99']:10.2f} {s['rps']:12.0f} "
            f"{s['p99'] / b['p99']:6.1f}  non-2xx {s['non2xx']}, socket {s['socket_errors']}"
        )
    in_flight = stored - answered
    print(
        f"recording-complete: answered 2xx and counted by wrk {answered}; calls stored {stored} "
        f"(distinct CallSids {distinct}); stored but not counted (in flight at wrk's deadlines) {in_flight}; "
        f"processed by the worker {done_at} (the backlog left after the runs drained in {drained_in:.0f} s)"
    )
    if distinct != stored:
        failures.append("a CallSid stored twice")
    if not 0 <= in_flight <= 2 * args.connections:
        failures.append(f"stored vs answered mismatch: {in_flight}")
    if not processed:
        failures.append(f"only {done_at} of {stored} calls processed within {drain_limit:.0f} s")
    print(
        "verdict: "
        + (
            "zero errors, none lost, none duplicated, all processed"
            if not failures
            else "FAILED: " + "; ".join(failures)
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
