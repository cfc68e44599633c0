"""Every error code the API answers, with its status, once: the integrators' error table
(docs/integrators/README.md) is this table (tests/test_docs.py holds them together and
`DOCS_UPDATE=1` rewrites it), the OpenAPI document lists each operation's codes from it
(web/openapi.py), and the test suite checks every error answer it provokes against it
(tests/support/contract.py). A code raised anywhere in the service that is not here fails
the suite.

The domain's refusals (plumbing/errors.py) carry their codes as words; their statuses are
web/errors.py's `DOMAIN_STATUSES`, checked against the statuses here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorCode:
    """One row of the error table: the status it comes with (None: a status of its own, the
    fallback), the code, its cause and what the caller should do, in the integrators' words
    (Markdown)."""

    status: int | None
    code: str
    cause: str
    action: str
    #: False for a generic form that no endpoint answers today (kept for what may come).
    answered: bool = True


#: The error table, in its order.
ERROR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode(
        400,
        "VALIDATION_FAILED",
        "The body or a parameter breaks the contract; `param` names the field as a JSON Pointer "
        "(`/RecordingUrl`, `/pagination/limit`, `?type` for a query parameter; absent when the whole body is "
        "refused). Also an unsupported attachment type, a file over the size limit at registration, "
        "a detail with more than 1000 attachments.",
        "Fix the request. Do not retry it unchanged.",
    ),
    ErrorCode(
        400,
        "IDEMPOTENCY_KEY_INVALID",
        "An `Idempotency-Key` that is empty, longer than 255 characters or not printable ASCII. Nothing ran.",
        "Send a UUID as the key.",
    ),
    ErrorCode(
        401,
        "UNAUTHORIZED",
        "No token, an unknown, expired or revoked one.",
        "Check the key; get a new one from the clinic. Do not retry.",
    ),
    ErrorCode(
        403,
        "FORBIDDEN",
        "The key does not open this clinic or lacks the scope; the patient has no record in this clinic; a storage "
        "URL with a bad or expired signature.",
        "Use a key with the right clinic and scope; import the patient first; request a new upload link.",
    ),
    ErrorCode(404, "CLINIC_NOT_FOUND", "No clinic has this slug.", "Check the slug."),
    ErrorCode(404, "PATIENT_NOT_FOUND", "Unknown patient id.", "Look the patient up again (search) or import them."),
    ErrorCode(404, "USER_ECRF_NOT_FOUND", "Unknown or inactive request type.", "Search the request types again."),
    ErrorCode(404, "PATIENT_REQUEST_NOT_FOUND", "No such request in this clinic.", "Check the id and the clinic."),
    ErrorCode(
        404,
        "NOT_FOUND",
        "No such path, storage object, or the request has no recording (it was not made from a call).",
        "Check the URL.",
    ),
    ErrorCode(405, "METHOD_NOT_ALLOWED", "The path exists, the method does not.", "Use the documented method."),
    ErrorCode(
        408,
        "REQUEST_TIMEOUT",
        "The body did not arrive within its deadline (10 s for JSON, 60 s for an upload by default).",
        "Retry; on slow links send smaller bodies.",
    ),
    ErrorCode(
        409,
        "CALL_SID_CONFLICT",
        "This `CallSid` was already handed off for another clinic.",
        "Do not retry: `CallSid` must be unique across clinics.",
    ),
    ErrorCode(
        409,
        "ALREADY_REGISTERED",
        "A PUT to an upload URL whose file is already registered.",
        "Nothing: a registered document cannot change. Request a new upload link for another file.",
    ),
    ErrorCode(
        409,
        "IDEMPOTENCY_KEY_IN_PROGRESS",
        "A request with this `Idempotency-Key` is still running.",
        "Wait `Retry-After` seconds and retry with the same key: you get its answer.",
    ),
    ErrorCode(
        409,
        "CONFLICT",
        "The write conflicts with data stored at the same moment.",
        "Read the current state, then retry if still needed.",
    ),
    ErrorCode(
        410,
        "PATIENT_MERGED",
        "The patient was merged into another; the answer carries `mergedInto`.",
        "Store `mergedInto` as the patient's id and retry with it.",
    ),
    ErrorCode(
        410,
        "RECORDING_UNAVAILABLE",
        "The recording is gone: deleted by the platform, or it cannot be fetched or checked any more (the detail's "
        "`recording.reason` says which). The transcript stays in the detail.",
        "Do not retry; show the transcript.",
    ),
    ErrorCode(410, "GONE", "Generic form of 410; no endpoint answers it today.", "Treat as permanent.", answered=False),
    ErrorCode(
        411,
        "LENGTH_REQUIRED",
        "A body without `Content-Length` where the server cannot tell where it ends (an upload; a chunked body on "
        "a server that does not mark its end).",
        "Send the length.",
    ),
    ErrorCode(
        413,
        "PAYLOAD_TOO_LARGE",
        "A JSON body over 1,000,000 bytes, or an upload over 25 MiB (the operator's limits).",
        "Send less: split a bulk import, shrink the file.",
    ),
    ErrorCode(
        415,
        "UNSUPPORTED_MEDIA_TYPE",
        "A body that is not JSON (a form, for example) where the operation reads JSON only (every operation with "
        "a body but `recording-complete`, which reads JSON and forms whatever their `Content-Type`).",
        "Send `Content-Type: application/json`.",
    ),
    ErrorCode(
        416, "RANGE_NOT_SATISFIABLE", "A download `Range` past the end of the file.", "Ask for a range within the size."
    ),
    ErrorCode(
        422,
        "IDEMPOTENCY_KEY_REUSED",
        "This `Idempotency-Key` was sent before with another body or path. Nothing ran.",
        "A new write needs a new key; a retry must send the first body unchanged.",
    ),
    ErrorCode(
        429,
        "RATE_LIMITED",
        "The key's budget for this kind of write is spent (see Rate limits); the body's `rateLimit` has its "
        "numbers. Nothing was stored.",
        "Wait `Retry-After` seconds, then retry.",
    ),
    ErrorCode(
        429,
        "TOO_MANY_UPLOAD_LINKS",
        "The clinic holds 500 open upload links (issued in the last 10 minutes, not registered).",
        "Wait `Retry-After` seconds; register or abandon open uploads.",
    ),
    ErrorCode(
        429,
        "TOO_MANY_REQUESTS",
        "Generic form of 429; no endpoint answers it today.",
        "Wait `Retry-After` if given, then retry.",
        answered=False,
    ),
    ErrorCode(
        500,
        "INTERNAL_ERROR",
        "A fault in the service; the message says whether to retry (see Retries).",
        "Follow the message's advice.",
    ),
    ErrorCode(
        503,
        "SERVICE_UNAVAILABLE",
        "The database or Redis is unreachable or busy, or the switchboard platform has not handed out a recording "
        "yet. `Retry-After` says when.",
        "Retry after `Retry-After` (see Retries).",
    ),
    ErrorCode(
        None,
        "ERROR",
        "The fallback for a 4xx status without a code of its own; no endpoint answers it today.",
        "Act on the status.",
        answered=False,
    ),
)

BY_CODE: dict[str, ErrorCode] = {row.code: row for row in ERROR_CODES}
assert len(BY_CODE) == len(ERROR_CODES), "each code once"


#: Where each code's row is: the error table the service serves (resources/api_reference.py),
#: the same table as docs/integrators/README.md's, whose rows carry the same anchors.
TABLE_PATH = "/docs/errors"


def anchor(code: str) -> str:
    """A code's row's anchor in either table ("VALIDATION_FAILED" → "error-validation-failed")."""
    return "error-" + code.lower().replace("_", "-")


def link(code: str) -> str:
    """A code's row in the served table: what the OpenAPI document links each code to."""
    return f"{TABLE_PATH}#{anchor(code)}"


def codes_of(status: int) -> tuple[str, ...]:
    """The codes answered with `status`, in the table's order."""
    return tuple(row.code for row in ERROR_CODES if row.status == status)


def status_of(code: str) -> int | None:
    """The status a code comes with (KeyError for a code the table does not hold)."""
    return BY_CODE[code].status
