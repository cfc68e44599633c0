"""What an `Idempotency-Key` costs a create: `patientRequests/create` with a fresh key
each time against the same create without the header, in the same run, on the same
database and web process.

    .venv/bin/python bench/idempotency_bench.py [--database-url postgresql://postgres@127.0.0.1:5432/clinic_bench]
        [--creates 400] [--redis-url redis://127.0.0.1:6379/11]

The database named in ``--database-url`` is DROPPED and recreated, migrated, and the
demo organization (``examples/onboarding.json``) onboarded; a patient is imported.

1. Statements: one create of each kind in this process, every SQL statement Peewee sends
   counted (the app's own logger). The target: the key adds its one indexed lookup and
   the insert of its answer inside the write's transaction, nothing else.
2. Latency: gunicorn as the Procfile runs it (gevent, one worker), one keep-alive
   connection, the two kinds interleaved (plain, keyed, plain, ...) so that a drift of
   the machine hits both alike. Reported: median and p95 of each and the keyed/plain
   ratio of the medians. Target: at most 1.5 (a create is a dozen statements; two more
   and two Redis round trips on loopback).

Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.databases import recreate_database  # noqa: E402
from tests.support.gunicorn import serving, start_gunicorn  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.processes import stop_process  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/clinic_bench"
CLINIC = "demo-clinic"
SECRET = "bench" * 8
MAX_RATIO = 1.5


def setup(url: str, redis_url: str) -> tuple[str, dict[str, str]]:
    """Migrate, onboard the demo organization, issue a token, import a patient."""
    import redis

    from migrations import migrate
    from models import ApiToken, Clinic, RequestType
    from onboarding.writer import onboard
    from plumbing.database import bind_database, db

    recreate_database(url)
    redis.Redis.from_url(redis_url).flushdb()
    bind_database(url, pooled=False)
    with db.connection_context():
        migrate(db.obj)
        onboard(
            json.loads((ROOT / "examples" / "onboarding.json").read_text("utf-8")),
            secret_key=SECRET,
            now=datetime.now(UTC),
        )
        clinic = Clinic.get(Clinic.slug == CLINIC)
        _, token = ApiToken.issue("bench", [clinic], ["read", "write"], datetime.now(UTC))
        type_id = RequestType.get((RequestType.clinic == clinic) & (RequestType.ecrf_id == "SIGNED_CONSENT")).id
    db.obj.close()
    return token, {"type": str(type_id)}


def count_statements(url: str, redis_url: str, token: str, body: dict[str, Any]) -> tuple[int, int]:
    """SQL statements of one create without a key, and those a key adds to one (the
    totals also differ by the token's last-used update, written at most once a minute)."""
    import webtest

    from app import create_app
    from config import Config

    app = webtest.TestApp(
        create_app(Config(database_url=url, redis_url=redis_url, secret_key=SECRET, log_level="WARNING"))
    )
    path = f"/external/v1/clinics/{CLINIC}/patientRequests/create"
    headers = {"Authorization": f"Bearer {token}"}
    app.post_json(path, body, headers=headers)  # warm: the token and clinic caches
    statements: list[str] = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.name == "peewee":  # one record per statement sent (peewee.pool's are others)
                statements.append(record.getMessage())

    logger = logging.getLogger("peewee")
    handler, level = Count(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        app.post_json(path, body, headers=headers)
        plain = len(statements)
        statements.clear()
        app.post_json(path, body, headers={**headers, "Idempotency-Key": str(uuid.uuid4())})
        keyed = len(statements)
        extra = [s for s in statements if "idempotency_key" in s]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    print(f"statements per create: {plain} without a key, {keyed} with one; the key's own: {len(extra)}")
    for statement in extra:
        print(f"  {statement[:110]}")
    return plain, len(extra)


def one(conn: http.client.HTTPConnection, path: str, token: str, body: bytes, key: str | None) -> float:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    started = time.perf_counter()
    conn.request("POST", path, body=body, headers=headers)
    answer = conn.getresponse()
    answer.read()
    elapsed = time.perf_counter() - started
    if answer.status != 200:
        raise SystemExit(f"create answered {answer.status}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--creates", type=int, default=400, help="creates of each kind")
    args = parser.parse_args()

    token, ids = setup(args.database_url, args.redis_url)
    from plumbing.database import bind_database, db

    bind_database(args.database_url, pooled=False)
    with db.connection_context():
        from models import Clinic, Patient

        patient = Patient.select().where(Patient.organization == Clinic.get(Clinic.slug == CLINIC).organization).get()
    body = {"patientId": str(patient.id), "userECRFId": ids["type"], "userNote": "bench"}
    plain_statements, key_statements = count_statements(args.database_url, args.redis_url, token, body)

    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": args.database_url,
        "REDIS_URL": args.redis_url,
        "SECRET_KEY": SECRET,
        "LOG_LEVEL": "WARNING",
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",
    }
    proc = start_gunicorn(
        port,
        "--workers",
        "1",
        "--log-level",
        "warning",
        env=env,
        ready=lambda _: serving(f"http://127.0.0.1:{port}"),
        timeout=60,
    )
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        path = f"/external/v1/clinics/{CLINIC}/patientRequests/create"
        raw = json.dumps(body).encode()
        for _ in range(20):  # warm the worker: its pool, caches and Redis connections
            one(conn, path, token, raw, None)
            one(conn, path, token, raw, str(uuid.uuid4()))
        times: dict[str, list[float]] = {"without a key": [], "with a key": []}
        started = time.perf_counter()
        for _ in range(args.creates):
            times["without a key"].append(one(conn, path, token, raw, None))
            times["with a key"].append(one(conn, path, token, raw, str(uuid.uuid4())))
        wall = time.perf_counter() - started
    finally:
        stop_process(proc, 15)

    print(f"\n{args.creates} creates of each kind, interleaved, one keep-alive connection ({wall:.1f} s)")
    print("| create | median | p95 | creates/s (one client) |")
    print("|---|---|---|---|")
    medians = {}
    for name, samples in times.items():
        samples.sort()
        medians[name] = statistics.median(samples)
        p95 = samples[int(len(samples) * 0.95) - 1]
        print(f"| {name} | {medians[name] * 1000:.2f} ms | {p95 * 1000:.2f} ms | {1 / medians[name]:.0f} |")
    ratio = medians["with a key"] / medians["without a key"]
    print(
        f"\nratio with/without (median): {ratio:.2f} (target <= {MAX_RATIO}); SQL statements of the key: "
        f"{key_statements} (target <= 2) beside the create's {plain_statements}"
    )
    ok = ratio <= MAX_RATIO and key_statements <= 2
    print("OK" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
