"""What the read trail costs a read: the API's request detail and the console's request page,
each timed with its read-trail row written and without it, in the same run on the same data.

    .venv/bin/python bench/read_trail_bench.py [--requests 5000] [--samples 1000]

Target: the read trail adds at most 25 % to either read's p99 (one INSERT statement,
committed on its own before the answer, without waiting for the WAL's flush; p99 on a
shared two-core machine moves by a tenth from run to run, hence the margin). "Without" is
the same service with `privacy.read_trail.record` replaced by a function that writes
nothing; the two are measured in alternation, one sample of each in turn, over the same
requests, so a slower stretch of the machine falls on both.

Real parts, as bench/console_bench.py: the WSGI app (`create_app`) called in this process
(falcon.testing: the server's own time, no network); PostgreSQL and Redis of their own
(BENCH_DATABASE_URL, default postgresql://postgres@127.0.0.1:5432/clinic_bench_reads,
recreated; BENCH_REDIS_URL, default redis://127.0.0.1:6379/12, flushed); two clinics of
`--requests` requests each (console_bench's mix: 60 % voice messages with a transcript).
Exit status 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

os.environ.setdefault("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/clinic_bench_reads")

import falcon.testing  # noqa: E402
import redis  # noqa: E402
from console_bench import DB_URL, REDIS_URL, SECRET, SLUGS, seed  # noqa: E402

from app import create_app  # noqa: E402
from config import Config  # noqa: E402
from migrations import migrate  # noqa: E402
from models import ApiToken, Clinic, PatientRequest, ReadEvent, StaffMembership, StaffUser  # noqa: E402
from onboarding.writer import onboard  # noqa: E402
from plumbing.database import db  # noqa: E402
from privacy import read_trail  # noqa: E402
from staff import sessions  # noqa: E402
from staff.passwords import hash_password  # noqa: E402
from tests.support.databases import recreate_database  # noqa: E402

TARGET_P99_RATIO = 1.25


def percentile(ms: list[float], p: float) -> float:
    ordered = sorted(ms)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def alternate(
    samples: int, call: Callable[[], falcon.testing.Result], expect: int
) -> tuple[list[float], list[float], int]:
    """(with the trail, without it, rows the trail gained): one sample of each in turn."""
    real = read_trail.record
    with_trail: list[float] = []
    without: list[float] = []
    with db.connection_context():
        before = ReadEvent.select().count()
    for i in range(samples * 2 + 10):
        off = i % 2 == 1
        if off:
            read_trail.record = lambda *args, **kwargs: 0  # type: ignore[assignment]
        try:
            t0 = time.perf_counter()
            result = call()
            took = time.perf_counter() - t0
        finally:
            read_trail.record = real  # type: ignore[assignment]
        if result.status_code != expect:
            raise SystemExit(f"answered {result.status_code}, expected {expect}: {result.text[:300]}")
        if i >= 10:  # the first ten warm up: imports, templates, connections
            (without if off else with_trail).append(took * 1000)
    with db.connection_context():
        gained = ReadEvent.select().count() - before
    return with_trail, without, gained


def summary(name: str, with_trail: list[float], without: list[float], rows: int) -> dict[str, Any]:
    out: dict[str, Any] = {"read": name, "n": len(with_trail), "trail_rows": rows}
    for label, ms in (("with", with_trail), ("without", without)):
        out[f"{label}_p50_ms"] = round(statistics.median(ms), 2)
        out[f"{label}_p95_ms"] = round(percentile(ms, 0.95), 2)
        out[f"{label}_p99_ms"] = round(percentile(ms, 0.99), 2)
    out["p50_ratio"] = round(out["with_p50_ms"] / out["without_p50_ms"], 3)
    out["p99_ratio"] = round(out["with_p99_ms"] / out["without_p99_ms"], 3)
    out["met"] = out["p99_ratio"] <= TARGET_P99_RATIO
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=5_000)
    ap.add_argument("--samples", type=int, default=1_000)
    args = ap.parse_args()

    recreate_database(DB_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    app = create_app(Config(database_url=DB_URL, redis_url=REDIS_URL, secret_key=SECRET, log_level="WARNING"))
    migrate(db.obj)
    rng = random.Random(61)
    with db.connection_context():
        onboard(
            {
                "organization": {"slug": "bench-org", "name": "Bench"},
                "clinics": [{"slug": s, "name": s, "timezone": "Europe/Prague", "country": "CZ"} for s in SLUGS],
                "patients": [],
            },
            secret_key=SECRET,
            now=datetime.now(UTC),
        )
        clinic = Clinic.by_slug(SLUGS[0])
        for slug in SLUGS:
            seed(Clinic.by_slug(slug), args.requests, rng)
        db.execute_sql("ANALYZE")
        _, token = ApiToken.issue("bench", [clinic], ["read"], datetime.now(UTC), expires_in=timedelta(days=1))
        user = StaffUser.create(email="bench@example.cz", name="Bench", password_hash=hash_password("bench bench b"))
        StaffMembership.create(user=user, clinic=clinic, role="staff")
        cookie, _ = sessions.start(user, datetime.now(UTC), "127.0.0.1", "bench")
        messages = [
            str(r.id)
            for r in PatientRequest.select(PatientRequest.id)
            .where((PatientRequest.clinic == clinic) & (PatientRequest.kind == "voice_message"))
            .order_by(PatientRequest.created_at.desc())
            .limit(200)
        ]

    client = falcon.testing.TestClient(app)
    api = {"Authorization": f"Bearer {token}"}
    console = {"Cookie": f"{sessions.COOKIE}={cookie}"}
    base = f"/external/v1/clinics/{SLUGS[0]}"

    def cycling() -> Iterator[str]:
        while True:
            yield from messages

    details, pages = cycling(), cycling()
    results = [
        summary(
            "API request detail (voice message)",
            *alternate(
                args.samples, lambda: client.simulate_get(f"{base}/patientRequests/{next(details)}", headers=api), 200
            ),
        ),
        summary(
            "console request page (voice message)",
            *alternate(
                args.samples, lambda: client.simulate_get(f"/console/requests/{next(pages)}", headers=console), 200
            ),
        ),
    ]
    print(json.dumps({"requests_per_clinic": args.requests, "results": results}, indent=2, ensure_ascii=False))
    return 0 if all(r["met"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
