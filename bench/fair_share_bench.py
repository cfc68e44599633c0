"""Fair share: how long one clinic's call waits behind another clinic's burst.

Clinic A hands off a burst of calls at once (300 by default, 16 connections), then clinic B
hands off one; measured: B's wait, from B's 200 to B's request existing, with the relay's
fair share (`RELAY_PER_CLINIC=2`) against the order before it (`RELAY_PER_CLINIC=0`:
oldest first, no share), both in the same run, on the same processes' setup: gunicorn as
the Procfile runs it, a real worker (`manage.py worker`, default model), PostgreSQL and a
private redis-server. Every call's recording is 6 s of digital silence served over local
HTTPS (a missed call: downloaded, decoded and found empty by the VAD, no decoding), so a
call costs little and the burst drains in minutes; B's wait is also given in calls' worth
of work (the burst's drain time over its calls). Also printed: the whole burst's drain
time in both modes (the share must not slow a lone clinic down) and B's place among the
requests made.

    .venv/bin/python bench/fair_share_bench.py [--calls 300]

Target: B's request within a few calls' worth of work (the share: 2 of A's ahead at most),
against after all of A's in the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg2
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.databases import recreate_database  # noqa: E402
from tests.support.faults import RedisServer, gunicorn  # noqa: E402
from tests.support.https_server import HTTPSTestServer, static  # noqa: E402
from tests.support.processes import manage, start_worker  # noqa: E402
from tests.support.processes import stop_process as stop  # noqa: E402
from tests.support.servers import wait_until  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/clinic_bench_fair"
SILENCE = ROOT / "tests" / "audio" / "silence_digital.wav"
PATH = "/external/v1/clinics/{slug}/switchboard/recording-complete"
MODES = (("oldest first (before)", "0"), ("fair share, 2 per clinic", "2"))


def rows(sql: str, *params: object) -> list[tuple]:
    conn = psycopg2.connect(PG)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def onboard(env: dict[str, str]) -> str:
    """Two clinics of one group and one switchboard token for both; the token."""
    recreate_database(PG)
    manage(env, "migrate")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as document:
        json.dump(
            {
                "organization": {"slug": "fair-org", "name": "Fair"},
                "clinics": [
                    {"slug": slug, "name": slug, "timezone": "Europe/Prague", "country": "CZ", "language": "cs"}
                    for slug in ("clinic-a", "clinic-b")
                ],
            },
            document,
        )
        document.flush()
        manage(env, "onboard", document.name)
    return manage(
        env,
        "token",
        "create",
        "--name",
        "switchboard",
        "--clinic",
        "clinic-a",
        "--clinic",
        "clinic-b",
        "--scope",
        "write",
        "--expires-in-days",
        "1",
    )


def run_mode(env: dict[str, str], base_url: str, token: str, recording: str, calls: int, log: Path) -> dict:
    rows("TRUNCATE call CASCADE")
    worker = start_worker(env, log)
    local = threading.local()

    def hand_off(slug: str, sid: str) -> None:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        answer = local.session.post(
            base_url + PATH.format(slug=slug),
            timeout=30,
            headers={"Authorization": f"Bearer {token}"},
            json={"CallSid": sid, "CallFrom": "+420602555198", "CallTo": "+420224555100", "RecordingUrl": recording},
        )
        assert answer.status_code == 200, (answer.status_code, answer.text)

    try:
        run = uuid.uuid4().hex[:8]
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: hand_off("clinic-a", f"A-{run}-{i}"), range(calls)))
        burst_sent = time.monotonic() - started
        hand_off("clinic-b", f"B-{run}")
        b_stored = time.monotonic()
        made = "SELECT 1 FROM patient_request r JOIN call c ON c.id = r.call_id WHERE c.call_sid = %s"
        assert wait_until(lambda: rows(made, f"B-{run}"), timeout=3600, interval=0.02), "B's request never came"
        b_wait = time.monotonic() - b_stored
        assert wait_until(
            lambda: rows("SELECT count(*) FROM patient_request")[0][0] == calls + 1, timeout=3600, interval=0.2
        ), "not every call became a request"
        drained = time.monotonic() - started
        order = [
            sid
            for (sid,) in rows(
                "SELECT c.call_sid FROM patient_request r JOIN call c ON c.id = r.call_id ORDER BY r.created_at"
            )
        ]
    finally:
        stop(worker, timeout=60)
    per_call = drained / (calls + 1)
    return {
        "b_wait": b_wait,
        "per_call": per_call,
        "drained": drained,
        "burst_sent": burst_sent,
        "b_place": order.index(f"B-{run}") + 1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="clinic A's burst")
    args = parser.parse_args()
    results: dict[str, dict] = {}
    with (
        tempfile.TemporaryDirectory(prefix="fair-bench-") as tmp,
        RedisServer(Path(tmp)) as private_redis,
        HTTPSTestServer() as recordings,
    ):
        workdir = Path(tmp)
        recordings.route("/silence.wav", static(SILENCE.read_bytes(), "audio/wav"))
        env = {
            **os.environ,
            "DATABASE_URL": PG,
            "REDIS_URL": private_redis.url,
            "SECRET_KEY": "bench" * 8,
            "LOG_LEVEL": "WARNING",
            "UNSAFE_ALLOW_LOOPBACK_FETCH": "1",
            "FETCH_CA_BUNDLE": recordings.ca_path,
            "WHISPER_MODEL": str(ROOT / "var/models/ggml-base.bin"),
            "WHISPER_MODEL_EN": "",
        }
        token = onboard(env)
        web, base_url = gunicorn(env, workdir / "web.log")
        try:
            for label, share in MODES:
                private_redis.client().flushdb()
                results[label] = run_mode(
                    {**env, "RELAY_PER_CLINIC": share},
                    base_url,
                    token,
                    recordings.url("/silence.wav", host="localhost"),
                    args.calls,
                    workdir / f"worker-{share}.log",
                )
        finally:
            stop(web)

    print(
        f"\n== clinic A hands off {args.calls} calls at once (16 connections), then clinic B one; "
        "6 s of silence each (missed calls), one worker"
    )
    print(f"{'relay order':28s} {'B waits':>9s} {'in calls':>9s} {'B place':>8s} {'s/call':>7s} {'all drained':>12s}")
    for label, r in results.items():
        print(
            f"{label:28s} {r['b_wait']:8.2f}s {r['b_wait'] / r['per_call']:9.1f} {r['b_place']:5d}/{args.calls + 1}"
            f" {r['per_call']:7.3f} {r['drained']:11.1f}s"
        )
    before, fair = (results[label] for label, _ in MODES)
    ratio = before["b_wait"] / fair["b_wait"]
    met = fair["b_wait"] / fair["per_call"] <= 5
    print(
        f"B's wait: fair share x{1 / ratio:.3f} of the order before (x{ratio:.0f} shorter); "
        f"drain time x{fair['drained'] / before['drained']:.2f}; "
        f"target B within 5 calls' worth: {'met' if met else 'NOT met'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
