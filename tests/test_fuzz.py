"""Fuzzing from the OpenAPI document: schemathesis against the running service.

The service runs as in production: gunicorn (as the Procfile runs it) on its own
freshly created and migrated PostgreSQL database and its own Redis database, with the
example organization onboarded (`manage.py onboard examples/onboarding.json`) and a
read + write token (`manage.py token create`). Schemathesis (`st run`, a subprocess)
loads the service's own `/openapi.json` and runs every operation with every check, a
fixed seed and a bounded number of cases; the test passes only with zero failures.

Path parameters and id fields draw from dictionaries of real values (the onboarded
clinics, their patients, types, tags and calendars, a request and an upload made
before the run) most of the time, so the cases reach the handlers instead of stopping
at 404; the rest of the time schemathesis generates its own values.

Alone:  TEST_DATABASE_URL=... TEST_REDIS_URL=... .venv/bin/python -m pytest tests/test_fuzz.py -q
Deeper: TEST_FUZZ_MAX_EXAMPLES=200 (cases per operation and phase; default below).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import psycopg2
import pytest
import redis
import requests

from onboarding.writer import stable_id
from tests.conftest import EXAMPLE, FUZZ_REDIS_URL, PG_URL, ROOT
from tests.support.databases import recreate_database
from tests.support.gunicorn import serving_gunicorn
from tests.support.ports import free_port
from tests.support.processes import manage
from tests.support.tiers import needs

BIN = Path(sys.executable).parent
SEED = 20260601
MAX_EXAMPLES = int(os.environ.get("TEST_FUZZ_MAX_EXAMPLES", "50"))
# Bounds the whole `st run`; the run itself takes well under a minute on 2 cores.
RUN_TIMEOUT = 600


def _sibling_database(url: str, suffix: str) -> str:
    parts = urlparse(url)
    return urlunparse(parts._replace(path=parts.path.rstrip("/") + suffix))


FUZZ_DATABASE_URL = _sibling_database(PG_URL, "_fuzz")


@dataclass
class Service:
    base_url: str
    token: str
    log: Path
    ids: dict[str, list[str]]


def _request_from_call(base_url: str, token: str, slug: str, env: dict[str, str]) -> str:
    """A voice message request made from a call, for the recording endpoint: the call is
    handed off through the API, then its ingest job runs once (`jobs.calls.ingest_call`,
    as the worker runs it, without retries). The recording host does not resolve on a
    closed network, so the call ends as "recording could not be fetched"."""
    sid = "fuzz-seed-call"
    r = requests.post(
        f"{base_url}/external/v1/clinics/{slug}/switchboard/recording-complete",
        json={
            "CallSid": sid,
            "CallFrom": "+420 601 123 456",
            "CallTo": "+420 222 000 111",
            "RecordingUrl": "https://recordings.fuzz.example.net/RE-fuzz.mp3",
            "RecordingSid": "RE-fuzz",
        },
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    conn = psycopg2.connect(FUZZ_DATABASE_URL)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM call WHERE call_sid = %s", (sid,))
            (call_id,) = cur.fetchone()
        job = (
            "import sys; from config import Config; from jobs.calls import ingest_call; "
            "from worker import create_worker; "
            "context = create_worker(Config.from_env(), warm_up=False).context; "
            "print(ingest_call(sys.argv[1], context=context))"
        )
        done = subprocess.run(
            [sys.executable, "-c", job, str(call_id)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, "RECORDING_RETRY_DELAYS": "", "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        with conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM patient_request WHERE call_id = %s", (call_id,))
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None, done.stdout + done.stderr
    return str(row[0])


def _seed(base_url: str, token: str, env: dict[str, str]) -> dict[str, list[str]]:
    """Real ids for the dictionaries: what onboarding created, plus a request and an
    uploaded attachment made through the API (so detail, PATCH and attachments have
    something to work on) and a request made from a call (for the recording endpoint)."""
    org = EXAMPLE["organization"]["slug"]
    clinic = EXAMPLE["clinics"][0]
    slug = clinic["slug"]
    patients = [str(stable_id("patient", org, p["key"])) for p in EXAMPLE["patients"]]
    types = [str(stable_id("request-type", slug, t["ecrfId"])) for t in clinic["requestTypes"]]
    calendars = [str(stable_id("calendar", slug, c["name"])) for c in clinic["calendars"]]
    tags = [str(stable_id("tag", slug, t["type"], t["name"])) for t in clinic["tags"]]
    api = f"{base_url}/external/v1/clinics/{slug}"
    auth = {"Authorization": f"Bearer {token}"}

    def post(path: str, body: dict) -> dict:
        r = requests.post(f"{api}{path}", json=body, headers=auth, timeout=10)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()["data"]

    # The ids above must be the ones the service knows, or the dictionaries are noise.
    assert {t["id"] for t in post("/patientRequestTypes/search", {})} <= set(types)
    request = post("/patientRequests/create", {"patientId": patients[0], "userECRFId": types[0]})
    link = post(f"/patientRequests/{request['id']}/attachments/upload-link", {"contentType": "application/pdf"})
    put = requests.put(link["url"], data=b"%PDF-1.4\n%fuzz\n", headers={"Content-Type": "application/pdf"}, timeout=10)
    assert put.status_code == 200, put.text
    post(
        f"/patientRequests/{request['id']}/attachments",
        {"contentType": "application/pdf", "fileHash": link["fileHash"], "description": "consent.pdf"},
    )
    from_call = _request_from_call(base_url, token, slug, env)
    return {
        "slugs": [c["slug"] for c in EXAMPLE["clinics"]],
        "requests": [request["id"], from_call],
        "patients": patients,
        "types": types,
        "calendars": calendars,
        "tags": tags,
        "hashes": [link["fileHash"]],
        "external_ids": ["EXT-1001", "EXT-2001"],
    }


@pytest.fixture(scope="module")
@needs("gunicorn")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service under gunicorn on a free port, its own database, onboarded, with a token."""
    workdir = tmp_path_factory.mktemp("fuzz")
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    recreate_database(FUZZ_DATABASE_URL)
    queue = redis.Redis.from_url(FUZZ_REDIS_URL)
    queue.flushdb()
    env = {
        **os.environ,
        "DATABASE_URL": FUZZ_DATABASE_URL,
        "REDIS_URL": FUZZ_REDIS_URL,
        "SECRET_KEY": "fuzz-secret" * 4,
        "PUBLIC_BASE_URL": base_url,
        "STORAGE_DIR": str(workdir / "storage"),
        "LOG_LEVEL": "WARNING",
        "DB_POOL_SIZE": "8",
        # The recording endpoint waits this long for a link re-fetch; no worker runs here.
        "PBX_PLAY_WAIT_SECONDS": "0.5",
        # Thousands of writes with one token: limits counted (the limiter runs) but never met,
        # or the 429s would cut the fuzzing of the bodies short.
        "RATE_LIMIT_HANDOFFS_PER_MINUTE": "100000000",
        "RATE_LIMIT_WRITES_PER_MINUTE": "100000000",
    }
    manage(env, "migrate")
    manage(env, "onboard", str(ROOT / "examples" / "onboarding.json"))
    slugs = [arg for c in EXAMPLE["clinics"] for arg in ("--clinic", c["slug"])]
    token = manage(
        env,
        "token",
        "create",
        "--name",
        "fuzz",
        *slugs,
        "--scope",
        "read",
        "--scope",
        "write",
        "--expires-in-days",
        "1",
    )
    log = workdir / "gunicorn.log"
    try:
        with serving_gunicorn("--log-level", "warning", env=env, log=log, port=port):
            yield Service(base_url, token, log, _seed(base_url, token, env))
    finally:
        queue.flushdb()  # the queued ingest jobs: no worker serves this database


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _config(ids: dict[str, list[str]]) -> str:
    """schemathesis.toml: dictionaries of real ids bound to parameters and body fields.

    A probability below 1 keeps schemathesis' own values in the mix (unknown clinics,
    malformed and foreign ids)."""
    bindings = {
        "path.clinicSlug": ("slugs", 0.9),
        "path.requestId": ("requests", 0.8),
        "body.patientId": ("patients", 0.8),
        "body.userECRFId": ("types", 0.8),
        "body.filter.patientId": ("patients", 0.7),
        "body.calendarIds[*]": ("calendars", 0.7),
        "body.timeSlotInput.calendarId": ("calendars", 0.7),
        "body.addTagIds[*]": ("tags", 0.7),
        "body.fileHash": ("hashes", 0.7),
        "body.filter.externalId": ("external_ids", 0.5),
    }
    lines = [f"[dictionaries.{name}]\nvalues = {_toml_list(values)}" for name, values in ids.items()]
    lines.append("[parameters]")
    lines += [f'"{key}" = {{ dictionary = "{name}", probability = {p} }}' for key, (name, p) in bindings.items()]
    return "\n".join(lines) + "\n"


def _cases_per_operation(ndjson: Path) -> dict[str, int]:
    """Distinct cases schemathesis sent per operation (all phases; probes of undocumented
    methods count for the operation they probe), from its NDJSON events."""
    cases: dict[str, set[str]] = {}
    for line in ndjson.read_text().splitlines():
        recorder = (json.loads(line).get("ScenarioFinished") or {}).get("recorder") or {}
        if recorder.get("label"):
            cases.setdefault(recorder["label"], set()).update(recorder.get("cases", {}))
    return {label: len(ids) for label, ids in cases.items()}


def test_schemathesis_finds_nothing(service: Service, tmp_path: Path) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(service.ids))
    # The service's own document, fetched over HTTP and handed over verbatim: loaded by
    # URL, schemathesis leaves out the operation serving the document (GET /openapi.json).
    fetched = requests.get(f"{service.base_url}/openapi.json", timeout=10)
    assert fetched.status_code == 200, fetched.text
    document_file = tmp_path / "openapi.json"
    document_file.write_bytes(fetched.content)
    document = fetched.json()
    junit, ndjson = tmp_path / "junit.xml", tmp_path / "events.ndjson"
    cmd = [
        str(BIN / "st"),
        "--config-file",
        str(config),
        "run",
        str(document_file),
        "--url",
        service.base_url,
        "--header",
        f"Authorization: Bearer {service.token}",
        "--seed",
        str(SEED),
        # Every check; positive_data_acceptance and negative_data_rejection through their
        # stricter wrappers in tests/support/fuzz_hooks.py (refusals JSON Schema cannot
        # express, each listed; bulk import items answered one by one).
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance,negative_data_rejection",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--workers",
        "2",
        "--request-timeout",
        "10",
        "--generation-database",
        "none",
        "--no-color",
        "--report",
        "junit,ndjson",
        "--report-junit-path",
        str(junit),
        "--report-ndjson-path",
        str(ndjson),
    ]
    started = time.monotonic()
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.fuzz_hooks", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    assert junit.exists(), output

    suites = ET.parse(junit).getroot()
    testcases = suites.findall(".//testcase")
    failed = [tc for tc in testcases if tc.find("failure") is not None or tc.find("error") is not None]
    per_operation = _cases_per_operation(ndjson)
    summary = "\n".join(f"  {n:5d}  {label}" for label, n in sorted(per_operation.items()))
    print(
        f"schemathesis: {len(testcases)} operations, {sum(per_operation.values())} cases in {elapsed:.0f} s "
        f"(seed {SEED}, max examples {MAX_EXAMPLES})\n{summary}"
    )
    server_log = service.log.read_text(errors="replace")
    details = "\n".join(
        f"--- {tc.get('name')}\n"
        + "\n".join((el.text or el.get("message") or "") for el in tc if el.tag in ("failure", "error"))
        for tc in failed
    )
    assert not failed and done.returncode == 0, f"{details}\n\n{output[-20000:]}\n\ngunicorn log:\n{server_log[-5000:]}"
    # Every documented operation was exercised: nothing filtered out or skipped silently.
    operations = {f"{m.upper()} {p}" for p, item in document["paths"].items() for m in item if m != "parameters"}
    assert {tc.get("name") for tc in testcases} - {"Stateful tests"} == operations, output[-5000:]
    assert set(per_operation) - {"Stateful tests"} == operations, summary
    assert "Traceback" not in server_log, server_log[-5000:]
