"""Request detail with 1000 attachments, and patient search with 100 external ids among
100,000 patients, through the real app on PostgreSQL, against bare SQL in the same run.

    .venv/bin/python bench/api_bench.py [--database-url postgresql://postgres@127.0.0.1:5432/clinic_bench]
        [--patients 100000] [--attachments 1000] [--repeat 30] [--only detail|search]

The database named in ``--database-url`` is DROPPED and recreated, migrated, and the
demo organization (``examples/onboarding.json``) onboarded. Then bulk loads (COPY):
``--patients`` patients, each with a record in ``demo-clinic`` and an external id
there, plus one external id in the sibling clinic for every tenth one; one request with
``--attachments`` medical records.

The app runs in gunicorn (one sync worker, as in production) and is called over HTTP on
127.0.0.1 with a keep-alive connection. Detail runs with each storage backend:
``local``, and ``s3`` (boto3 SigV4 presigning against an endpoint that is never
contacted: presigning is local computation). The first detail call of a fresh worker
presigns every link (2 per attachment); later calls hit the link cache.

Baselines, same run, same database: the same rows read by a bare psycopg2 query (the
attachments of the request; the patients matching the 100 external ids through the
``external_id`` index). ``EXPLAIN`` of the app's search query is printed.

Targets: detail < 300 ms (cold and warm), search < 50 ms. Exit status 1 if missed.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import random
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg2

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.databases import recreate_database  # noqa: E402
from tests.support.gunicorn import serving, start_gunicorn  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.processes import stop_process  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/clinic_bench"
CLINIC = "demo-clinic"
SIBLING = "demo-clinic-brno"
SOURCE = "signing-system"


def setup(url: str) -> tuple[str, dict[str, uuid.UUID]]:
    """Migrate, onboard the demo organization, issue a token; returns it and some ids."""
    from migrations import migrate
    from models import ApiToken, Clinic, RequestType
    from onboarding.writer import onboard
    from plumbing.database import bind_database, db

    bind_database(url, pooled=False)
    with db.connection_context():
        migrate(db.obj)
        onboard(json.loads((ROOT / "examples" / "onboarding.json").read_text("utf-8")), secret_key="bench" * 8)
        clinic = Clinic.get(Clinic.slug == CLINIC)
        sibling = Clinic.get(Clinic.slug == SIBLING)
        _, token = ApiToken.issue("bench", [clinic], ["read", "write"])
        ids = {
            "clinic": clinic.id,
            "sibling": sibling.id,
            "organization": clinic.organization_id,
            "type": RequestType.get((RequestType.clinic == clinic) & (RequestType.ecrf_id == "SIGNED_CONSENT")).id,
        }
    db.obj.close()
    return token, ids


def copy_rows(cur: Any, table: str, columns: list[str], rows: Iterator[tuple[Any, ...]]) -> int:
    buffer = io.StringIO()
    count = 0
    for row in rows:
        buffer.write("\t".join("\\N" if v is None else str(v) for v in row) + "\n")
        count += 1
    buffer.seek(0)
    cur.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN", buffer)
    return count


def load_patients(url: str, ids: dict[str, uuid.UUID], count: int) -> float:
    start = time.perf_counter()
    now = datetime.now(UTC).replace(tzinfo=None)
    patients = [uuid.uuid4() for _ in range(count)]
    conn = psycopg2.connect(url)
    with conn, conn.cursor() as cur:
        copy_rows(
            cur,
            "patient",
            ["id", "organization_id", "first_name", "last_name", "phone", "email", "created_at"],
            (
                (p, ids["organization"], f"First{i}", f"Last{i}", f"+42060{i:07d}", f"p{i}@example.org", now)
                for i, p in enumerate(patients)
            ),
        )
        copy_rows(
            cur,
            "patient_record",
            ["id", "patient_id", "clinic_id", "status", "note", "created_at"],
            ((uuid.uuid4(), p, ids["clinic"], "ACTIVE", "", now) for p in patients),
        )
        copy_rows(
            cur,
            "external_id",
            ["clinic_id", "patient_id", "source", "value"],
            ((ids["clinic"], p, SOURCE, f"EXT-{i:06d}") for i, p in enumerate(patients)),
        )
        # Noise: the same values registered in the sibling clinic must not match.
        copy_rows(
            cur,
            "external_id",
            ["clinic_id", "patient_id", "source", "value"],
            ((ids["sibling"], p, SOURCE, f"EXT-{i:06d}") for i, p in enumerate(patients) if i % 10 == 0),
        )
    with conn.cursor() as cur:
        conn.autocommit = True
        cur.execute("ANALYZE")
    conn.close()
    return time.perf_counter() - start


def load_attachments(url: str, ids: dict[str, uuid.UUID], count: int) -> tuple[uuid.UUID, float]:
    start = time.perf_counter()
    base = datetime.now(UTC).replace(tzinfo=None)
    request_id = uuid.uuid4()
    conn = psycopg2.connect(url)
    with conn, conn.cursor() as cur:
        cur.execute("SELECT patient_id FROM patient_record WHERE clinic_id = %s LIMIT 1", (ids["clinic"],))
        patient = cur.fetchone()[0]
        cur.execute(
            "INSERT INTO patient_request (id, clinic_id, patient_id, request_type_id, kind, title, clinic_note,"
            " user_note, created_at) VALUES (%s, %s, %s, %s, 'standard', 'Signed consent', '', '', %s)",
            (str(request_id), str(ids["clinic"]), patient, str(ids["type"]), base),
        )
        copy_rows(
            cur,
            "medical_record",
            [
                "id",
                "request_id",
                "file_hash",
                "content_type",
                "description",
                "category_type",
                "visible_to_patient",
                "created_at",
            ],
            (
                (
                    uuid.uuid4(),
                    request_id,
                    f"requests/{request_id}/{uuid.uuid4().hex}.pdf",
                    "application/pdf",
                    f"Podepsaný souhlas {i}.pdf",
                    "CONSENT",
                    "f",
                    base + timedelta(milliseconds=i),
                )
                for i in range(count)
            ),
        )
    with conn.cursor() as cur:
        conn.autocommit = True
        cur.execute("ANALYZE")
    conn.close()
    return request_id, time.perf_counter() - start


@contextmanager
def gunicorn(url: str, env: dict[str, str]) -> Iterator[int]:
    """The Procfile's web command with one sync worker, until /openapi.json answers."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    full_env = {
        **os.environ,
        "DATABASE_URL": url,
        "REDIS_URL": "redis://127.0.0.1:6379/11",
        "PUBLIC_BASE_URL": base_url,
        "LOG_LEVEL": "WARNING",
        "SECRET_KEY": "bench" * 8,
        **env,
    }
    proc = start_gunicorn(
        port,
        "--workers",
        "1",
        "--worker-class",
        "sync",
        "--log-level",
        "warning",
        env=full_env,
        ready=lambda _: serving(base_url, "/openapi.json", timeout=5),
    )
    try:
        yield port
    finally:
        stop_process(proc, 15)


class Api:
    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.base = f"/external/v1/clinics/{CLINIC}"

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        self.conn.request(
            method, self.base + path, body=None if body is None else json.dumps(body), headers=self.headers
        )
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
        return json.loads(data)  # type: ignore[no-any-return]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def bench_detail(url: str, token: str, request_id: uuid.UUID, attachments: int, repeat: int) -> bool:
    sql = (
        "SELECT id, request_id, file_hash, content_type, description, category_type, visible_to_patient,"
        " created_at, created_by_id FROM medical_record WHERE request_id = %s"
        " ORDER BY created_at, id LIMIT %s"
    )
    conn = psycopg2.connect(url)
    with conn.cursor() as cur:

        def bare() -> None:
            cur.execute(sql, (str(request_id), attachments + 1))
            assert len(cur.fetchall()) == attachments

        bare()
        baseline = statistics.median(timed(bare) for _ in range(repeat))
    conn.close()
    print(f"\nrequest detail, {attachments} attachments (GET /patientRequests/{{id}})")
    print(f"  baseline: bare SQL reading the same {attachments} rows   median {ms(baseline)}")
    ok = True
    backends = {
        "local": {"STORAGE_BACKEND": "local", "STORAGE_DIR": str(ROOT / "var" / "bench-storage")},
        "s3": {
            "STORAGE_BACKEND": "s3",
            "S3_ENDPOINT_URL": "http://127.0.0.1:9",
            "S3_BUCKET": "bench",
            "S3_REGION": "eu-central-1",
            "S3_ACCESS_KEY_ID": "AKBENCH",
            "S3_SECRET_ACCESS_KEY": "bench-secret",
        },
    }
    for name, env in backends.items():
        with gunicorn(url, env) as port:
            api = Api(port, token)
            api.call("POST", "/patientRequestTypes/search", {})  # warm: imports, DB connection, token
            body: list[dict[str, Any]] = []
            cold = timed(lambda api=api, body=body: body.append(api.call("GET", f"/patientRequests/{request_id}")))
            records = body[0]["data"]["medicalRecords"]
            assert len(records) == attachments and all(r["url"] and r["downloadUrl"] for r in records)
            warm = [timed(lambda api=api: api.call("GET", f"/patientRequests/{request_id}")) for _ in range(repeat)]
            api.conn.close()
        p95 = sorted(warm)[int(len(warm) * 0.95) - 1]
        print(
            f"  {name:5} first call (presigns {2 * attachments} links) {ms(cold)}; cached: median "
            f"{ms(statistics.median(warm))}, p95 {ms(p95)}; median/baseline "
            f"{statistics.median(warm) / baseline:6.1f}x"
        )
        ok &= cold < 0.3 and p95 < 0.3
    return ok


def _short(line: str) -> str:
    """A plan line with its long literal arrays elided."""
    return re.sub(r"'\{([^}]{60,})\}'", lambda m: f"'{{...{m.group(1).count(',') + 1} values}}'", line)


def bench_search(url: str, token: str, patients: int, repeat: int) -> bool:
    rng = random.Random(4)
    batches = [[f"EXT-{i:06d}" for i in rng.sample(range(patients), 100)] for _ in range(repeat + 1)]

    def body(values):
        return {
            "filter": {"externalIds": values, "externalIdSource": SOURCE, "inClinic": True},
            "pagination": {"limit": 100},
        }

    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM clinic WHERE slug = %s", (CLINIC,))
        clinic_id = cur.fetchone()[0]
        sql = (
            "SELECT p.id, p.first_name, p.last_name, p.phone, p.email, p.birth_date, r.status, r.note"
            " FROM external_id e JOIN patient p ON p.id = e.patient_id"
            " JOIN patient_record r ON r.patient_id = p.id AND r.clinic_id = e.clinic_id"
            " WHERE e.clinic_id = %s AND e.source = %s AND e.value = ANY(%s) AND p.merged_into_id IS NULL"
            " ORDER BY p.id"
        )

        def bare(values: list[str]) -> None:
            cur.execute(sql, (clinic_id, SOURCE, values))
            assert len(cur.fetchall()) == 100

        bare(batches[0])
        baseline = statistics.median(timed(lambda b=b: bare(b)) for b in batches[1:])

        # EXPLAIN the app's own query, as Peewee builds it.
        from models import Clinic
        from patients import directory as patients
        from plumbing.database import bind_database, db

        bind_database(url, pooled=False)
        with db.connection_context():
            clinic = Clinic.get(Clinic.slug == CLINIC)
            captured: list[Any] = []
            original = db.obj.execute_sql

            def capture(sql_text: str, params: Any = None, *args: Any, **kwargs: Any) -> Any:
                captured.append((sql_text, params))
                return original(sql_text, params, *args, **kwargs)

            db.obj.execute_sql = capture  # type: ignore[method-assign]
            try:
                patients.search(clinic, body(batches[0])["filter"], None, 100)
            finally:
                db.obj.execute_sql = original  # type: ignore[method-assign]
        db.obj.close()
        plans = []
        for sql_text, params in captured:
            cur.execute("EXPLAIN " + sql_text, params)
            plans.append("\n".join("      " + _short(row[0]) for row in cur.fetchall()))
    conn.close()

    with gunicorn(url, {"STORAGE_BACKEND": "local", "STORAGE_DIR": str(ROOT / "var" / "bench-storage")}) as port:
        api = Api(port, token)
        found = api.call("POST", "/patients/search", body(batches[0]))["data"]
        assert len(found) == 100 and all(p["isInClinic"] and len(p["externalIds"]) == 1 for p in found), found[:2]
        times = [timed(lambda b=b: api.call("POST", "/patients/search", body(b))) for b in batches[1:]]
        api.conn.close()
    median, p95 = statistics.median(times), sorted(times)[int(len(times) * 0.95) - 1]
    print(f"\npatient search, 100 external ids among {patients} patients (POST /patients/search, limit 100)")
    print(f"  baseline: bare indexed SQL for the same 100 patients   median {ms(baseline)}")
    print(f"  app over HTTP: median {ms(median)}, p95 {ms(p95)}; median/baseline {median / baseline:6.1f}x")
    print(f"  the app's {len(plans)} queries, EXPLAIN:")
    for plan in plans:
        print(plan)
        print("      --")
    return p95 < 0.05


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--patients", type=int, default=100_000)
    parser.add_argument("--attachments", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--only", choices=["detail", "search"])
    args = parser.parse_args(argv)

    recreate_database(args.database_url)
    token, ids = setup(args.database_url)
    loaded = load_patients(args.database_url, ids, args.patients)
    request_id, attached = load_attachments(args.database_url, ids, args.attachments)
    print(
        f"loaded {args.patients} patients (+ records, external ids) in {loaded:.1f} s; "
        f"{args.attachments} attachments in {attached:.2f} s (COPY)"
    )
    ok = True
    if args.only in (None, "detail"):
        ok &= bench_detail(args.database_url, token, request_id, args.attachments, args.repeat)
    if args.only in (None, "search"):
        ok &= bench_search(args.database_url, token, args.patients, args.repeat)
    print("\ntargets (detail < 300 ms first call and p95; search p95 < 50 ms):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
