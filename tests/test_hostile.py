"""Hostile input: oversized, malformed and malicious requests get a clear 4xx
`{error, code}`, never a 500, never data of another clinic, and the database and the
storage directory stay intact.

Every operation and every field is taken from the service's own OpenAPI document and
request schemas, so a new operation or field is covered without touching this file.
Body limits are checked against gunicorn as the Procfile runs it, over raw sockets.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import webtest
from jsonschema import Draft202012Validator

from app import create_app
from config import Config
from models import MODELS, ApiToken, Call, Clinic, Patient, PatientRequest, SchemaMigration, Tag
from plumbing.database import bind_database, db
from storage import LocalStorage, make_storage
from tests.conftest import PG_URL, REDIS_URL
from tests.support import SECRET_KEY, bearer, issue_token, load
from tests.support.bodies import request_head as _head
from tests.support.documented import inlined
from tests.support.gunicorn import serving, start_gunicorn
from tests.support.live_service import patient_id, signing_organization, tag_id, type_id
from tests.support.ports import free_port
from tests.support.processes import stop_process
from tests.support.tiers import needs
from web import openapi, schemas

PDF = b"%PDF-1.7\n" + b"\0" * 1000 + b"\n%%EOF\n"

# The strings every string field of every operation gets. PostgreSQL refuses NUL in
# text columns and psycopg2 cannot encode an unpaired surrogate: both must be a 400,
# not a 500 from the database driver.
SQL = ["' OR 1=1 --", "'; DROP TABLE call; --", "x' UNION SELECT secret_hash FROM apitoken --"]
TRAVERSAL = ["../../etc/passwd", "%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/etc/passwd", "..\\..\\windows"]
UNSTORABLE = ["nul\u0000byte", "\u0000", "lone\ud800surrogate"]
HOSTILE = SQL + TRAVERSAL + UNSTORABLE
# One value of every JSON type; those the field's schema refuses must be a 400.
EVERY_TYPE: list[Any] = [None, True, 0, -1, 1.5, 10**30, "", "text", [], ["x"], {}, {"a": 1}]


# --------------------------------------------------------------------------- the world


@dataclass
class World:
    """Two clinics of one organization (patient sharing on, the hardest case for leaks)
    with one object of every kind each; tokens bound to one clinic each."""

    web: webtest.TestApp
    storage: LocalStorage
    token_a: str
    token_b: str
    ids: dict[str, dict[str, str]] = field(default_factory=dict)  # clinic slug -> kind -> id
    secrets_b: list[str] = field(default_factory=list)  # texts only clinic B's data contains


def _organization() -> dict[str, Any]:
    doc = signing_organization(sharing=True)
    a, b = doc["clinics"]
    b["calendars"] = [{"name": "B doctor"}]
    b["tags"].append({"type": "patient", "name": "b-patient-tag"})
    a["tags"].append({"type": "patient_request", "name": "a-request-tag"})
    return doc


def _json_body(web: webtest.TestApp, method: str, url: str, token: str, body: Any, status: int = 200) -> Any:
    answer = web.request(
        url,
        method=method,
        headers={**bearer(token), "Content-Type": "application/json"},
        body=json.dumps(body).encode(),
        expect_errors=True,
    )
    assert answer.status_int == status, (url, answer.status, answer.text)
    return answer.json


def _seed_clinic(
    web: webtest.TestApp, storage: LocalStorage, slug: str, token: str, patient: str, calendar: str, request_tag: str
) -> dict[str, str]:
    """A request with an uploaded attachment, a request made from a call (recording)."""
    base = f"/external/v1/clinics/{slug}"
    created = _json_body(
        web,
        "POST",
        f"{base}/patientRequests/create",
        token,
        {"patientId": patient_id(patient), "userECRFId": type_id("SIGNED_CONSENT", slug)},
    )["data"]
    link = _json_body(
        web,
        "POST",
        f"{base}/patientRequests/{created['id']}/attachments/upload-link",
        token,
        {"contentType": "application/pdf"},
    )["data"]
    storage.write_stream(link["fileHash"], io.BytesIO(PDF), len(PDF), "application/pdf")
    attachment = _json_body(
        web,
        "POST",
        f"{base}/patientRequests/{created['id']}/attachments",
        token,
        {"contentType": "application/pdf", "fileHash": link["fileHash"], "description": f"{slug}-consent.pdf"},
    )["data"]
    with db.connection_context():
        clinic = Clinic.by_slug(slug)
        call = Call.create(
            clinic=clinic,
            call_sid=f"hostile-{slug}",
            call_from="+420601123456",
            call_to="+420200000000",
            status="completed",
            has_recording=True,
            recording_url=f"https://files.example.com/{slug}.mp3?signature=SECRET-{slug}",
            state="done",
            outcome="voice_message",
            transcript=f"transcript of {slug}",
        )
        voice = PatientRequest.create(
            clinic=clinic, patient=patient_id(patient), kind="voice_message", title="Voice message", call=call.id
        )
    return {
        "patient": patient_id(patient),
        "request": created["id"],
        "voiceRequest": str(voice.id),
        "fileHash": link["fileHash"],
        "attachment": attachment["id"],
        "requestType": type_id("SIGNED_CONSENT", slug),
        "calendar": str(_stable("calendar", slug, calendar)),
        "requestTag": request_tag,
        "externalId": "EXT-1" if slug == "clinic-a" else "EXT-2",
    }


def _stable(*parts: str) -> uuid.UUID:
    from onboarding.writer import stable_id

    return stable_id(*parts)


@pytest.fixture(scope="module")
def world(wsgi_app, clock, tmp_path_factory) -> Iterator[World]:
    """Built once: the hostile requests below must leave it exactly as it is."""
    tables = ", ".join(f'"{m._meta.table_name}"' for m in MODELS if m is not SchemaMigration)
    with db.connection_context():
        db.execute_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    root = tmp_path_factory.mktemp("hostile") / "storage"
    # Thousands of refused writes with two tokens within seconds: rate limits counted, never
    # met (tests/test_rate_limit.py has them), or 429 would answer before the checks here.
    config = Config(
        database_url=PG_URL,
        redis_url=REDIS_URL,
        secret_key=SECRET_KEY,
        clock=clock,
        db_pool_size=4,
        storage_dir=str(root),
        rate_limit_handoffs_per_minute=10**8,
        rate_limit_writes_per_minute=10**8,
    )
    web = webtest.TestApp(create_app(config))
    storage = make_storage(config)  # the app's own backend: the same directory, key and address
    load(_organization())
    token_a = issue_token(["clinic-a"], ["read", "write"])
    token_b = issue_token(["clinic-b"], ["read", "write"])
    world = World(web, storage, token_a, token_b)
    world.ids["clinic-a"] = _seed_clinic(
        web,
        storage,
        "clinic-a",
        token_a,
        "jana",
        "Doctor",
        str(tag_id("patient_request", "needs-callback", "clinic-a")),
    )
    world.ids["clinic-b"] = _seed_clinic(
        web, storage, "clinic-b", token_b, "petr", "B doctor", str(tag_id("patient_request", "b-only", "clinic-b"))
    )
    # Petr's name and id are the organization's (patient sharing): A may list him, never
    # what B holds about him (record tags, external ids, requests, files, calls).
    world.secrets_b = [
        "b-only",
        "b-patient-tag",
        "EXT-2",
        "clinic-b-consent",
        "transcript of clinic-b",
        "SECRET-clinic-b",
        "Signed consent B",
        "B doctor",
        world.ids["clinic-b"]["fileHash"],
    ]
    try:
        yield world
    finally:
        bind_database(PG_URL, pool_size=4)  # create_app rebound the shared proxy


def _snapshot() -> dict[str, Any]:
    """Every table's row count, and the clinics' own data, to compare before and after."""
    with db.connection_context():
        counts = {m._meta.table_name: m.select().count() for m in MODELS}
        people = sorted((str(p.id), p.first_name, p.last_name, p.phone or "") for p in Patient.select())
        tags = sorted((str(t.id), t.name) for t in Tag.select())
    return {"counts": counts, "patients": people, "tags": tags}


# ------------------------------------------------------------ operations from the document


@dataclass
class Operation:
    method: str
    template: str  # documented path, `{clinicSlug}` style
    body: dict[str, Any] | None  # request body schema (JSON), if any
    query: list[str]

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.template}"


def operations() -> list[Operation]:
    """Every operation of the OpenAPI document but the presigned storage URLs (their own
    tests below) and the unauthenticated service endpoints without input."""
    found = []
    for template, item in inlined(openapi.document())["paths"].items():
        if template.startswith("/storage/"):
            continue
        for method, op in item.items():
            if method == "parameters":
                continue
            body = (op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema")
            query = [p["name"] for p in op.get("parameters", []) if p["in"] == "query"]
            if "{" in template or body or query:
                found.append(Operation(method, template, body, query))
    return found


OPERATIONS = operations()
# Array items the service validates one by one, each answered alone (bulk import).
ITEM_SCHEMAS = {("post", "/external/v1/clinics/{clinicSlug}/patients/import-bulk", "patients"): schemas.PATIENT_IMPORT}


def _fresh(text: str, schema: dict[str, Any]) -> str:
    low, high = schema.get("minLength", 1), schema.get("maxLength", 64)
    return (text + "-" + uuid.uuid4().hex)[: max(low, min(high, 40))].ljust(low, "x")


def sample(schema: dict[str, Any], name: str, known: dict[str, Any]) -> Any:
    """A valid value for `schema`: a real id of clinic A where the field names one, else
    a fresh value (fresh so that idempotent operations still write)."""
    if name in known:
        return known[name]
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return sample(schema[key][0], name, known)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: sample(props.get(k, {}), k, known) for k in schema.get("required", [])}
    if kind == "array":
        return [sample(schema.get("items", {}), name, known) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        return {
            "uuid": str(uuid.uuid4()),
            "date": "1980-04-12",
            "date-time": "2026-11-18T10:00:00Z",
            "email": "someone@example.org",
        }.get(schema.get("format", "")) or _fresh(name, schema)
    if kind == "integer":
        return schema.get("minimum", 1)
    if kind == "number":
        return 1
    if kind == "boolean":
        return False
    return None


def leaves(
    schema: dict[str, Any], path: tuple[Any, ...] = (), *, op: tuple[str, str] = ("", "")
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(path, schema) of every field below `schema`, arrays through their first item; a
    nullable field (`anyOf` with null) as its other branch, marked `x-nullable`."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            nullable = any(s.get("type") == "null" for s in schema[key])
            schema = next((s for s in schema[key] if s.get("type") != "null"), schema[key][0])
            schema = {**schema, "x-nullable": True} if nullable else schema
    if path:
        yield path, schema
    if schema.get("type") == "object" or "properties" in schema:
        for name, sub in schema.get("properties", {}).items():
            yield from leaves(sub, (*path, name), op=op)
    if schema.get("type") == "array" and "items" in schema:
        items = ITEM_SCHEMAS.get((*op, path[-1] if path else ""), schema["items"])
        yield from leaves(items, (*path, 0), op=op)


def is_string_field(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return (
        kind == "string"
        or (isinstance(kind, list) and "string" in kind)
        or ("enum" in schema and all(isinstance(v, str) for v in schema["enum"]))
    )


def schema_at(root: dict[str, Any], path: tuple[Any, ...], op: tuple[str, str]) -> dict[str, Any]:
    return dict(leaves(root, op=op))[path]


def with_value(
    body: dict[str, Any],
    root: dict[str, Any],
    path: tuple[Any, ...],
    value: Any,
    known: dict[str, Any],
    op: tuple[str, str],
) -> dict[str, Any]:
    """`body` with `value` at `path`, missing parents filled with valid samples."""
    body = json.loads(json.dumps(body))
    node: Any = body
    for depth, step in enumerate(path[:-1]):
        parent_schema = schema_at(root, path[: depth + 1], op)
        if isinstance(step, int):
            while len(node) <= step:
                node.append(sample(parent_schema, "", known))
        elif step not in node:
            node[step] = sample(parent_schema, step, known)
        node = node[step]
    last = path[-1]
    if isinstance(last, int):
        while len(node) <= last:
            node.append(None)
    node[last] = value
    return body


def base_body(op: Operation, known: dict[str, Any]) -> dict[str, Any]:
    """A valid body of `op`, open array items filled as the service validates them."""
    body = sample(op.body or {}, "", known)
    for (method, template, name), items in ITEM_SCHEMAS.items():
        if (method, template) == (op.method, op.template):
            body[name] = [sample(items, name, known)]
    return body


def known_values(world: World) -> dict[str, Any]:
    ids = world.ids["clinic-a"]
    return {
        "patientId": ids["patient"],
        "userECRFId": ids["requestType"],
        "calendarId": ids["calendar"],
        "fileHash": ids["fileHash"],
        "CallFrom": "+420601123456",
        "CallTo": "+420200000000",
        "contentType": "application/pdf",
        "phone": "+420601000000",
    }


def url_of(op: Operation, world: World, slug: str = "clinic-a", **override: str) -> str:
    values = {
        "clinicSlug": slug,
        "requestId": world.ids[slug]["voiceRequest"]
        if op.template.endswith("/recording")
        else world.ids[slug]["request"],
        **override,
    }
    path = op.template
    for name, value in values.items():
        encoded = urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe="")
        path = path.replace("{" + name + "}", encoded)
    return path


def call(
    world: World,
    op: Operation,
    url: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    token: str | None = None,
    query: str = "",
) -> webtest.TestResponse:
    headers = bearer(token or world.token_a)
    payload = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    if payload:
        headers["Content-Type"] = "application/json"
    return world.web.request(
        url + (f"?{query}" if query else ""),
        method=op.method.upper(),
        headers=headers,
        body=payload,
        expect_errors=True,
    )


def assert_clear_refusal(answer: webtest.TestResponse, *statuses: int) -> dict[str, Any]:
    """A 4xx (one of `statuses` when given) with the one error shape."""
    assert 400 <= answer.status_int < 500, (answer.request.method, answer.request.url, answer.status, answer.text[:300])
    if statuses:
        assert answer.status_int in statuses, (answer.request.url, answer.status, answer.text[:300])
    error = answer.json
    assert isinstance(error.get("error"), str) and isinstance(error.get("code"), str), error
    return error


def refusal(answer: webtest.TestResponse, *statuses: int) -> dict[str, Any]:
    """The error of a refused request: a 4xx body, or the one item of a bulk answer
    (whose items are validated and answered one by one)."""
    if (
        answer.status_int == 200
        and isinstance(answer.json.get("data"), list)
        and answer.json["data"]
        and "index" in answer.json["data"][0]
    ):
        [item] = answer.json["data"]
        assert item["status"] == "failed", item
        return item["error"]
    return assert_clear_refusal(answer, *statuses)


def assert_not_server_error(answer: webtest.TestResponse) -> None:
    assert answer.status_int < 500, (answer.request.method, answer.request.url, answer.status, answer.text[:300])
    if answer.status_int >= 400:
        assert_clear_refusal(answer)


# --------------------------------------------------------------------------------- tests


def test_the_document_yields_operations_and_string_fields_to_attack() -> None:
    with_body = [op for op in OPERATIONS if op.body]
    assert len(with_body) >= 10, [str(op) for op in OPERATIONS]
    fields = [p for op in with_body for p, s in leaves(op.body, op=(op.method, op.template)) if is_string_field(s)]
    assert ("CallSid",) in fields and ("patients", 0, "firstName") in fields and ("timeSlotInput", "start") in fields


def body_fields(known: dict[str, Any]) -> Iterator[tuple[Any, tuple[str, str], dict, tuple, dict]]:
    """Every field of every request body in the document: (operation, its key, a valid
    base body, the field's path, the field's schema)."""
    for op in OPERATIONS:
        if not op.body:
            continue
        key = (op.method, op.template)
        base = base_body(op, known)
        for path, schema in leaves(op.body, op=key):
            yield op, key, base, path, schema


def test_hostile_strings_in_every_string_field_of_every_operation(world: World) -> None:
    before = _snapshot()
    known = known_values(world)
    tried = 0
    for op, key, _, path, schema in body_fields(known):
        if not is_string_field(schema):
            continue
        for text in HOSTILE:
            base = base_body(op, known)  # fresh CallSid, externalId, ...: each one writes
            answer = call(world, op, url_of(op, world), with_value(base, op.body, path, text, known, key))
            tried += 1
            assert_not_server_error(answer)
            if (
                ("\u0000" in text or "\ud800" in text)
                and key[1].endswith("/recording-complete")
                and path != ("RecordingUrl",)
            ):
                # A hand-off is never refused for its text: the characters are replaced and
                # the call flagged (switchboard/handoff.py); a refusal would lose the voicemail.
                assert answer.status_int == 200, answer.text
            elif "\u0000" in text or "\ud800" in text:
                error = refusal(answer, 400)
                assert error["code"] == "VALIDATION_FAILED"
    assert tried > 300
    after = _snapshot()
    # The injected strings were stored as text where a field is stored, never executed.
    assert set(after["counts"]) == set(before["counts"]) and after["counts"]["call"] >= before["counts"]["call"]
    with db.connection_context():
        assert db.execute_sql('SELECT count(*) FROM "call"').fetchone()[0] == after["counts"]["call"]
        assert ApiToken.select().count() == before["counts"][ApiToken._meta.table_name]
        assert Patient.select().where(Patient.first_name == SQL[0]).count() >= 1, "imported verbatim"
    assert {t for t in before["tags"]} == {t for t in after["tags"]}


def test_sql_text_matches_only_itself(world: World) -> None:
    base = "/external/v1/clinics/clinic-a"
    for text in SQL:
        found = world.web.post_json(
            f"{base}/patients/search", {"filter": {"query": text}}, headers=bearer(world.token_a)
        ).json["data"]
        assert all(
            text in f"{p['firstName']} {p['lastName']}"
            or text in (p["email"] or "")
            or any(text in e["id"] for e in p["externalIds"])
            for p in found
        ), found
        assert patient_id("jana") not in {p["id"] for p in found}


def test_hostile_path_and_query_parameters(world: World) -> None:
    for op in OPERATIONS:
        names = [n for n in ("clinicSlug", "requestId") if "{" + n + "}" in op.template]
        for name in names:
            for text in HOSTILE:
                answer = call(world, op, url_of(op, world, **{name: text}), sample(op.body or {}, "", {}))
                assert_clear_refusal(answer)
        for name in op.query:
            for text in HOSTILE:
                value = urllib.parse.quote(text.encode("utf-8", "surrogatepass"), safe="")
                answer = call(world, op, url_of(op, world), query=f"{name}={value}")
                assert_clear_refusal(answer, 400)


def test_wrong_types_in_every_field_are_400(world: World) -> None:
    known = known_values(world)
    for op, key, base, path, schema in body_fields(known):
        allowed = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        for value in EVERY_TYPE:
            answer = call(world, op, url_of(op, world), with_value(base, op.body, path, value, known, key))
            assert_not_server_error(answer)
            if not allowed.is_valid(value) and not (value is None and schema.get("x-nullable")):
                error = refusal(answer, 400)
                assert error["code"] == "VALIDATION_FAILED"
                if isinstance(path[-1], str):  # names the field (a bulk item: the item's)
                    assert path[-1] in error["error"], (str(op), path, value, error)


def test_a_body_that_is_not_a_json_object(world: World) -> None:
    deep_array = b"[" * 100_000
    deep_object = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    bodies = [
        b"[]",
        b'"text"',
        b"42",
        b"null",
        b"true",
        b"{",
        b"\xff\xfe{}",
        b'{"callFrom": "\xc3\x28"}',
        b"\xed\xa0\x80",
        deep_array,
        deep_object,
        b"{" * 1000,
        b"NaN",
        b'{"a": Infinity}',
    ]
    for op in OPERATIONS:
        if not op.body:
            continue
        for raw in bodies:
            answer = call(world, op, url_of(op, world), raw=raw)
            error = assert_clear_refusal(answer, 400)
            assert error["code"] == "VALIDATION_FAILED", (str(op), raw[:20], error)


def test_deeply_nested_json_inside_a_known_field_is_refused(world: World) -> None:
    known = known_values(world)
    for op, key, base, path, _schema in body_fields(known):
        text = json.dumps(with_value(base, op.body, path, "@@", known, key))
        raw = text.replace('"@@"', "[" * 900 + "]" * 900).encode()
        answer = call(world, op, url_of(op, world), raw=raw)
        assert_not_server_error(answer)


def test_huge_json_with_many_keys_is_answered_quickly(world: World) -> None:
    many = {f"k{i}": i for i in range(60_000)}  # ~0.9 MB, under the limit: unknown fields are ignored
    url = "/external/v1/clinics/clinic-a/switchboard/is-clinic-opened"
    started = time.monotonic()
    answer = world.web.post_json(url, many, headers=bearer(world.token_a), expect_errors=True)
    assert answer.status_int == 200 and time.monotonic() - started < 5
    over = json.dumps({f"k{i}": i for i in range(120_000)}).encode()  # ~1.9 MB, over the default limit
    answer = world.web.post(
        url, over, headers={**bearer(world.token_a), "Content-Type": "application/json"}, expect_errors=True
    )
    assert assert_clear_refusal(answer, 413)["code"] == "PAYLOAD_TOO_LARGE"


def test_ten_thousand_element_arrays_are_refused_fast(world: World) -> None:
    known = known_values(world)
    arrays = 0
    for op, key, base, path, schema in body_fields(known):
        if schema.get("type") != "array":
            continue
        arrays += 1
        items = ITEM_SCHEMAS.get((*key, path[-1]), schema.get("items", {}))
        one = sample(items, str(path[-1]), known)
        started = time.monotonic()
        answer = call(world, op, url_of(op, world), with_value(base, op.body, path, [one] * 10_000, known, key))
        assert time.monotonic() - started < 5, (str(op), path)
        # 400 naming the array, or 413 when 10,000 items are over the body limit already.
        error = assert_clear_refusal(answer, 400, 413)
        assert answer.status_int == 413 or (str(path[-1]) in error["error"] and "long" in error["error"]), error
    assert arrays >= 4  # calendarIds, externalIds, patients, addTagIds at least


# ------------------------------------------------------------------- tenant isolation


def _leaks(text: str, world: World, sent: str = "") -> list[str]:
    """Clinic B's data (names, ids, links) found in an answer, but for what was sent."""
    b_ids = [v for k, v in world.ids["clinic-b"].items() if k != "patient"]
    return [s for s in world.secrets_b + b_ids if s and s not in sent and s in text]


def test_a_token_of_clinic_a_gets_403_under_clinic_b_for_every_operation(world: World) -> None:
    known = known_values(world)
    for op in OPERATIONS:
        if "{clinicSlug}" not in op.template:
            continue
        for request_id in (world.ids["clinic-b"]["request"], world.ids["clinic-a"]["request"]):
            answer = call(world, op, url_of(op, world, slug="clinic-b", requestId=request_id), base_body(op, known))
            assert assert_clear_refusal(answer, 403)["code"] == "FORBIDDEN", str(op)
            assert not _leaks(answer.text, world, request_id)


def test_clinic_b_ids_of_every_kind_under_clinic_a_give_nothing(world: World) -> None:
    b = world.ids["clinic-b"]
    # Path ids: every operation on a request of B answers 404, whatever the body.
    for op in OPERATIONS:
        if "{requestId}" not in op.template:
            continue
        for request_id in (b["request"], b["voiceRequest"]):
            answer = call(world, op, url_of(op, world, requestId=request_id), base_body(op, known_values(world)))
            assert assert_clear_refusal(answer, 404)["code"] == "PATIENT_REQUEST_NOT_FOUND", str(op)
    # Body ids: each of B's ids in every string field of every operation reveals nothing.
    tried = 0
    for op in OPERATIONS:
        if not op.body:
            continue
        key = (op.method, op.template)
        for path, schema in leaves(op.body, op=key):
            if not is_string_field(schema) or "enum" in schema:
                continue
            for kind, value in b.items():
                known = known_values(world)
                answer = call(
                    world, op, url_of(op, world), with_value(base_body(op, known), op.body, path, value, known, key)
                )
                tried += 1
                assert_not_server_error(answer)
                assert not _leaks(answer.text, world, value), (str(op), path, kind, answer.text[:300])
    assert tried > 100


def test_clinic_b_ids_refused_with_the_documented_answers(world: World) -> None:
    a, b, web = world.ids["clinic-a"], world.ids["clinic-b"], world.web
    base, auth = "/external/v1/clinics/clinic-a", bearer(world.token_a)

    def post(url: str, body: dict[str, Any]) -> webtest.TestResponse:
        return web.post_json(base + url, body, headers=auth, expect_errors=True)

    # patient of B (no record in A) and request type of B: no request is created
    assert (
        post("/patientRequests/create", {"patientId": b["patient"], "userECRFId": a["requestType"]}).status_int == 403
    )
    assert (
        post("/patientRequests/create", {"patientId": a["patient"], "userECRFId": b["requestType"]}).json["code"]
        == "USER_ECRF_NOT_FOUND"
    )
    # B's calendar: neither a vacation check (answered exactly as an unknown id: a calendar
    # without vacations, whatever B's calendar holds) nor a reservation
    stray = post("/switchboard/is-on-vacation", {"calendarIds": [str(uuid.uuid4())]}).json
    assert post("/switchboard/is-on-vacation", {"calendarIds": [b["calendar"]]}).json == stray
    slot = {"start": "2026-11-20T09:00:00Z", "end": "2026-11-20T09:30:00Z", "calendarId": b["calendar"]}
    assert (
        post(
            "/patientRequests/create",
            {"patientId": a["patient"], "userECRFId": a["requestType"], "timeSlotInput": slot},
        ).status_int
        == 400
    )
    # B's tag on A's request; B's uploaded file registered on A's request
    assert (
        web.patch_json(
            f"{base}/patientRequests/{a['request']}", {"addTagIds": [b["requestTag"]]}, headers=auth, expect_errors=True
        ).status_int
        == 400
    )
    assert (
        post(
            f"/patientRequests/{a['request']}/attachments",
            {"contentType": "application/pdf", "fileHash": b["fileHash"], "description": "x.pdf"},
        ).status_int
        == 400
    )
    # B's recording; B's patient's open request; B's patient's requests; B's external id
    assert (
        web.get(f"{base}/patientRequests/{b['voiceRequest']}/recording", headers=auth, expect_errors=True).status_int
        == 404
    )
    assert post("/switchboard/has-active-request", {"patientId": b["patient"]}).json == {"hasActiveRequest": False}
    assert post("/patientRequests/search", {"filter": {"patientId": b["patient"]}}).json["data"] == []
    voice = {r["id"] for r in post("/patientRequests/search", {"filter": {"kind": "voice_message"}}).json["data"]}
    assert a["voiceRequest"] in voice and b["voiceRequest"] not in voice
    # (A may have an EXT-2 of its own: external ids are per clinic; it is never Petr's)
    found = post("/patients/search", {"filter": {"externalId": "EXT-2"}}).json["data"]
    assert b["patient"] not in {p["id"] for p in found}
    # ... and nothing of B was attached to A meanwhile
    with db.connection_context():
        assert (
            PatientRequest.select()
            .where((PatientRequest.clinic == Clinic.by_slug("clinic-a").id) & (PatientRequest.patient == b["patient"]))
            .count()
            == 0
        )


# ------------------------------------------------- body limits, against gunicorn (Procfile)

BODY_LIMIT = 64 * 1024
UPLOAD_LIMIT = 256 * 1024
FLOOD = 1 << 30  # what the client would send: 1 GiB, far more than anything may read


@dataclass
class Gunicorn:
    base_url: str
    port: int
    storage_root: Path
    storage: LocalStorage  # signs like the served app


@pytest.fixture(scope="module")
@needs("gunicorn")
def gunicorn(world: World, tmp_path_factory) -> Iterator[Gunicorn]:
    """The web process as the Procfile starts it, with small limits to overrun."""
    port, root = free_port(), tmp_path_factory.mktemp("gunicorn") / "storage"
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "DB_POOL_SIZE": "2",
        "MAX_BODY_BYTES": str(BODY_LIMIT),
        "STORAGE_DIR": str(root),
        "STORAGE_MAX_UPLOAD_BYTES": str(UPLOAD_LIMIT),
        "PUBLIC_BASE_URL": base_url,
        "LOG_LEVEL": "WARNING",
    }
    proc = start_gunicorn(
        port,
        "--workers",
        "1",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        ready=lambda _: serving(base_url),
    )
    try:
        root.mkdir(parents=True, exist_ok=True)
        signer = LocalStorage(
            root, signing_key=Config(secret_key=SECRET_KEY).storage_signing_key, public_base_url=base_url
        )
        yield Gunicorn(base_url, port, Path(root), signer)
    finally:
        stop_process(proc, 15)


@dataclass
class Exchange:
    status: int
    body: Any
    sent_when_answered: int  # body bytes the client had sent when the answer was complete


def flood(port: int, head: bytes, *, chunked: bool, total: int = FLOOD, timeout: float = 15) -> Exchange:
    """Send `head`, then keep sending body bytes (up to `total`) from a thread, while
    reading the answer here; bounded by `timeout` per socket operation."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sent, stop = [0], threading.Event()
    piece = b"7" * 65536
    frame = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece

    def send() -> None:
        try:
            sock.sendall(head)
            while sent[0] < total and not stop.is_set():
                sock.sendall(frame)
                sent[0] += len(piece)
        except OSError:
            pass  # the server closed the connection: what we want

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = b""
    try:
        while True:
            if b"\r\n\r\n" in data:
                header, _, rest = data.partition(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in header.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                )
                if len(rest) >= length:
                    break
            piece_in = sock.recv(65536)
            assert piece_in, f"connection closed before a full answer: {data[:200]!r}"
            data += piece_in
        answered = sent[0]
    finally:
        stop.set()
        sock.close()
        sender.join(timeout=10)
    status = int(header.split(b" ")[1])
    return Exchange(status, json.loads(rest[:length]), answered)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_is_refused_before_it_is_read(gunicorn: Gunicorn, world: World, chunked: bool) -> None:
    target = "/external/v1/clinics/clinic-a/switchboard/has-active-request"
    started = time.monotonic()
    answer = flood(
        gunicorn.port, _head("POST", target, world.token_a, length=None if chunked else FLOOD), chunked=chunked
    )
    assert answer.status == 413 and answer.body["code"] == "PAYLOAD_TOO_LARGE"
    # answered while the client was still sending: the server read at most the limit
    # (plus what loopback socket buffers hold), not the gigabyte
    assert answer.sent_when_answered < 64 * 1024 * 1024
    assert time.monotonic() - started < 10


def test_a_chunked_body_within_the_limit_is_read(gunicorn: Gunicorn, world: World) -> None:
    body = json.dumps({"callFrom": "+420 601 123 456"}).encode()
    target = "/external/v1/clinics/clinic-a/switchboard/has-active-request"
    head = _head("POST", target, world.token_a, length=None)
    with socket.create_connection(("127.0.0.1", gunicorn.port), timeout=10) as sock:
        sock.sendall(head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        data = b""
        while b"}" not in data:
            data += sock.recv(65536) or b"}"
    assert data.startswith(b"HTTP/1.1 200"), data[:300]
    assert json.loads(data.partition(b"\r\n\r\n")[2]) == {"hasActiveRequest": True}  # Jana's open request


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_upload_over_the_storage_cap_is_refused_and_stores_nothing(gunicorn: Gunicorn, chunked: bool) -> None:
    key = f"requests/{uuid.uuid4()}/{uuid.uuid4().hex}.pdf"
    url = urllib.parse.urlsplit(gunicorn.storage.presign_put(key, "application/pdf", 600))
    before = _files(gunicorn.storage_root)
    answer = flood(
        gunicorn.port,
        _head(
            "PUT", f"{url.path}?{url.query}", None, length=None if chunked else FLOOD, content_type="application/pdf"
        ),
        chunked=chunked,
    )
    assert answer.status == 413 and answer.body["code"] == "PAYLOAD_TOO_LARGE"
    assert answer.sent_when_answered < 64 * 1024 * 1024
    assert _files(gunicorn.storage_root) == before  # no object, no sidecar, no partial file


def test_a_chunked_upload_within_the_cap_is_stored(gunicorn: Gunicorn) -> None:
    key = f"requests/{uuid.uuid4()}/{uuid.uuid4().hex}.pdf"
    url = urllib.parse.urlsplit(gunicorn.storage.presign_put(key, "application/pdf", 600))
    head = _head("PUT", f"{url.path}?{url.query}", None, length=None, content_type="application/pdf")
    with socket.create_connection(("127.0.0.1", gunicorn.port), timeout=10) as sock:
        sock.sendall(head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (PDF[:100], PDF[100:])) + b"0\r\n\r\n")
        data = b""
        while b"}}" not in data:
            data += sock.recv(65536) or b"}}"
    assert data.startswith(b"HTTP/1.1 200"), data[:300]
    assert (gunicorn.storage_root / key).read_bytes() == PDF


# ----------------------------------------------------------- presigned storage URLs


def _raw(
    gunicorn: Gunicorn, method: str, target: str, body: bytes = b"", content_type: str = "application/pdf"
) -> tuple[int, bytes]:
    """One request with the target exactly as given (no client-side normalization)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", gunicorn.port, timeout=10)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        conn.putheader("Content-Type", content_type)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def _with(query: str, **changes: str) -> str:
    params = dict(urllib.parse.parse_qsl(query))
    params.update(changes)
    return urllib.parse.urlencode({k: v for k, v in params.items() if v != "<drop>"})


def _flip(text: str) -> str:
    return text[:-1] + ("0" if text[-1] != "0" else "1")


def test_presigned_urls_with_any_part_changed_are_refused(gunicorn: Gunicorn) -> None:
    storage, root = gunicorn.storage, gunicorn.storage_root
    key = f"requests/{uuid.uuid4()}/{uuid.uuid4().hex}.pdf"
    other = f"requests/{uuid.uuid4()}/{uuid.uuid4().hex}.pdf"
    put = urllib.parse.urlsplit(storage.presign_put(key, "application/pdf", 600))
    before = _files(root)
    expired = LocalStorage(
        root,
        signing_key=Config(secret_key=SECRET_KEY).storage_signing_key,
        public_base_url=gunicorn.base_url,
        clock=lambda: time.time() - 3600,
    )
    old = urllib.parse.urlsplit(expired.presign_put(key, "application/pdf", 60))
    refused_puts = {
        "signature": (
            put.path,
            _with(put.query, signature=_flip(dict(urllib.parse.parse_qsl(put.query))["signature"])),
            "application/pdf",
        ),
        "expiry": (
            put.path,
            _with(put.query, expires=str(int(dict(urllib.parse.parse_qsl(put.query))["expires"]) + 1)),
            "application/pdf",
        ),
        "expired": (old.path, old.query, "application/pdf"),
        "key": (f"/storage/{other}", put.query, "application/pdf"),
        "content type": (put.path, put.query, "text/html"),
        "no signature": (put.path, _with(put.query, signature="<drop>"), "application/pdf"),
    }
    for part, (path, query, content_type) in refused_puts.items():
        status, body = _raw(gunicorn, "PUT", f"{path}?{query}", PDF, content_type)
        assert status == 403 and json.loads(body)["code"] == "FORBIDDEN", (part, status, body)
    # method: a PUT URL does not download, a GET URL does not upload
    storage.write_stream(key, io.BytesIO(PDF), len(PDF), "application/pdf")
    before = _files(root)
    get = urllib.parse.urlsplit(
        storage.presign_get(key, 600, content_type="application/pdf", disposition="attachment", filename="a.pdf")
    )
    assert _raw(gunicorn, "GET", f"{put.path}?{put.query}")[0] == 403
    assert _raw(gunicorn, "PUT", f"{get.path}?{get.query}", b"overwritten")[0] == 403
    refused_gets = {
        "signature": _with(get.query, signature=_flip(dict(urllib.parse.parse_qsl(get.query))["signature"])),
        "content type": _with(get.query, content_type="text/html"),
        "disposition": _with(get.query, disposition="inline"),
        "filename": _with(get.query, filename="b.pdf"),
        "expiry": _with(get.query, expires="9999999999"),
    }
    for part, query in refused_gets.items():
        status, body = _raw(gunicorn, "GET", f"{get.path}?{query}")
        assert status == 403 and b"%PDF" not in body, (part, status)
    assert _raw(gunicorn, "GET", f"/storage/{other}?{get.query}")[0] == 403
    # the genuine URL still works (so the refusals above were about the change)
    assert _raw(gunicorn, "GET", f"{get.path}?{get.query}") == (200, PDF)
    assert _files(root) == before


TRAVERSAL_KEYS = [
    "../escape.pdf",
    "../../escape.pdf",
    "requests/../../escape.pdf",
    "/tmp/escape.pdf",
    "requests/..%2f..%2fescape.pdf",
    "%2e%2e%2fescape.pdf",
    "%2e%2e/escape.pdf",
    "..%5cescape.pdf",
    "%252e%252e%252fescape.pdf",
    "a%00b.pdf",
    "requests/x.pdf%00.png",
    ".meta/x.pdf.json",
    "requests//escape.pdf",
    "./escape.pdf",
    "requests/./x.pdf",
]


def test_traversal_keys_are_refused_and_nothing_is_written_outside(gunicorn: Gunicorn) -> None:
    storage, root = gunicorn.storage, gunicorn.storage_root
    outside = root.parent
    before = _files(outside)
    for raw_key in TRAVERSAL_KEYS:
        # Even a signature computed for exactly this key (a leaked signing key) does not help.
        decoded = urllib.parse.unquote(raw_key)
        expires = int(time.time()) + 600
        query = urllib.parse.urlencode(
            {"expires": expires, "signature": storage._signature("PUT", decoded, expires, "application/pdf")}
        )
        status, body = _raw(gunicorn, "PUT", f"/storage/{raw_key}?{query}", b"escaped")
        assert status in (400, 403, 404), (raw_key, status, body)
        assert "code" in json.loads(body)
        get_query = urllib.parse.urlencode(
            {
                "expires": expires,
                "content_type": "text/plain",
                "disposition": "inline",
                "filename": "p",
                "signature": storage._signature("GET", decoded, expires, "text/plain", "inline", "p"),
            }
        )
        status, body = _raw(gunicorn, "GET", f"/storage/{raw_key}?{get_query}")
        assert status in (400, 403, 404) and b"escaped" not in body, (raw_key, status)
    for target in ("/etc/passwd", "/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd"):
        status, body = _raw(gunicorn, "GET", f"/storage{target}?expires=9999999999&signature=00")
        assert status in (400, 403, 404) and b"root:" not in body, (target, status)
    assert _files(outside) == before
    assert not list(Path("/tmp").glob("escape.pdf")) or Path("/tmp/escape.pdf").read_bytes() != b"escaped"
