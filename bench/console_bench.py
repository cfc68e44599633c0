"""Server time of the staff console's pages on a clinic with 10,000 requests.

    .venv/bin/python bench/console_bench.py [--requests 10000] [--samples 200]

Targets: the inbox (its 50 newest open requests) at p95 under 150 ms; a play of
a cached recording link under 20 ms. Each console page is printed beside a baseline
measured in the same run on the same data: the API call that reads the same rows
(`patientRequests/search` with a page of 50, and the API's own play route), so the ratio
says what the console adds to the data layer, whatever the machine's speed.

Real parts: the WSGI app (`create_app`) called in this process (falcon.testing), so what
is timed is the server's own time, without a network; PostgreSQL and Redis of their own
(BENCH_DATABASE_URL, default postgresql://postgres@127.0.0.1:5432/clinic_bench_console,
recreated; BENCH_REDIS_URL, default redis://127.0.0.1:6379/12, flushed). The clinic's
requests: half open, 60 % voice messages with a 400-character transcript, 30 % missed
calls, 10 % created through the API; a second clinic holds as many, which the queries
must walk past. Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import falcon.testing  # noqa: E402
import redis  # noqa: E402

from app import create_app  # noqa: E402
from config import Config  # noqa: E402
from migrations import migrate  # noqa: E402
from models import ApiToken, Call, Clinic, Patient, PatientRequest, StaffMembership, StaffUser  # noqa: E402
from onboarding.writer import onboard  # noqa: E402
from plumbing.database import db  # noqa: E402
from staff import sessions  # noqa: E402
from staff.passwords import hash_password  # noqa: E402
from tests.support.databases import recreate_database  # noqa: E402

DB_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/clinic_bench_console")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
SECRET = "bench-secret-key" * 2
SLUGS = ("bench-a", "bench-b")
TARGETS_MS = {"console inbox (50 newest open)": 150.0, "console play (cached link)": 20.0}
WORDS = [
    "dobrý", "den", "volám", "kvůli", "receptu", "prosím", "o", "zavolání", "zpět", "objednání", "na", "kontrolu",
    "bolest", "zad", "výsledky", "krve", "děkuji", "na", "shledanou",
]  # fmt: skip


def seed(clinic: Clinic, n: int, rng: random.Random) -> None:
    """n requests over the last 60 days, written in batches (insert_many)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    patients = [
        {
            "id": uuid.uuid4(),
            "organization": clinic.organization_id,
            "first_name": rng.choice(["Jana", "Petr", "Eva", "Karel"]),
            "last_name": rng.choice(["Nováková", "Dvořák", "Svobodová", "Černý"]) + str(i),
            "phone": f"+420601{i:06d}",
        }
        for i in range(n // 4)
    ]
    for batch in range(0, len(patients), 1000):
        Patient.insert_many(patients[batch : batch + 1000]).execute()
    calls, requests = [], []
    for i in range(n):
        patient = patients[i % len(patients)]
        created = now - timedelta(seconds=rng.uniform(0, 60 * 86400))
        roll = rng.random()
        kind = "voice_message" if roll < 0.6 else "missed_call" if roll < 0.9 else "standard"
        call_id = None
        if kind != "standard":
            call_id = uuid.uuid4()
            sid = f"REbench{uuid.uuid4().hex}"
            calls.append(
                {
                    "id": call_id,
                    "clinic": clinic.id,
                    "call_sid": f"CA{uuid.uuid4().hex}",
                    "call_from": patient["phone"],
                    "call_to": "+420222000111",
                    "state": "done",
                    "outcome": kind,
                    "received_at": created,
                    "recording_url": f"https://files.example.com/{sid}.mp3",
                    "recording_sid": sid,
                    "has_recording": kind == "voice_message",
                    # A link re-fetched earlier with a day left: the cached-link play.
                    "recording_link": f"https://files.example.com/{sid}.mp3?fresh=1",
                    "recording_link_expires_at": now + timedelta(days=1),
                    "transcript": " ".join(rng.choice(WORDS) for _ in range(60))[:400]
                    if kind == "voice_message"
                    else None,
                    "transcript_status": "reliable" if kind == "voice_message" else None,
                    "transcript_language": "cs" if kind == "voice_message" else None,
                }
            )
        requests.append(
            {
                "id": uuid.uuid4(),
                "clinic": clinic.id,
                "patient": patient["id"],
                "kind": kind,
                "title": kind,
                "created_at": created,
                "call": call_id,
                "done_at": None if rng.random() < 0.5 else created,
            }
        )
    for batch in range(0, n, 1000):
        if calls[batch : batch + 1000]:
            Call.insert_many(calls[batch : batch + 1000]).execute()
    for batch in range(0, n, 1000):
        PatientRequest.insert_many(requests[batch : batch + 1000]).execute()


def timed(samples: int, call: Callable[[], falcon.testing.Result], expect: int) -> list[float]:
    for _ in range(5):  # warm-up: imports, template compilation, connection
        call()
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        result = call()
        out.append(time.perf_counter() - t0)
        if result.status_code != expect:
            raise SystemExit(f"answered {result.status_code}, expected {expect}: {result.text[:300]}")
    return out


def summary(name: str, samples: list[float], baseline: list[float] | None = None) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in samples)
    out: dict[str, Any] = {
        "page": name,
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(ms[int(len(ms) * 0.95) - 1], 2),
    }
    if baseline:
        base = sorted(s * 1000 for s in baseline)
        out["p95_vs_baseline"] = round(out["p95_ms"] / base[int(len(base) * 0.95) - 1], 2)
    if name in TARGETS_MS:
        out["target_p95_ms"] = TARGETS_MS[name]
        out["met"] = out["p95_ms"] < TARGETS_MS[name]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()

    recreate_database(DB_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    app = create_app(Config(database_url=DB_URL, redis_url=REDIS_URL, secret_key=SECRET, log_level="WARNING"))
    migrate(db.obj)
    rng = random.Random(20)
    with db.connection_context():
        onboard(
            {
                "organization": {"slug": "bench-org", "name": "Bench"},
                "clinics": [{"slug": s, "name": s, "timezone": "Europe/Prague", "country": "CZ"} for s in SLUGS],
                "patients": [],
            },
            secret_key=SECRET,
        )
        clinic = Clinic.by_slug(SLUGS[0])
        t0 = time.perf_counter()
        for slug in SLUGS:
            seed(Clinic.by_slug(slug), args.requests, rng)
        seeded = time.perf_counter() - t0
        db.execute_sql("ANALYZE")
        _, token = ApiToken.issue("bench", [clinic], ["read"], expires_in=timedelta(days=1))
        user = StaffUser.create(
            email="bench@example.cz", name="Bench", password_hash=hash_password("bench bench bench")
        )
        StaffMembership.create(user=user, clinic=clinic, role="staff")
        cookie, _ = sessions.start(user, datetime.now(UTC), "127.0.0.1", "bench")
        newest_open = (
            PatientRequest.select()
            .where(
                (PatientRequest.clinic == clinic)
                & PatientRequest.done_at.is_null()
                & (PatientRequest.kind == "voice_message")
            )
            .order_by(PatientRequest.created_at.desc())
            .limit(args.samples)
            .execute()
        )
        played = [str(r.id) for r in newest_open]
        newest = (
            PatientRequest.select(PatientRequest.created_at)
            .where(PatientRequest.clinic == clinic)
            .order_by(PatientRequest.created_at.desc())
            .get()
            .created_at
        )

    client = falcon.testing.TestClient(app)
    console = {"Cookie": f"{sessions.COOKIE}={cookie}"}
    api = {"Authorization": f"Bearer {token}"}
    base = f"/external/v1/clinics/{SLUGS[0]}"
    plays = iter(played * 10)
    pages = iter(played * 10)
    after = newest.replace(tzinfo=UTC).isoformat()

    def api_search() -> falcon.testing.Result:
        return client.simulate_post(base + "/patientRequests/search", headers=api, json={"pagination": {"limit": 50}})

    api_play_ids = iter(played * 10)
    baseline_search = timed(args.samples, api_search, 200)
    baseline_play = timed(
        args.samples,
        lambda: client.simulate_get(f"{base}/patientRequests/{next(api_play_ids)}/recording", headers=api),
        302,
    )
    results = [
        summary("api search (50 newest), baseline", baseline_search),
        summary(
            "console inbox (50 newest open)",
            timed(args.samples, lambda: client.simulate_get("/console/", headers=console), 200),
            baseline_search,
        ),
        summary(
            "console inbox, missed calls",
            timed(
                args.samples,
                lambda: client.simulate_get("/console/", params={"kind": "missed_call"}, headers=console),
                200,
            ),
            baseline_search,
        ),
        summary(
            "console inbox, search by name",
            timed(
                args.samples, lambda: client.simulate_get("/console/", params={"q": "Svobodová1"}, headers=console), 200
            ),
            baseline_search,
        ),
        summary(
            "console live update (nothing new)",
            timed(
                args.samples,
                lambda: client.simulate_get("/console/rows", params={"after": after}, headers=console),
                200,
            ),
            baseline_search,
        ),
        summary(
            "console request page",
            timed(args.samples, lambda: client.simulate_get(f"/console/requests/{next(pages)}", headers=console), 200),
            baseline_search,
        ),
        summary("api play (cached link), baseline", baseline_play),
        summary(
            "console play (cached link)",
            timed(
                args.samples,
                lambda: client.simulate_get(f"/console/requests/{next(plays)}/recording", headers=console),
                302,
            ),
            baseline_play,
        ),
    ]
    print(json.dumps({"requests_per_clinic": args.requests, "clinics": len(SLUGS), "seeded_s": round(seeded, 1)}))
    for r in results:
        print(json.dumps(r, ensure_ascii=False))
    return 0 if all(r.get("met", True) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
