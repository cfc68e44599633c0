"""Schemathesis hooks for tests/test_fuzz.py, loaded by `st run` via SCHEMATHESIS_HOOKS.

`positive_data_acceptance` says a schema-valid request must not be refused. A few rules
of the contract cannot be written in JSON Schema because they depend on data or on a
parser: whether a string is a phone number (`phonenumbers`), whether an id names a
tag or upload link of this clinic or request, whether a cursor was issued by
this search, whether a RecordingUrl host resolves to a public address, whether a
patient was merged. The spec answers those with 400 VALIDATION_FAILED (410
PATIENT_MERGED for merges). This check is the built-in one, except that it lets through
exactly those answers: the operation, the status, the code and the start of the
message must all match an entry below. So does a document write's 422
IDEMPOTENCY_KEY_REUSED: the same key sent earlier with another body. Any other refusal of valid data still fails.

`negative_data_rejection` says a schema-violating request must be refused. The bulk
import's items are typed (`PatientImport`, so generated clients are) but validated one
by one: a body whose envelope is valid is answered 200 with each invalid item `failed`.
The wrapper below lets through exactly that answer.

`st run --workers 2` generates in two threads, and Hypothesis describes each filter's
lambda by parsing its source (`ast.parse`). CPython 3.11's AST construction keeps its
recursion depth in state the threads share, so two parses at once can fail with
"SystemError: AST constructor recursion depth mismatch" (python/cpython#106905): an error
of the tool, reported as the operation's. In this process parses take turns.
"""

from __future__ import annotations

import ast
import json
import re
import threading
from typing import Any

import schemathesis
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from plumbing import json_schema as validation
from web import schemas

_PARSE = threading.Lock()
_parse = ast.parse


def _parse_in_turn(*args: Any, **kwargs: Any) -> Any:
    with _PARSE:
        return _parse(*args, **kwargs)


ast.parse = _parse_in_turn  # type: ignore[assignment]  # the `st` process only (SCHEMATHESIS_HOOKS)

CLINIC = "/external/v1/clinics/{clinicSlug}"
SWITCHBOARD = f"{CLINIC}/switchboard"
REQUEST = f"{CLINIC}/patientRequests/{{requestId}}"
_CURSOR = (400, "VALIDATION_FAILED", "pagination.cursor: not a cursor of this search")

#: (method, documented path) -> the data-dependent refusals: (status, code, message prefix).
SEMANTIC_REFUSALS: dict[tuple[str, str], tuple[tuple[int, str, str], ...]] = {
    # Only the URL's safety, which depends on DNS and on the host name's kind: every other
    # value of a hand-off is stored (switchboard/handoff.py), and the routing checks answer.
    ("POST", f"{SWITCHBOARD}/recording-complete"): ((400, "VALIDATION_FAILED", "RecordingUrl: "),),
    ("POST", f"{CLINIC}/patients/search"): (_CURSOR,),
    ("GET", f"{CLINIC}/events"): ((400, "VALIDATION_FAILED", "after: not a cursor of this log"),),
    ("POST", f"{CLINIC}/patients/import"): ((400, "VALIDATION_FAILED", "phone: not a phone number"),),
    ("POST", f"{CLINIC}/patientRequests/search"): (_CURSOR,),
    ("POST", f"{CLINIC}/patientRequests/create"): (
        (410, "PATIENT_MERGED", ""),
        (400, "VALIDATION_FAILED", "timeSlotInput.calendarId: not a calendar of this clinic"),
        (400, "VALIDATION_FAILED", "timeSlotInput.end: must be after start"),
    ),
    ("PATCH", REQUEST): ((400, "VALIDATION_FAILED", "addTagIds: not request tags of this clinic"),),
    ("POST", f"{REQUEST}/attachments"): (
        (400, "VALIDATION_FAILED", "fileHash: not issued by an upload link of this request"),
        (400, "VALIDATION_FAILED", "fileHash: no file was uploaded for it"),
        # the stored bytes are not of the registered type (file_types.py)
        (400, "VALIDATION_FAILED", "contentType: the uploaded file is not "),
    ),
}
# An Idempotency-Key sent before with another body (the fuzzer's keys repeat: "0", "a"):
# its answer depends on what that key was used for, as the contract says.
_KEY_REUSED = (422, "IDEMPOTENCY_KEY_REUSED", "This Idempotency-Key was used for a request with another body")
for _operation in (
    ("POST", f"{CLINIC}/patients/import"),
    ("POST", f"{CLINIC}/patients/import-bulk"),
    ("POST", f"{CLINIC}/patientRequests/create"),
    ("PATCH", REQUEST),
    ("POST", f"{REQUEST}/attachments/upload-link"),
    ("POST", f"{REQUEST}/attachments"),
):
    SEMANTIC_REFUSALS[_operation] = (*SEMANTIC_REFUSALS.get(_operation, ()), _KEY_REUSED)


#: Text PostgreSQL cannot store (NUL) or UTF-8 cannot encode (a lone surrogate, valid in
#: JSON as "\\ud800"); every string field refuses it (web/validation.py), whatever the operation.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_UNSTORABLE_MESSAGE = "must not contain NUL (U+0000) or unpaired surrogate characters"
_NUL_IN_URL = "The URL contains a NUL character."  # app.py, before routing


def _holds_unstorable(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_UNSTORABLE.search(value))
    if isinstance(value, dict):
        return any(_holds_unstorable(k) or _holds_unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_unstorable(v) for v in value)
    return False


def documented_refusal(method: str, path: str, status: int, body: Any, sent: Any = None) -> bool:
    """Is this answer one of the data-dependent refusals of this operation? `sent` is
    what the request carried (body, query, path parameters): an unstorable-text refusal
    counts only if it held such text."""
    if not isinstance(body, dict):
        return False
    message = str(body.get("error", ""))
    if (
        status == 400
        and body.get("code") == "VALIDATION_FAILED"
        and _holds_unstorable(sent)
        and (message.endswith(_UNSTORABLE_MESSAGE) or message == _NUL_IN_URL)
    ):
        return True
    for want_status, code, prefix in SEMANTIC_REFUSALS.get((method.upper(), path), ()):
        if status == want_status and body.get("code") == code and str(body.get("error", "")).startswith(prefix):
            return True
    return False


def _json_of(response: Any) -> Any:
    try:
        return json.loads(response.content)
    except ValueError:
        return None


@schemathesis.check
def positive_data_acceptance_beyond_schema(ctx: Any, response: Any, case: Any) -> bool | None:
    """The built-in positive_data_acceptance, minus the refusals listed above."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        sent = [getattr(case, name, None) for name in ("body", "query", "path_parameters")]
        if documented_refusal(case.method, case.path, response.status_code, _json_of(response), sent):
            return None
        raise


BULK_IMPORT = ("POST", f"{CLINIC}/patients/import-bulk")


def items_answered_alone(sent: Any, status: int, body: Any) -> bool:
    """A bulk import whose envelope is valid, answered 200 with every invalid item `failed`."""
    if status != 200 or not isinstance(body, dict) or not isinstance(sent, dict):
        return False
    if validation.first_error(sent, schemas.PATIENT_IMPORT_BULK_ENVELOPE) is not None:
        return False
    answers = body.get("data")
    items = sent["patients"]
    if not isinstance(answers, list) or len(answers) != len(items):
        return False
    return all(
        answer.get("status") == "failed"
        for item, answer in zip(items, answers)
        if validation.first_error(item, schemas.PATIENT_IMPORT) is not None
    )


@schemathesis.check
def negative_data_rejection_beyond_items(ctx: Any, response: Any, case: Any) -> bool | None:
    """The built-in negative_data_rejection, minus bulk imports answered per item."""
    try:
        return negative_data_rejection(ctx, response, case)
    except AcceptedNegativeData:
        if (case.method.upper(), case.path) == BULK_IMPORT and items_answered_alone(
            case.body, response.status_code, _json_of(response)
        ):
            return None
        raise
