"""Play latency of `GET …/patientRequests/{id}/recording`, and token exchanges per re-fetch.

    .venv/bin/python bench/recording_bench.py [--plays 200] [--refetches 100]

Real parts: the WSGI app behind a threaded HTTP server on 127.0.0.1 (requests client,
one connection per play), PostgreSQL and Redis (a database and a Redis db of its own:
BENCH_DATABASE_URL, default postgresql://postgres@127.0.0.1:5432/clinic_bench_rec,
recreated; BENCH_REDIS_URL, default redis://127.0.0.1:6379/13, flushed), a real RQ worker
(`manage.py worker recordings`) and a fake platform API over HTTPS on
127.0.0.1 (tests/support/https_server.py, trustme CA, loopback allowed by the test-only setting).

Scenarios:

1. cached link: the call's link has time left; the play answers 302 from the database;
2. re-fetch: every play is of a different call whose original link has expired, so each
   one queues the re-fetch job, the worker asks the platform for a fresh link, and the
   play answers 302 when the job is done.

Reported: p50 / p95 / max latency per scenario, and the platform's token exchanges over
all re-fetches (target: 1, the cached token serves the rest). Exit status 1 if missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402
from rq import Worker  # noqa: E402

from app import create_app  # noqa: E402
from config import Config  # noqa: E402
from migrations import migrate  # noqa: E402
from models import ApiToken, Call, Clinic, Patient, PatientRecord, PatientRequest  # noqa: E402
from onboarding.writer import onboard  # noqa: E402
from plumbing.database import db  # noqa: E402
from tests.support.clocks import Clock  # noqa: E402
from tests.support.databases import recreate_database  # noqa: E402
from tests.support.https_server import HTTPSTestServer, TestRequest, TestResponse, json_response  # noqa: E402
from tests.support.servers import serve_wsgi, wait_until  # noqa: E402

DB_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/clinic_bench_rec")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
SECRET = "bench-secret-key" * 2  # 32 bytes: the processes refuse a shorter SECRET_KEY
MARKERS = "benchvox"


def platform(server: HTTPSTestServer, n_routes: int) -> None:
    def token(req: TestRequest) -> TestResponse:
        return json_response({"access_token": uuid.uuid4().hex, "expires_in": 3600})

    def link(req: TestRequest) -> TestResponse:
        expires = datetime.now(UTC) + timedelta(hours=2)
        return json_response({"url": server.url("/files" + req.path) + "?sig=x", "expiresAt": expires.isoformat()})

    server.route("/api/auth/token", token, methods=("POST",))
    for i in range(max(n_routes, 1)):
        server.route(f"/api/recordings/rec-{i}.mp3/url", link, methods=("GET",))


def seed(n: int, slug: str) -> list[uuid.UUID]:
    home = Clinic.by_slug(slug)
    patient = Patient.create(organization=home.organization_id, phone="+12015550198")
    PatientRecord.create(patient=patient, clinic=home)
    ids = []
    for i in range(n):
        call = Call.create(
            clinic=home,
            call_sid=f"bench-{uuid.uuid4().hex}",
            call_from="+12015550198",
            call_to="+12015550100",
            recording_url=f"https://files.example.com/rec-{i}.mp3?sig=o",
            recording_sid=f"rec-{i}.mp3",
            source="BenchVox PBX",
            state="done",
            outcome="voice_message",
            transcript="bench",
        )
        ids.append(PatientRequest.create(clinic=home, patient=patient, kind="voice_message", call=call.id).id)
    return ids


def timed_plays(base: str, token: str, ids: list[uuid.UUID], slug: str) -> list[float]:
    out = []
    with requests.Session() as http:
        for rid in ids:
            t0 = time.perf_counter()
            resp = http.get(
                f"{base}/external/v1/clinics/{slug}/patientRequests/{rid}/recording",
                headers={"Authorization": f"Bearer {token}"},
                allow_redirects=False,
                timeout=30,
            )
            out.append(time.perf_counter() - t0)
            if resp.status_code != 302:
                raise SystemExit(f"play answered {resp.status_code}: {resp.text[:200]}")
    return out


def summary(name: str, samples: list[float]) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "scenario": name,
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(ms[int(len(ms) * 0.95) - 1], 2),
        "max_ms": round(ms[-1], 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plays", type=int, default=200)
    ap.add_argument("--refetches", type=int, default=100)
    args = ap.parse_args()

    recreate_database(DB_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    clock = Clock(now=None)  # the real time, shifted by clock.offset
    with HTTPSTestServer() as server:
        platform(server, max(args.plays, args.refetches))
        config = Config(
            database_url=DB_URL,
            redis_url=REDIS_URL,
            secret_key=SECRET,
            clock=clock,
            log_level="WARNING",
            unsafe_allow_loopback_fetch=True,
            fetch_ca_bundle=server.ca_path,
        )
        app = create_app(config)
        migrate(db.obj)
        slug = "bench-clinic"
        with db.connection_context():
            onboard(
                {
                    "organization": {"slug": "bench-org", "name": "Bench"},
                    "clinics": [
                        {
                            "slug": slug,
                            "name": "Bench",
                            "timezone": "Europe/Prague",
                            "country": "CZ",
                            "switchboard": {
                                "apiUrl": server.url("/api"),
                                "username": "u",
                                "password": "p",
                                "sourceMarkers": [MARKERS],
                            },
                        }
                    ],
                    "patients": [],
                },
                secret_key=SECRET,
                now=clock(),
            )
            _, token = ApiToken.issue("bench", [Clinic.by_slug(slug)], ["read"], clock())
            cached = seed(args.plays, slug)
            expired = seed(args.refetches, slug)

        env = {
            **os.environ,
            "DATABASE_URL": DB_URL,
            "REDIS_URL": REDIS_URL,
            "SECRET_KEY": SECRET,
            "UNSAFE_ALLOW_LOOPBACK_FETCH": "1",
            "FETCH_CA_BUNDLE": server.ca_path,
            "LOG_LEVEL": "WARNING",
        }
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "worker", "recordings", "--no-warm-up"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        connection = redis.Redis.from_url(REDIS_URL)

        with serve_wsgi(app) as httpd:
            base = f"http://127.0.0.1:{httpd.server_port}"
            try:
                assert wait_until(
                    lambda: any(w.pid == worker.pid for w in Worker.all(connection=connection)), timeout=60
                )
                timed_plays(base, token, cached[:5], slug)  # warm-up (connections, imports)
                results = [summary("cached link", timed_plays(base, token, cached, slug))]
                clock.offset = timedelta(minutes=26)  # every original link has expired
                server.reset_counters()
                results.append(summary("re-fetch via platform", timed_plays(base, token, expired, slug)))
                exchanges = server.request_count("/api/auth/token")
                lookups = server.request_count() - exchanges
            finally:
                worker.terminate()
                worker.wait(timeout=30)
    for r in results:
        print(json.dumps(r))
    print(
        json.dumps(
            {
                "refetches": lookups,
                "token_exchanges": exchanges,
                "token_exchanges_per_100_refetches": round(exchanges * 100 / max(lookups, 1), 2),
            }
        )
    )
    return 0 if exchanges == 1 and lookups == args.refetches else 1


if __name__ == "__main__":
    raise SystemExit(main())
