"""The retention's purge against the routing checks it must not stall.

A clinic (the demo onboarding file) holds `--requests` (100,000) voice message requests
resolved long ago, each with its call (a transcript) and a patient only that call made:
everything the retention deletes. The three routing checks (`is-clinic-opened`,
`is-on-vacation`, `has-active-request` for a caller with requests of their own) are served
by gunicorn as the Procfile runs it and loaded with wrk; in one run, round after round:

- **idle**: the checks alone, the expired rows in place;
- **purge**: the checks while `manage.py retention run` deletes them all (in the batches
  the workers use).

The figure is each check's p99 during the purge beside its p99 without it, and the purge's
own time and rate. The rows are put back before each purge round.

    .venv/bin/python bench/retention_bench.py [--requests 100000] [--seconds 15] [--rounds 2]   (needs wrk)

Exit status 1 when a check's median p99 during the purge is above `--max-ratio` (3) times
its idle p99 (and 25 ms more), when any answer is not 2xx, or when rows are left.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.handoff_bench import wrk  # noqa: E402
from tests.support.databases import recreate_database  # noqa: E402
from tests.support.faults import RedisServer, gunicorn  # noqa: E402
from tests.support.processes import manage  # noqa: E402
from tests.support.processes import stop_process as stop  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/clinic_bench_retention"
SLUG = "demo-clinic"
BASE = f"/external/v1/clinics/{SLUG}/switchboard"
CALLER = "+420 601 123 456"
WORKERS = os.environ.get("WEB_CONCURRENCY", "2")
CHECKS = {
    "is-clinic-opened": "{}",
    "is-on-vacation": "{}",
    "has-active-request": json.dumps({"callFrom": CALLER}),
}
SCRIPT = 'wrk.method = "POST"\nwrk.body = {body}\n'

# The expired rows, made by the database itself: a patient (a number, nothing else), its
# record, its call (a transcript) and a voice message request resolved a year ago.
SEED = """
WITH numbers AS (
    SELECT n, md5(n::text || %(round)s)::uuid AS p, md5('c' || n::text || %(round)s)::uuid AS c,
           md5('r' || n::text || %(round)s)::uuid AS r
    FROM generate_series(1, %(count)s) AS n
), patients AS (
    INSERT INTO patient (id, organization_id, first_name, last_name, phone, created_at)
    SELECT p, %(org)s, '', '', '+4207' || lpad(n::text, 8, '0'), now() - interval '400 days' FROM numbers
), records AS (
    INSERT INTO patient_record (id, patient_id, clinic_id, status, note, created_at)
    SELECT md5('x' || n::text || %(round)s)::uuid, p, %(clinic)s, 'ACTIVE', 'Created from a phone call.',
           now() - interval '400 days' FROM numbers
), calls AS (
    INSERT INTO call (id, clinic_id, call_sid, call_from, call_to, received_at, state, outcome, attempts,
                      transcript, transcript_status)
    SELECT c, %(clinic)s, 'CA' || %(round)s || '-' || n, '7' || lpad(n::text, 8, '0'), '+420222333444',
           now() - interval '400 days', 'done', 'voice_message', 1,
           'Dobrý den, prosím o zavolání zpět ohledně receptu.', 'reliable' FROM numbers
)
INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at, done_at,
                             call_id)
SELECT r, %(clinic)s, p, 'voice_message', 'Voice message', '', '', now() - interval '400 days',
       now() - interval '399 days', c FROM numbers
"""


def seed(round_number: int, count: int) -> None:
    import psycopg2

    with psycopg2.connect(PG) as conn, conn.cursor() as cur:
        cur.execute("SELECT c.id, c.organization_id FROM clinic c WHERE c.slug = %s", (SLUG,))
        clinic, org = cur.fetchone()
        cur.execute(SEED, {"round": str(round_number), "count": count, "clinic": clinic, "org": org})
        cur.execute("ANALYZE")
    conn.close()


def expired_left() -> int:
    import psycopg2

    with psycopg2.connect(PG) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM patient_request WHERE call_id IS NOT NULL AND done_at IS NOT NULL")
        (left,) = cur.fetchone()
    conn.close()
    return int(left)


def prepare(env: dict[str, str]) -> str:
    """The demo clinic (retention: the defaults), a caller with requests of their own, a token."""
    recreate_database(PG)
    manage(env, "migrate")
    manage(env, "onboard", str(ROOT / "examples" / "onboarding.json"))
    manage(
        env,
        "retention",
        "set",
        "--clinic",
        SLUG,
        "--resolved-call-requests-days",
        "90",
        "--calls-without-request-days",
        "30",
    )
    import psycopg2

    with psycopg2.connect(PG) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, organization_id FROM clinic WHERE slug = %s", (SLUG,))
        clinic, org = cur.fetchone()
        cur.execute(
            "INSERT INTO patient (id, organization_id, first_name, last_name, phone, created_at) "
            "VALUES (gen_random_uuid(), %s, 'Jana', 'Dvořáková', '+420601123456', now()) RETURNING id",
            (org,),
        )
        (patient,) = cur.fetchone()
        cur.execute(
            "INSERT INTO patient_record (id, patient_id, clinic_id, status, note, created_at) "
            "VALUES (gen_random_uuid(), %s, %s, 'ACTIVE', '', now())",
            (patient, clinic),
        )
        for title in ("Prescription refill", "Test results"):
            cur.execute(
                "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, "
                "created_at, done_at) VALUES (gen_random_uuid(), %s, %s, 'standard', %s, '', '', now(), "
                "now())",
                (clinic, patient, title),
            )
    conn.close()
    return manage(
        env,
        "token",
        "create",
        "--name",
        "retention-bench",
        "--clinic",
        SLUG,
        "--scope",
        "read",
        "--expires-in-days",
        "1",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=15, help="wrk's run per check and round")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-ratio", type=float, default=3.0)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    p99: dict[str, dict[str, list[float]]] = {name: {"idle": [], "purge": []} for name in CHECKS}
    failures: list[str] = []
    purges: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory(prefix="retention-bench-") as tmp, RedisServer(Path(tmp)) as private_redis:
        workdir = Path(tmp)
        env = {
            **os.environ,
            "DATABASE_URL": PG,
            "REDIS_URL": private_redis.url,
            "SECRET_KEY": "bench" * 8,
            "LOG_LEVEL": "WARNING",
            "STORAGE_DIR": str(workdir / "storage"),
        }
        token = prepare(env)
        scripts = {}
        for name, body in CHECKS.items():
            scripts[name] = workdir / f"{name}.lua"
            scripts[name].write_text(SCRIPT.format(body=json.dumps(body)))
        web, base_url = gunicorn(env, workdir / "web.log", workers=int(WORKERS))
        try:
            for name in CHECKS:
                wrk(f"{base_url}{BASE}/{name}", token, scripts[name], 2, args.connections, threads=2)  # warm up
            for number in range(args.rounds):
                seed(number, args.requests)
                for name in CHECKS:
                    idle = wrk(
                        f"{base_url}{BASE}/{name}", token, scripts[name], args.seconds, args.connections, threads=2
                    )
                    p99[name]["idle"].append(idle["p99"])
                    failures += [f"{name} idle: non-2xx"] if idle["non2xx"] or idle["socket_errors"] != "none" else []
                started = time.perf_counter()
                purge = subprocess.Popen(
                    [sys.executable, "manage.py", "retention", "run"],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                # The checks in turn for as long as the purge runs (each check at least once).
                turns = 0
                while purge.poll() is None or turns < len(CHECKS):
                    name = list(CHECKS)[turns % len(CHECKS)]
                    during = wrk(
                        f"{base_url}{BASE}/{name}",
                        token,
                        scripts[name],
                        min(args.seconds, 5),
                        args.connections,
                        threads=2,
                    )
                    p99[name]["purge"].append(during["p99"])
                    if during["non2xx"] or during["socket_errors"] != "none":
                        failures.append(f"{name} during the purge: non-2xx")
                    turns += 1
                _, err = purge.communicate()
                took = time.perf_counter() - started
                if purge.returncode != 0:
                    failures.append(f"purge failed: {err[-500:]}")
                purges.append((took, args.requests))
                left = expired_left()
                if left:
                    failures.append(f"round {number}: {left} expired requests left")
        finally:
            stop(web)

    print(
        f"\n== {args.requests} expired voice messages (request, call, patient) purged by `manage.py retention run`; "
        f"wrk -t2 -c{args.connections}; {WORKERS} gunicorn gevent workers; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    for took, count in purges:
        print(f"purge: {count} requests in {took:.1f} s ({count / took:.0f} requests/s, with their calls and patients)")
    print(f"{'check':20s} {'idle p99 ms':>12s} {'purge p99 ms':>13s} {'ratio':>6s}")
    for name, by in p99.items():
        idle, during = statistics.median(by["idle"]), statistics.median(by["purge"])
        ratio = during / idle if idle else float("inf")
        print(
            f"{name:20s} {idle:12.1f} {during:13.1f} {ratio:6.2f}   (purge rounds: "
            f"{', '.join(f'{v:.1f}' for v in by['purge'])})"
        )
        if during > idle * args.max_ratio and during - idle > 25:
            failures.append(f"{name}: p99 {during:.1f} ms during the purge against {idle:.1f} ms idle")
    print(
        "verdict: "
        + ("the checks keep their pace through the purge" if not failures else "BELOW TARGET: " + "; ".join(failures))
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
