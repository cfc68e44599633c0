"""The OpenAPI 3.1 document, built from the same schemas that validate requests.

Paths are written with Falcon's templates (`{clinic_slug}`) in `OPERATIONS` and turned
into the documented camelCase (`{clinicSlug}`) when the document is built.
"""
from __future__ import annotations

import re
from typing import Any

from web import schemas
import storage

SWITCHBOARD = "/external/v1/clinics/{clinic_slug}/switchboard"

_ERROR_TEXT = {
    400: "Malformed payload or validation failure.",
    401: "Missing, invalid, expired or revoked token.",
    403: "Token lacks the scope or has no access to the clinic.",
    404: "Unknown clinic (CLINIC_NOT_FOUND) or resource.",
    409: "Conflict.",
    408: "The body did not arrive within the configured deadline.",
    410: "Gone.",
    413: "Body larger than the configured limit.",
    415: "Body is not JSON.",
    429: "Too many: RATE_LIMITED when the token sent more write requests than its per-minute limit "
         "(recording-complete and the document writes have one each), TOO_MANY_UPLOAD_LINKS when the "
         "clinic holds too many open upload links; retry after the Retry-After seconds.",
    503: "Service dependency unavailable.",
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def operation(
    summary: str,
    *,
    scope: str | None,
    request: dict[str, Any] | None,
    response: dict[str, Any],
    errors: tuple[int, ...] = (),
    request_required: bool = True,
    tag: str,
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": {"200": {"description": "OK", "content": _json(response)}}}
    codes = set(errors)
    if scope is not None:
        op["security"] = [{"bearerAuth": [scope]}]
        op["description"] = f"Requires the `{scope}` scope on a token bound to the clinic."
        codes |= {401, 403, 404}
    if scope == "write":
        codes.add(429)  # every write is counted against its token's rate limit (web/rate_limit.py)
    if request is not None:
        op["requestBody"] = {"required": request_required, "content": _json(request)}
        codes |= {400, 408, 413, 415}
    for code in sorted(codes):
        op["responses"][str(code)] = {"description": _ERROR_TEXT[code], "content": _json({"$ref": "#/components/schemas/Error"})}
    if 429 in codes:
        op["responses"]["429"]["headers"] = {"Retry-After": {"description": "Seconds to wait.",
                                                             "schema": {"type": "integer", "minimum": 1}}}
    return op


# The query string a presigned download URL carries (its signature covers all five).
_DOWNLOAD_PARAMETERS: list[dict[str, Any]] = [
    {"name": name, "in": "query", "required": True, "schema": {"type": "string"}}
    for name in ("expires", "signature", "content_type", "disposition", "filename")]

OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "/openapi.json": {
        "get": operation("This document.", scope=None, request=None, response={"type": "object"}, tag="service"),
    },
    "/healthz": {
        "get": operation(
            "Database and Redis reachability.",
            scope=None,
            request=None,
            response={
                "type": "object",
                "properties": {"status": {"const": "ok"}, "database": {"type": "string"}, "redis": {"type": "string"}},
            },
            errors=(503,),
            tag="service",
        ),
    },
    "/metrics": {
        "get": {
            "summary": "Prometheus metrics of the whole service (text format): requests per route template, "
                       "method and status, latency, RQ queue depths, job durations and outcomes, transcription "
                       "real-time factor. No tenant data.",
            "description": "Open unless the service sets `METRICS_TOKEN`; then send it as a bearer token.",
            "tags": ["service"],
            "responses": {
                "200": {"description": "Prometheus text exposition format.",
                        "content": {"text/plain": {"schema": {"type": "string"}}}},
                "401": {"description": "METRICS_TOKEN is set and was not sent.",
                        "content": _json({"$ref": "#/components/schemas/Error"})},
            },
        },
    },
    "/storage/{key:path}": {
        "put": {
            "summary": "Upload an object through a presigned URL (local storage backend).",
            "tags": ["storage"],
            "description": "The signed query string is the credential; send the signed Content-Type.",
            "parameters": [{"name": name, "in": "query", "required": True, "schema": {"type": "string"}}
                           for name in ("expires", "signature")],
            "requestBody": {"required": True, "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
            "responses": {
                "200": {"description": "Stored.", "content": _json({"type": "object"})},
                **{str(c): {"description": d, "content": _json({"$ref": "#/components/schemas/Error"})}
                   for c, d in ((400, "Bad key."), (403, "Bad, expired or foreign signature, or other content type."),
                                (409, "`ALREADY_REGISTERED`: the upload is registered as an attachment and "
                                      "cannot change."),
                                (408, "The body did not arrive within the upload deadline; nothing stored."),
                                (411, "Content-Length required."), (413, "Too large."))},
            },
        },
        "get": {
            "summary": "Download an object through a presigned URL (local storage backend).",
            "tags": ["storage"],
            "parameters": _DOWNLOAD_PARAMETERS + [
                {"name": "Range", "in": "header", "required": False, "schema": {"type": "string"},
                 "description": "One byte range (`bytes=first-last`, `bytes=first-`, `bytes=-suffix`)."}],
            "responses": {
                "200": {"description": "The object's bytes.", "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
                "206": {"description": "The bytes of the range asked for (Content-Range).",
                        "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
                **{str(c): {"description": d, "content": _json({"$ref": "#/components/schemas/Error"})}
                   for c, d in ((400, "Bad key or Range header."), (403, "Bad or expired signature."),
                                (404, "No such object."), (416, "The range starts past the object's end."))},
            },
        },
        "head": {
            "summary": "The download's headers without its body (local storage backend).",
            "tags": ["storage"],
            "parameters": _DOWNLOAD_PARAMETERS,
            "responses": {
                "200": {"description": "Content-Type, Content-Length, Content-Disposition, Accept-Ranges."},
                **{str(c): {"description": d} for c, d in
                   ((400, "Bad key."), (403, "Bad or expired signature."), (404, "No such object."))},
            },
        },
    },
    f"{SWITCHBOARD}/is-clinic-opened": {
        "post": operation(
            "Is the clinic within its office hours now (clinic's timezone, odd/even ISO weeks)?",
            scope="read",
            request=schemas.EMPTY_REQUEST,
            request_required=False,
            response=schemas.boolean_answer("isOpen"),
            tag="switchboard",
        ),
    },
    f"{SWITCHBOARD}/is-on-vacation": {
        "post": operation(
            "Is a switchboard vacation active, or is today a public holiday?",
            scope="read",
            request=schemas.VACATION_REQUEST,
            request_required=False,
            response=schemas.boolean_answer("isOnVacation"),
            tag="switchboard",
        ),
    },
    f"{SWITCHBOARD}/has-active-request": {
        "post": operation(
            "Does the caller or patient have an open request in this clinic?",
            scope="read",
            request=schemas.ACTIVE_REQUEST_REQUEST,
            response=schemas.boolean_answer("hasActiveRequest"),
            tag="switchboard",
        ),
    },
    f"{SWITCHBOARD}/recording-complete": {
        "post": operation(
            "Hand off an ended call: store it (idempotent per CallSid), then download, transcribe "
            "and create a voice message or missed call request asynchronously.",
            scope="write",
            request=schemas.RECORDING_COMPLETE,
            response=schemas.SUCCESS,
            errors=(409,),
            tag="switchboard",
        ),
    },
}


# --- Signed documents (docs/spec/signed-documents.md) ------------------------------------
CLINIC = "/external/v1/clinics/{clinic_slug}"
_REQUEST = f"{CLINIC}/patientRequests/{{request_id}}"
_DOCS = "signed documents"


def _tags_operation() -> dict[str, Any]:
    op = operation("The clinic's tags that are not deleted.", scope="read", request=None,
                   response=schemas.data({"type": "array", "items": schemas.TAG}), errors=(400,), tag=_DOCS)
    op["parameters"] = [{"name": "type", "in": "query", "required": False,
                         "schema": {"enum": ["patient", "patient_request"]}}]
    return op


def _recording_operation() -> dict[str, Any]:
    op = operation(
        "Play the recording of a voice message or missed call request: 302 to a working download link "
        "(an expired one is re-fetched from the switchboard platform, waiting a few seconds at most), "
        "410 RECORDING_UNAVAILABLE when the recording is gone (the transcript stays in the detail), "
        "503 with Retry-After while the platform does not answer. 404 NOT_FOUND for other requests.",
        scope="read", request=None, response={"type": "object"}, errors=(410, 503), tag=_DOCS)
    del op["responses"]["200"]
    op["responses"]["302"] = {"description": "Redirect to the recording (do not log the Location).",
                              "headers": {"Location": {"schema": {"type": "string"}}}}
    op["responses"]["503"]["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
    return op


def _upload_link_operation() -> dict[str, Any]:
    op = operation(
        "Step 4: a presigned PUT URL (10 minutes, reusable, one object) and its `fileHash`. The URL is a "
        "credential: do not log or persist it. 429 TOO_MANY_UPLOAD_LINKS while the clinic holds the most "
        "open links (issued within 10 minutes, not registered) it may; Retry-After says when the oldest expires.",
        scope="write", request=schemas.UPLOAD_LINK_REQUEST, response=schemas.data(schemas.UPLOAD_LINK),
        errors=(429,), tag=_DOCS)
    op["responses"]["429"]["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
    return op


OPERATIONS.update({
    f"{CLINIC}/patientRequestTypes/search": {"post": operation(
        "Step 1: the clinic's active request types (`id` is create's `userECRFId`).", scope="read",
        request=schemas.EMPTY_REQUEST, request_required=False,
        response=schemas.data({"type": "array", "items": schemas.REQUEST_TYPE}), tag=_DOCS)},
    f"{CLINIC}/patients/search": {"post": operation(
        "Step 2: find patients. Organization scope with patient sharing: patients without a record here "
        "read `isInClinic` false and are not usable for create. Next page: `pagination.cursor`.",
        scope="read", request=schemas.PATIENT_SEARCH_REQUEST, request_required=False,
        response=schemas.page(schemas.PATIENT), tag=_DOCS)},
    f"{CLINIC}/patients/import": {"post": operation(
        "Import one patient into this clinic; the same external id (and source) again updates it.",
        scope="write", request=schemas.PATIENT_IMPORT, response=schemas.data(schemas.PATIENT_IMPORT_RESULT),
        tag=_DOCS)},
    f"{CLINIC}/patients/import-bulk": {"post": operation(
        "Import up to 1000 patients; each item is validated and written on its own, answered per item.",
        scope="write", request=schemas.PATIENT_IMPORT_BULK,
        response=schemas.data(schemas.PATIENT_IMPORT_BULK_RESULT), tag=_DOCS)},
    f"{CLINIC}/patientRequests/create": {"post": operation(
        "Step 3: create a request (title = type name); the type's default patient tags are applied "
        "best effort. 403 patient without a record here, 404 PATIENT_NOT_FOUND / USER_ECRF_NOT_FOUND, "
        "410 PATIENT_MERGED with mergedInto. Not idempotent: after a 5xx look via search first.",
        scope="write", request=schemas.CREATE_REQUEST, response=schemas.data(schemas.PATIENT_REQUEST),
        errors=(410,), tag=_DOCS)},
    f"{CLINIC}/patientRequests/search": {"post": operation(
        "The clinic's requests, newest first; `filter.patientId` and `filter.kind` (standard, voice_message, "
        "missed_call) narrow them, together or alone. `medicalRecords` is always empty. Next page: "
        "`pagination.cursor`.",
        scope="read", request=schemas.REQUEST_SEARCH_REQUEST, request_required=False,
        response=schemas.page(schemas.PATIENT_REQUEST), tag=_DOCS)},
    _REQUEST: {
        "get": operation(
            "Step 7: request detail with attachments and presigned links (at least 30 minutes left). "
            "400 for more than 1000 attachments. A request made from a call (`kind` voice_message or "
            "missed_call) carries `call`: the caller's and callback numbers, the transcript with its status, "
            "issue and language, the switchboard's Extra and the recording's state.", scope="read", request=None,
            response=schemas.data(schemas.PATIENT_REQUEST), errors=(400,), tag=_DOCS),
        "patch": operation(
            "Add request tags (`addTagIds`) and set the request's own `userNote`.", scope="write",
            request=schemas.REQUEST_PATCH, response=schemas.data(schemas.PATIENT_REQUEST), tag=_DOCS),
    },
    f"{_REQUEST}/recording": {"get": _recording_operation()},
    f"{_REQUEST}/attachments/upload-link": {"post": _upload_link_operation()},
    f"{_REQUEST}/attachments": {"post": operation(
        "Step 6: register an uploaded file (fileHash from an upload link of this request). Registering "
        "the same fileHash again answers the first registration. A file over the service's upload size "
        "limit is refused with 400 naming the limit, and deleted.", scope="write",
        request=schemas.ATTACHMENT_REQUEST, response=schemas.data(schemas.ATTACHMENT), tag=_DOCS)},
    f"{CLINIC}/tags": {"get": _tags_operation()},
})


def public_path(template: str) -> str:
    """Falcon template -> documented path: `{clinic_slug}` -> `{clinicSlug}`."""
    def camel(match: re.Match[str]) -> str:
        name = match.group(1).split(":")[0]
        head, *rest = name.split("_")
        return "{" + head + "".join(w.title() for w in rest) + "}"

    return re.sub(r"\{([^}]+)\}", camel, template)


# Path parameters with a rule of their own; the others are plain strings.
_PATH_SCHEMAS: dict[str, dict[str, Any]] = {"key": storage.KEY_SCHEMA}


def _parameters(path: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "in": "path", "required": True, "schema": _PATH_SCHEMAS.get(name, {"type": "string"})}
        for name in re.findall(r"\{([^}]+)\}", path)
    ]


def document(base_url: str = "/") -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for template, methods in OPERATIONS.items():
        path = public_path(template)
        item: dict[str, Any] = {k: v for k, v in methods.items()}
        if _parameters(path):
            item["parameters"] = _parameters(path)
        paths[path] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Clinic integration service",
            "version": "1.0.0",
            "description": "Switchboard routing checks and call hand-off; externally signed document storage.",
        },
        "servers": [{"url": base_url}],
        "paths": paths,
        "components": {
            "schemas": {"Error": schemas.ERROR},
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
