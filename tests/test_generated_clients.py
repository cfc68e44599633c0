"""Clients generated from the running service's /openapi.json, as integrators
make them: openapi-python-client, and openapi-typescript with openapi-fetch.

For each generator: the web process as the Procfile runs it (gunicorn) with the session's
RQ worker, the client generated from the document it serves, then the integrator's code
(tests/clients/drive_python.py, tests/clients/drive.ts) run against it: the three routing
checks, the hand-off of a call, the signed-document flow (steps 1-7, the PDF's bytes
compared after download), the imports (a failed item's field read from its error's
`param`), the RateLimit-Policy and RateLimit fields of the counted writes (the requests
left counting down), tags and a PATCH, and the request the hand-off made, with its call
and the recording's redirect. Then the writes' budget as the integrator sees it, read off
the answers' headers: whole again once the `t` seconds it names have passed, counting down
request by request, spent (the 429's error object carries `rateLimit`, the same numbers as
its fields) and allowed again after `Retry-After`. The TypeScript code must pass
`tsc --noEmit --strict`. Both print the same lines, checked here against the database.

Then each client reads every answer the service can give (tests/support/provoke.py: every
error code, every reason a recording is gone, every value of every enumeration): the
Python client parses each through its operation's own code and writes it back unchanged
(tests/clients/read_answers.py); in TypeScript each body is a value of its operation's
answer type, compiled with `--strict` (an unknown field, a missing one or a value outside
an enumeration does not compile).

The generators come from bin/setup (`.venv-clients`, `tests/clients/node_modules`);
nothing is fetched at test time but the service's own document.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from models import Call, MedicalRecord, PatientRequest
from plumbing.database import db
from tests.conftest import PG_URL, REDIS_URL
from tests.support import ROOT, SECRET_KEY, issue_token, load
from tests.support.contract import contract
from tests.support.gunicorn import serving_gunicorn
from tests.support.https_server import static
from tests.support.live_service import signing_organization
from tests.support.ports import free_port
from tests.support.provoke import Provoked, every_answer
from tests.support.tiers import needs
from web import openapi

CLIENTS = ROOT / "tests" / "clients"
TOOLS = ROOT / ".venv-clients" / "bin"
NODE_BIN = CLIENTS / "node_modules" / ".bin"
SILENCE = ROOT / "tests" / "audio" / "silence_digital.wav"
PDF = b"%PDF-1.7\n" + bytes(range(256)) * 64 + b"\n%%EOF\n"
# Generous: two cores shared with other suites; tsc alone takes 5-20 s.
TIMEOUT = 300


def run(command: list[str], cwd: Path, **env: str) -> str:
    done = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={"PATH": f"{TOOLS}:{NODE_BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), **env},
    )
    assert done.returncode == 0, f"{command[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module", autouse=True)
def generators() -> None:
    missing = [
        str(p)
        for p in (TOOLS / "openapi-python-client", NODE_BIN / "openapi-typescript", NODE_BIN / "tsc")
        if not p.exists()
    ]
    assert not missing, f"bin/setup installs the client generators; missing: {missing}"


@pytest.fixture
@needs("gunicorn")
def service(app, tmp_path: Path, https_server, worker) -> Iterator[str]:
    """The web process as the Procfile starts it (gunicorn), on the suite's database."""
    load(signing_organization())
    https_server.route("/rec/CA-generated.wav", static(SILENCE.read_bytes(), "audio/wav"))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    # Loopback recording URLs pass intake (the session's worker, which fetches them, trusts the test CA).
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "DB_POOL_SIZE": "2",
        "STORAGE_BACKEND": "local",
        "STORAGE_DIR": str(tmp_path / "storage"),
        "PUBLIC_BASE_URL": base_url,
        "UNSAFE_ALLOW_LOOPBACK_FETCH": "1",
        "LOG_LEVEL": "WARNING",
    }
    with serving_gunicorn(
        "--workers", "1", env=env, log=tmp_path / "gunicorn.log", port=port, timeout=30, stop_timeout=15
    ):
        yield base_url


def expected_lines(recording_sid: str, sha256: str) -> list[str]:
    """What both drivers print, whatever the language (the clinic's hours and holidays aside)."""
    return [
        "hand-off: success=true",
        "1. type: Signed consent requiresSignature=false",
        "2. patient: Jana Nováková tags= externalIds=signing-system:EXT-1 next=null",
        "import: created=true bulk=created,failed failed=1:VALIDATION_FAILED:/phone",
        'rate limits: "handoffs";q=1200;w=60 "writes";q=600;w=60 counting down=true',
        "3. request: Signed consent kind=standard doneAt=null",
        "3. retried with its Idempotency-Key: same request=true",
        "4. upload link issued",
        "5. upload: 200",
        f"6. attachment: application/pdf sha256={sha256}",
        f"7. read back: {len(PDF)} bytes, identical; category=CONSENT",
        "patch: tags=needs-callback done=true",
        f"call: sid={recording_sid} kind=missed_call transcriptStatus=null recording=available",
        "recording: 302 to the call's link=true",
        "budget: writes whole again after t=true remaining=limit-1=true counting down=true",
        "429: RATE_LIMITED policy=writes limit=600 remaining=0 reset>0=true as its fields=true Retry-After>0=true",
        "after Retry-After: 400 VALIDATION_FAILED /phone counted=true",
    ]


def check_run(output: str, token: str) -> None:
    sha256 = hashlib.sha256(PDF).hexdigest()
    lines = output.splitlines()
    assert lines[0].startswith("checks: open=") and lines[0].endswith(" active=false"), output
    assert lines[1:] == expected_lines("CA-generated", sha256), output
    assert token not in output and "signature=" not in output
    with db.connection_context():
        [record] = MedicalRecord.select()
        assert record.sha256 == sha256 and record.category_type == "CONSENT"
        call = Call.get(Call.call_sid == "CA-generated")
        assert call.source == "generated-client" and call.outcome == "missed_call"
        assert PatientRequest.select().where(PatientRequest.call == call.id).count() == 1
        # The create and the registration were each sent twice with one Idempotency-Key: one of each.
        assert PatientRequest.select().where(PatientRequest.kind == "standard").count() == 1


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def read_by_clients(answers: list[Provoked]) -> list[tuple[Provoked, dict]]:
    """The answers a generated client has a function for (not the local storage's raw
    bytes, not the 404 and 405 of paths no operation has), with their operation."""
    c = contract()
    out = []
    for answer in answers:
        template = c.route(answer.path)
        op = c.document["paths"].get(template, {}).get(answer.method.lower()) if template else None
        # Not the document itself: it is any object to a client, its fields none of the client's.
        if op is not None and op["tags"] != ["storage"] and op["operationId"] != "getOpenApiDocument":
            out.append((answer, op))
    return out


def corpus(app, config, clock, example) -> list[tuple[Provoked, dict]]:
    answers = read_by_clients(every_answer(app, config, clock, example))
    assert len(answers) > 60 and {a.status for a, _ in answers} >= {200, 302, 400, 404, 409, 410, 429, 500, 503}
    return answers


def python_answers(answers: list[tuple[Provoked, dict]], path: Path) -> Path:
    path.write_text(
        json.dumps(
            [
                {
                    "operation": op["operationId"],
                    "package": snake(op["tags"][0].replace(" ", "_")),
                    "module": snake(op["operationId"]),
                    "status": a.status,
                    "headers": a.headers,
                    "json": a.content_type == "application/json",
                    "body": a.body.decode(),
                }
                for a, op in answers
            ]
        ),
        "utf-8",
    )
    return path


def typescript_answers(answers: list[tuple[Provoked, dict]]) -> str:
    lines = ['import type { operations } from "./schema.js";', ""]
    for number, (a, op) in enumerate(answers):
        if a.content_type == "application/json" and a.body:
            kind = f'operations["{op["operationId"]}"]["responses"][{a.status}]["content"]["application/json"]'
            lines.append(f"export const answer{number}: {kind} = {a.body.decode()};")
    return "\n".join(lines) + "\n"


def driver_arguments(base_url: str, token: str, https_server, tmp_path: Path) -> list[str]:
    pdf = tmp_path / "signed.pdf"
    pdf.write_bytes(PDF)
    return [base_url, token, "clinic-a", str(pdf), "CA-generated", https_server.url("/rec/CA-generated.wav")]


def test_the_python_client_runs_the_whole_flow_typed_and_reads_every_answer(
    service: str, tmp_path: Path, https_server, app, config, clock, example
) -> None:
    package = tmp_path / "clinic_client"
    generated = run(
        [
            str(TOOLS / "openapi-python-client"),
            "generate",
            "--url",
            f"{service}/openapi.json",
            "--output-path",
            str(package),
            "--meta",
            "none",
        ],
        tmp_path,
    )
    # Everything is generated but the raw bytes (`*/*`) of the local storage backend's URLs,
    # which take a plain HTTP client anyway.
    warned = [line for line in generated.splitlines() if line.startswith("WARNING parsing")]
    assert warned and all(" /storage/{key} " in line for line in warned), generated
    # The webhooks' body is a type of its own (the events API answers the same object).
    assert (package / "models" / "event.py").is_file() and (package / "models" / "event_data.py").is_file()
    token = issue_token(["clinic-a"], ["read", "write"])
    output = run(
        [
            str(TOOLS / "python"),
            str(CLIENTS / "drive_python.py"),
            *driver_arguments(service, token, https_server, tmp_path),
        ],
        tmp_path,
        PYTHONPATH=str(tmp_path),
    )
    check_run(output, token)
    answers = corpus(app, config, clock, example)
    read = run(
        [
            str(TOOLS / "python"),
            str(CLIENTS / "read_answers.py"),
            str(python_answers(answers, tmp_path / "answers.json")),
        ],
        tmp_path,
        PYTHONPATH=str(tmp_path),
    )
    assert len(read.splitlines()) == len(answers), read


def test_the_typescript_client_runs_the_whole_flow_typed_under_strict_and_types_every_answer(
    service: str, tmp_path: Path, https_server, app, config, clock, example
) -> None:
    work = tmp_path / "ts"
    work.mkdir()
    (work / "node_modules").symlink_to(CLIENTS / "node_modules")
    (work / "package.json").write_text('{"type": "module"}\n')
    shutil.copy(CLIENTS / "drive.ts", work / "drive.ts")
    run(["openapi-typescript", f"{service}/openapi.json", "-o", "schema.d.ts"], work)
    schema = (work / "schema.d.ts").read_text("utf-8")
    assert "export interface webhooks" in schema and '"request.created"' in schema, "the webhooks' bodies typed"
    compiler = [
        "tsc",
        "--strict",
        "--target",
        "es2022",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
        "--types",
        "node",
    ]
    # The compilation that emits checks under --strict too: tsc fails on any type error,
    # emitted or not (a --noEmit run before it was the same check, seconds of CPU again).
    run([*compiler, "--outDir", "out", "drive.ts"], work)
    token = issue_token(["clinic-a"], ["read", "write"])
    output = run(["node", "out/drive.js", *driver_arguments(service, token, https_server, tmp_path)], work)
    check_run(output, token)
    # After the run: provoking every answer writes rows the run's checks count.
    (work / "answers.ts").write_text(typescript_answers(corpus(app, config, clock, example)), "utf-8")
    run([*compiler, "--noEmit", "answers.ts"], work)


def test_every_operation_has_an_operation_id_and_every_answer_object_lists_required() -> None:
    document = openapi.document()
    ids = [
        op.get("operationId")
        for item in document["paths"].values()
        for method, op in item.items()
        if method != "parameters"
    ]
    assert None not in ids and len(ids) == len(set(ids)), ids
    assert {
        "searchPatientRequestTypes",
        "searchPatients",
        "importPatient",
        "importPatientsBulk",
        "createPatientRequest",
        "createUploadLink",
        "registerAttachment",
        "getPatientRequest",
        "searchPatientRequests",
        "listTags",
        "updatePatientRequest",
        "isClinicOpened",
        "isOnVacation",
        "hasActiveRequest",
        "recordingComplete",
        "getRecording",
    } <= set(ids)
    schemas = document["components"]["schemas"]
    # Every component an answer refers to, and the ones those refer to.
    pending: list[object] = [
        op["responses"] for item in document["paths"].values() for method, op in item.items() if method != "parameters"
    ]
    answered: set[str] = set()
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            name = str(node.get("$ref", "")).rsplit("/", 1)[-1]
            if name in schemas and name not in answered:
                answered.add(name)
                pending.append(schemas[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    objects: list[tuple[str, dict]] = []

    def walk(where: str, schema: object) -> None:
        if isinstance(schema, dict):
            if schema.get("type") == "object" and schema.get("properties"):
                objects.append((where, schema))
            for key, value in schema.items():
                walk(f"{where}.{key}", value)
        elif isinstance(schema, list):
            for index, value in enumerate(schema):
                walk(f"{where}[{index}]", value)

    for name in answered:
        walk(name, schemas[name])
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method != "parameters":
                for status, answer in op["responses"].items():
                    walk(f"{method} {path} {status}", answer.get("content"))
    assert {"Patient", "PatientRequestDetail", "Call", "RecordingAvailable", "Error", "PatientMergedError"} <= answered
    assert len(objects) > 20
    assert [where for where, schema in objects if not schema.get("required")] == []
