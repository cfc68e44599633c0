"""Bulk patient import: 1,000 patients in one `patients/import-bulk` call.

Through gunicorn as the Procfile runs it, on PostgreSQL: a fresh import of 1,000 new
patients, the same 1,000 again (all updates), and two imports of 1,000 at once (half of
their ids shared). Baseline, in the same run: the least the database work can cost,
the same 1,000 patients, records and external ids written by psycopg2 with three
multi-row INSERTs in one transaction, with no HTTP, validation or phone parsing. Target:
at most 2 s for 1,000 (the proxies in front of the service time out at 30 s).

    .venv/bin/python bench/import_bench.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg2
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.databases import recreate_database  # noqa: E402
from tests.support.faults import RedisServer, gunicorn  # noqa: E402
from tests.support.processes import manage  # noqa: E402
from tests.support.processes import stop_process as stop  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/clinic_bench_import"
SLUG = "demo-clinic"
TARGET_SECONDS = 2.0


def items(prefix: str, count: int = 1000) -> list[dict]:
    return [
        {
            "externalId": f"{prefix}-{i}",
            "externalIdSource": "bench",
            "firstName": f"Jana{i}",
            "lastName": "Nováková",
            "phone": f"+420 601 {i // 1000:03d} {i % 1000:03d}",
            "email": f"jana{i}@example.org",
            "birthDate": "1980-04-12",
        }
        for i in range(count)
    ]


def post(url: str, token: str, batch: list[dict]) -> float:
    started = time.perf_counter()
    answer = requests.post(url, json={"patients": batch}, headers={"Authorization": f"Bearer {token}"}, timeout=120)
    elapsed = time.perf_counter() - started
    answer.raise_for_status()
    failed = [r for r in answer.json()["data"] if r["status"] == "failed"]
    assert not failed, failed[:3]
    return elapsed


def baseline(prefix: str) -> float:
    """Three multi-row INSERTs of the same rows in one transaction (psycopg2 alone)."""
    conn = psycopg2.connect(PG)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, organization_id FROM clinic WHERE slug = %s", (SLUG,))
            clinic_id, org_id = cur.fetchone()
        started = time.perf_counter()
        with conn, conn.cursor() as cur:
            rows = [(str(uuid.uuid4()), item) for item in items(prefix)]
            cur.execute(
                "INSERT INTO patient (id, organization_id, first_name, last_name, phone, email, birth_date, "
                "created_at) VALUES " + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, now())"] * len(rows)),
                [
                    v
                    for pid, it in rows
                    for v in (
                        pid,
                        org_id,
                        it["firstName"],
                        it["lastName"],
                        "+420601000000",
                        it["email"],
                        it["birthDate"],
                    )
                ],
            )
            cur.execute(
                "INSERT INTO patient_record (id, patient_id, clinic_id, status, note, created_at) VALUES "
                + ", ".join(["(%s, %s, %s, 'ACTIVE', '', now())"] * len(rows)),
                [v for pid, _ in rows for v in (str(uuid.uuid4()), pid, clinic_id)],
            )
            cur.execute(
                "INSERT INTO external_id (clinic_id, patient_id, source, value) VALUES "
                + ", ".join(["(%s, %s, %s, %s)"] * len(rows)),
                [v for pid, it in rows for v in (clinic_id, pid, "baseline", it["externalId"])],
            )
        return time.perf_counter() - started
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"baseline": [], "new": [], "again": [], "two at once": []}
    with tempfile.TemporaryDirectory(prefix="import-bench-") as tmp, RedisServer(Path(tmp)) as private_redis:
        env = {
            **os.environ,
            "DATABASE_URL": PG,
            "REDIS_URL": private_redis.url,
            "SECRET_KEY": "bench" * 8,
            "LOG_LEVEL": "WARNING",
        }
        recreate_database(PG)
        manage(env, "migrate")
        manage(env, "onboard", str(ROOT / "examples" / "onboarding.json"))
        token = manage(
            env,
            "token",
            "create",
            "--name",
            "import-bench",
            "--clinic",
            SLUG,
            "--scope",
            "write",
            "--expires-in-days",
            "1",
        )
        web, base_url = gunicorn(env, Path(tmp) / "web.log")
        url = f"{base_url}/external/v1/clinics/{SLUG}/patients/import-bulk"
        try:
            post(url, token, items("warm", 10))
            for run in range(args.repeat):
                figures["baseline"].append(baseline(f"b{run}"))
                figures["new"].append(post(url, token, items(f"n{run}")))
                figures["again"].append(post(url, token, items(f"n{run}")))
                shared = items(f"s{run}", 500)
                both: list[float] = []
                threads = [
                    threading.Thread(target=lambda b=batch, both=both: both.append(post(url, token, b)))
                    for batch in (shared + items(f"x{run}", 500), shared + items(f"y{run}", 500))
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                figures["two at once"].append(max(both))
        finally:
            stop(web)
    base = statistics.median(figures["baseline"])
    print(
        f"\n== patients/import-bulk of 1,000 patients, gunicorn as the Procfile, PostgreSQL; median of "
        f"{args.repeat}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    failures = []
    for name, values in figures.items():
        median = statistics.median(values)
        print(
            f"{name:12s} {median:7.3f} s   x baseline {median / base:6.1f}   runs "
            + " ".join(f"{v:.3f}" for v in values)
        )
        if name != "baseline" and median > TARGET_SECONDS:
            failures.append(f"{name}: {median:.2f} s")
    print("verdict: " + ("every import within 2 s" if not failures else "OVER 2 s: " + "; ".join(failures)))
    print(json.dumps({k: statistics.median(v) for k, v in figures.items()}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
