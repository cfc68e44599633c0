"""The answers every operation of the OpenAPI document (web/openapi.py) documents besides
its success: the error answers of each kind of operation (a token, a body, a write, an
Idempotency-Key) with the codes each answers (web/error_codes.py), listed in each answer's
description ("Codes: ..."), and the operation builder that puts them together."""

from __future__ import annotations

from typing import Any

from web import error_codes, schemas

Codes = dict[int, tuple[str, ...]]  # status -> the error codes it comes with
# What each error status means, whatever the operation; each answer adds the codes that
# operation answers with it (web/error_codes.py).
ERROR_TEXT = {
    400: "Malformed payload or validation failure (a NUL character in the URL too); the message names the field.",
    401: "Missing, invalid, expired or revoked token.",
    403: "Token lacks the scope or has no access to the clinic.",
    404: "Unknown clinic or resource.",
    408: "The body did not arrive within the configured deadline.",
    409: "Conflict.",
    410: "Gone.",
    411: "A body whose end the server cannot tell (chunked, without Content-Length): send its length.",
    413: "Body larger than the configured limit.",
    415: "Body is not JSON.",
    422: "This Idempotency-Key was sent before with another body or path.",
    429: "Too many: the token sent more write requests than its per-minute limit (recording-complete and the "
    "document writes have one each), or the clinic holds too many open upload links; retry after the "
    "Retry-After seconds.",
    500: "An unexpected failure; the message says whether a retry is safe (after a create or a registration: retry "
    "with the same Idempotency-Key, or look with search or the detail first).",
    503: "A dependency (database, the switchboard platform) is unavailable or the service is busy; retry after the "
    "Retry-After seconds.",
}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}}
#: Every answer to a counted write (web/rate_limit.py): the IETF httpapi draft's fields.
RATE_LIMIT_HEADERS = {
    "RateLimit-Policy": {
        "description": "The token's budget for this kind of write: its name, its quota `q` and its window `w` in "
        'seconds (`"writes";q=600;w=60`). Absent when the budget is not counted (no limit set, or the '
        "limits' store unavailable).",
        "schema": {"type": "string", "example": '"writes";q=600;w=60'},
    },
    "RateLimit": {
        "description": "Where the token stands after this request: the requests `r` left now and the seconds `t` "
        'until the whole quota is back (`"writes";r=599;t=1`). `r` counts down with each write and is 0 on '
        "the 429.",
        "schema": {"type": "string", "example": '"writes";r=599;t=1'},
    },
}
# The document writes that take an Idempotency-Key (web/idempotency.py).
_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Optional: makes the write safe to retry. The first request with a key runs and its answer is "
    "kept at least 24 hours; a retry with the same key and the same body is answered that answer (with "
    "`Idempotent-Replayed: true`) instead of writing again. The same key with another body: 422 "
    "IDEMPOTENCY_KEY_REUSED; while the first still runs: 409 IDEMPOTENCY_KEY_IN_PROGRESS with Retry-After. Keys "
    "are per token and operation; use a new random key (a UUID) for every new write.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7e]+$"},
}
_IDEMPOTENT_TEXT = {
    400: "Malformed payload or validation failure; an Idempotency-Key that is not 1-255 printable ASCII characters.",
    409: "A request with this Idempotency-Key is still running (retry after the Retry-After seconds), or the write "
    "conflicts with data stored at the same moment.",
}
# Whatever the operation: a NUL character in the URL (web/middleware.py's NoNulInUrl), an
# unexpected failure, or the database down or its pool exhausted (web/errors.py).
_ALWAYS: Codes = {400: ("VALIDATION_FAILED",), 500: ("INTERNAL_ERROR",), 503: ("SERVICE_UNAVAILABLE",)}
# An operation that names a clinic and takes a token (web/auth.py).
_AUTHENTICATED: Codes = {401: ("UNAUTHORIZED",), 403: ("FORBIDDEN",), 404: ("CLINIC_NOT_FOUND",)}
# An operation that reads a body (web/middleware.py's BodyLimit, then the JSON media handler).
_BODY: Codes = {
    400: ("VALIDATION_FAILED",),
    408: ("REQUEST_TIMEOUT",),
    411: ("LENGTH_REQUIRED",),
    413: ("PAYLOAD_TOO_LARGE",),
    415: ("UNSUPPORTED_MEDIA_TYPE",),
}
_IDEMPOTENT: Codes = {
    400: ("IDEMPOTENCY_KEY_INVALID",),
    409: ("IDEMPOTENCY_KEY_IN_PROGRESS", "CONFLICT"),
    422: ("IDEMPOTENCY_KEY_REUSED",),
}
# A write: counted against its token's rate (web/rate_limit.py).
_WRITE: Codes = {429: ("RATE_LIMITED",)}
#: The prefix of the list of codes in an error answer's description (tests read it back).
CODES_SAY = "Codes: "


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _merge(*tables: Codes) -> Codes:
    out: Codes = {}
    for table in tables:
        for status, codes in table.items():
            out[status] = tuple(dict.fromkeys((*out.get(status, ()), *codes)))
    return out


def said(text: str, codes: tuple[str, ...]) -> str:
    """An error answer's description: what the status means here, then its codes."""
    named = ", ".join(f"[`{code}`]({error_codes.link(code)})" for code in codes)
    return f"{text} {CODES_SAY}{named}." if codes else text


def error_responses(
    codes: dict[int, tuple[str, ...]],
    texts: dict[int, str] | None = None,
    schemas_by_code: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The error answers (status -> the codes it comes with), each an `Error` body (or the
    schema given for its status), with Retry-After on 409, 429 and 503."""
    out: dict[str, Any] = {}
    for status in sorted(codes):
        for code in codes[status]:
            assert error_codes.status_of(code) == status, (status, code)
        answer: dict[str, Any] = {
            "description": said((texts or {}).get(status) or ERROR_TEXT[status], codes[status]),
            "content": json_content((schemas_by_code or {}).get(status, schemas.ERROR)),
        }
        if status in (409, 429, 503):
            answer["headers"] = _RETRY_AFTER
        out[str(status)] = answer
    return out


def operation(
    operation_id: str,
    summary: str,
    *,
    scope: str | None,
    request: dict[str, Any] | None,
    response: dict[str, Any],
    codes: dict[int, tuple[str, ...]] | None = None,
    texts: dict[int, str] | None = None,
    error_schemas: dict[int, dict[str, Any]] | None = None,
    request_required: bool = True,
    reads_any_type: bool = False,
    idempotent: bool = False,
    tag: str,
) -> dict[str, Any]:
    """An operation with its error answers: those every operation of its kind may give (a
    token, a body, a write, an Idempotency-Key), and its own `codes`. `reads_any_type`: the
    body is read whatever its Content-Type says (no 415)."""
    op: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "tags": [tag],
        "responses": {"200": {"description": "OK", "content": json_content(response)}},
    }
    tables: list[Codes] = []
    if scope is not None:
        op["security"] = [{"bearerAuth": [scope]}]
        op["description"] = f"Requires the `{scope}` scope on a token bound to the clinic."
        tables.append(_AUTHENTICATED)
    if scope == "write":
        tables.append(_WRITE)
    if request is not None:
        op["requestBody"] = {"required": request_required, "content": json_content(request)}
        tables.append({k: v for k, v in _BODY.items() if not (reads_any_type and k == 415)})
    texts = dict(texts or {})
    if idempotent:  # the Idempotency-Key header and its answers
        op["parameters"] = [_IDEMPOTENCY_KEY]
        tables.append(_IDEMPOTENT)
        texts = {**_IDEMPOTENT_TEXT, **texts}
        op["responses"]["200"]["headers"] = {
            "Idempotent-Replayed": {
                "description": "`true` when this is the stored answer of an earlier request with the same "
                "Idempotency-Key.",
                "schema": {"type": "string", "const": "true"},
            }
        }
    op["responses"].update(error_responses(_merge(*tables, codes or {}, _ALWAYS), texts, error_schemas))
    if scope == "write":  # counted after the token and scope checks: on every answer but theirs
        for status, answer in op["responses"].items():
            if status not in ("401", "403"):
                answer["headers"] = {**answer.get("headers", {}), **RATE_LIMIT_HEADERS}
    return op


def failures(*answers: tuple[int, str, tuple[str, ...]]) -> dict[str, Any]:
    """Error answers of the operations written out by hand (status, what it means, its
    codes), 500 and 503 included."""
    return error_responses(
        _merge({status: codes for status, _, codes in answers}, _ALWAYS),
        {status: text for status, text, _ in answers},
    )
