"""The contract is the service's own values: every error code the service answers is in
web/error_codes.py (and only those), every enumeration of the OpenAPI document is the
Python definition the service answers from, and every answer the service gives, provoked
on purpose here (tests/support/provoke.py), is one the document describes as a strict
generated client reads it (tests/support/contract.py, which judges every answer of the
suite the same way)."""

from __future__ import annotations

import json
from typing import Any

import webtest

from tests.support.contract import Contract, contract
from tests.support.documented import inlined
from tests.support.provoke import every_answer
from web import openapi
from web.error_codes import BY_CODE, ERROR_CODES


def test_the_checker_refuses_what_the_document_does_not_describe():
    c = contract()
    detail = "/external/v1/clinics/x/patientRequests/0b0f8f5e-5d37-4a4e-9a4c-8cc0b7a8a3a1"
    ok = json.dumps({"error": "No such patient request in this clinic.", "code": "PATIENT_REQUEST_NOT_FOUND"}).encode()
    assert c.problems("GET", detail, 404, "application/json", ok) == []
    # A code the table does not hold, a code of another status, one the operation does not list.
    for code in ("NO_SUCH_CODE", "RATE_LIMITED", "PATIENT_MERGED"):
        body = json.dumps({"error": "x", "code": code}).encode()
        assert c.problems("GET", detail, 404, "application/json", body), code
    # A field the document does not name; a status the operation does not document.
    extra = json.dumps({"error": "x", "code": "PATIENT_REQUEST_NOT_FOUND", "hint": "y"}).encode()
    assert c.problems("GET", detail, 404, "application/json", extra)
    assert c.problems("GET", detail, 418, "application/json", ok)
    # A value outside an enumeration (a reason the document does not list), a uuid that is none.
    opened = "/external/v1/clinics/x/switchboard/is-clinic-opened"
    assert c.problems("POST", opened, 200, "application/json", b'{"isOpen": "yes"}')
    narrow = json.loads(json.dumps(openapi.document()))
    narrow["components"]["schemas"]["RecordingUnavailable"]["properties"]["reason"]["enum"].remove("mismatch")
    state = {"state": "unavailable", "reason": "mismatch", "message": "gone"}
    assert Contract(narrow).problems("GET", detail, 200, "application/json", _detail_with(state))
    assert c.problems("GET", detail, 200, "application/json", _detail_with(state)) == []
    assert c.problems("GET", detail, 200, "application/json", _detail_with(state, id="not-a-uuid"))
    # A path of the API that no operation has: 404 or 405 only.
    assert c.problems("GET", "/external/v1/nothing", 200, "application/json", b"{}")
    assert (
        c.problems(
            "GET", "/external/v1/nothing", 404, "application/json", b'{"error": "No such path.", "code": "NOT_FOUND"}'
        )
        == []
    )


def _detail_with(recording: dict[str, Any], **fields: Any) -> bytes:
    request = {
        "id": "0b0f8f5e-5d37-4a4e-9a4c-8cc0b7a8a3a1",
        "kind": "voice_message",
        "title": "x",
        "createdAt": "2026-11-28T10:00:00Z",
        "updatedAt": "2026-11-28T10:00:00Z",
        "doneAt": None,
        "patientId": "0b0f8f5e-5d37-4a4e-9a4c-8cc0b7a8a3a1",
        "requestTypeId": None,
        "userNote": "",
        "tags": [],
        "medicalRecords": [],
        "reservations": [],
        "requestTypeSuggestion": None,
        "urgent": None,
        "call": {
            "callSid": "CA1",
            "callFrom": "+420601123456",
            "callbackNumber": None,
            "unconfirmedCallbackNumber": None,
            "callbackNumberAt": None,
            "callTo": "+420222000111",
            "status": None,
            "receivedAt": "2026-11-28T10:00:00Z",
            "transcript": None,
            "transcriptStatus": None,
            "transcriptIssue": None,
            "language": None,
            "transcriptLanguage": None,
            "correctedTranscript": None,
            "transcriptCorrectedAt": None,
            "extra": None,
            "recording": recording,
        },
        **fields,
    }
    return json.dumps({"data": request}).encode()


def test_every_suite_answer_is_judged_by_the_document():
    """The plugin is in force: every WebTest request of the suite passes the checker."""
    assert getattr(webtest.TestApp.do_request, "__contract__", False)


def test_every_code_and_reason_is_answered_as_the_document_says(app, config, clock, example):
    answers = every_answer(app, config, clock, example)
    c = contract()
    problems = [p for a in answers for p in c.problems(a.method, a.path, a.status, a.content_type, a.body)]
    assert not problems, "\n".join(problems)
    # Every code the table says is answered was answered here; the others are the fallbacks.
    answered = {a.data["code"] for a in answers if a.status >= 400 and isinstance(a.data, dict)}
    assert answered == {row.code for row in ERROR_CODES if row.answered}, (
        sorted({row.code for row in ERROR_CODES if row.answered} - answered),
        sorted(answered - set(BY_CODE)),
    )
    # Every value of every enumeration an answer can carry was carried by one.
    seen = set(_pairs([a.data for a in answers if a.data is not None]))
    missing = {
        (name, value)
        for name, values in response_enums(openapi.document())
        for value in values
        if (name, value) not in seen
    } - NEEDS_AN_OUTAGE
    assert not missing, sorted(missing)


#: Values only a database that went away after answering (the routing checks' last known
#: state) or a schema behind the code can bring: tests/test_database_outage.py and
#: tests/test_service.py provoke them, the contract plugin checking those answers too.
NEEDS_AN_OUTAGE = {("database", "last_known"), ("schema", "behind")}


def test_the_documents_enumerations_are_the_services_definitions():
    from models import Call, PatientRequest, Tag
    from patients.directory import IMPORT_RESULTS
    from voicemail.recordings import GONE_REASONS
    from web.schemas import CATEGORY_TYPES

    schemas = openapi.document()["components"]["schemas"]
    assert schemas["RecordingUnavailable"]["properties"]["reason"]["enum"] == list(GONE_REASONS)
    assert schemas["TranscriptStatus"]["enum"] == list(Call.TRANSCRIPT_STATUSES)
    assert schemas["RequestKind"]["enum"] == list(PatientRequest.KINDS)
    assert schemas["TagType"]["enum"] == list(Tag.TYPES)
    assert schemas["ImportStatus"]["enum"] == list(IMPORT_RESULTS)
    assert schemas["CategoryType"]["enum"] == list(CATEGORY_TYPES)


def test_every_operations_error_answers_list_codes_of_their_status():
    document = openapi.document()
    c = Contract(document)
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method in ("parameters", "head"):  # a HEAD answer has no body, so no code
                continue
            for status, answer in op["responses"].items():
                if int(status) < 400:
                    continue
                codes = c.listed_codes(answer)
                assert codes, f"{method} {path} {status} lists no code"
                assert all(BY_CODE[code].status == int(status) for code in codes), (method, path, status, codes)


def response_enums(document: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """(property name, its values) of every enumeration in a schema an answer uses."""
    found: list[tuple[str, list[Any]]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, schema in (node.get("properties") or {}).items():
                for variant in [schema, *schema.get("anyOf", [])]:
                    if "enum" in variant:
                        found.append((name, variant["enum"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for item in document["paths"].values():
        for method, op in item.items():
            if method != "parameters":
                walk(inlined(document, op["responses"]))
    return found


def _pairs(node: Any, name: str | None = None):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _pairs(value, key)
    elif isinstance(node, list):
        for value in node:
            yield from _pairs(value, name)
    elif name is not None and isinstance(node, (str, int, bool)):
        yield name, node
