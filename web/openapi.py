"""The OpenAPI 3.1 document, built from the same schemas that validate requests.

Paths are written with Falcon's templates (`{clinic_slug}`) in `OPERATIONS` and turned
into the documented camelCase (`{clinicSlug}`) when the document is built. Every dict
registered in `schemas.COMPONENTS` is shown as a `$ref` wherever it appears, so each noun
is one named type in a generated client; every operation has a stable `operationId`
(the name of its function in a generated client) and documents its errors, 5xx included.
"""

from __future__ import annotations

import re
from typing import Any

import storage
from plumbing import versions
from web import deprecations, schemas
from web.answers import ERROR_TEXT, failures, json_content, operation

SWITCHBOARD = "/external/v1/clinics/{clinic_slug}/switchboard"
ERROR = {"$ref": "#/components/schemas/Error"}

# The query string a presigned download URL carries (its signature covers all five).
_DOWNLOAD_PARAMETERS: list[dict[str, Any]] = [
    {"name": name, "in": "query", "required": True, "schema": {"type": "string"}}
    for name in ("expires", "signature", "content_type", "disposition", "filename")
]
_BYTES = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
_SERVICE, _STORAGE = "service", "storage"

OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "/openapi.json": {
        "get": operation(
            "getOpenApiDocument", "This document.", scope=None, request=None, response={"type": "object"}, tag=_SERVICE
        ),
    },
    "/livez": {
        "get": operation(
            "getLiveness",
            "Liveness: the process answers (nothing else is looked at). For a platform's restart decision.",
            scope=None,
            request=None,
            response=schemas.answer({"status": {"type": "string", "const": "alive"}}),
            tag=_SERVICE,
        ),
    },
    **{
        path: {
            "get": operation(
                operation_id,
                "Readiness: whether the process can serve. 200 `ok`, or `degraded` (Redis down; or the database "
                "unreachable and the routing checks answered from the last known state); 503 when the database "
                "is unreachable with nothing recent known, or its schema is not migrated."
                + (" The same as `/readyz`." if path == "/healthz" else ""),
                scope=None,
                request=None,
                response=schemas.answer(
                    {
                        "status": {"type": "string", "enum": ["ok", "degraded"]},
                        "database": {"type": "string", "enum": ["ok", "last_known"]},
                        "schema": {"type": "string", "const": "ok"},
                        "redis": {"type": "string", "enum": ["ok", "down"]},
                        "lastKnownSeconds": {"type": "number"},
                    },
                    optional=("schema", "lastKnownSeconds"),
                ),
                texts={
                    503: "The service cannot serve: the database is unreachable with nothing recent known, or its "
                    "schema is not migrated; the body says each part's state."
                },
                error_schemas={503: schemas.HEALTH_UNAVAILABLE},
                tag=_SERVICE,
            ),
        }
        for path, operation_id in (("/readyz", "getReadiness"), ("/healthz", "getHealth"))
    },
    "/metrics": {
        "get": {
            "operationId": "getMetrics",
            "summary": "Prometheus metrics of the whole service (text format): requests per route template, "
            "method and status, latency, RQ queue depths, job durations and outcomes, transcription "
            "real-time factor. No tenant data.",
            "description": "Open unless the service sets `METRICS_TOKEN`; then send it as a bearer token.",
            "tags": [_SERVICE],
            "responses": {
                "200": {
                    "description": "Prometheus text exposition format.",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                **failures((401, "METRICS_TOKEN is set and was not sent.", ("UNAUTHORIZED",))),
            },
        },
    },
    "/storage/{key:path}": {
        "put": {
            "operationId": "putStorageObject",
            "summary": "Upload an object through a presigned URL (local storage backend).",
            "tags": [_STORAGE],
            "description": "The signed query string is the credential; send the signed Content-Type and no "
            "Authorization header.",
            "parameters": [
                {"name": name, "in": "query", "required": True, "schema": {"type": "string"}}
                for name in ("expires", "signature")
            ],
            "requestBody": {"required": True, "content": _BYTES},
            "responses": {
                "200": {"description": "Stored.", "content": json_content({"type": "object"})},
                **failures(
                    (400, "Bad key.", ("VALIDATION_FAILED",)),
                    (403, "Bad, expired or foreign signature, or other content type.", ("FORBIDDEN",)),
                    (409, "The upload is registered as an attachment and cannot change.", ("ALREADY_REGISTERED",)),
                    (408, "The body did not arrive within the upload deadline; nothing stored.", ("REQUEST_TIMEOUT",)),
                    (411, "Content-Length required.", ("LENGTH_REQUIRED",)),
                    (413, "Too large.", ("PAYLOAD_TOO_LARGE",)),
                ),
            },
        },
        "get": {
            "operationId": "getStorageObject",
            "summary": "Download an object through a presigned URL (local storage backend).",
            "tags": [_STORAGE],
            "parameters": [
                *_DOWNLOAD_PARAMETERS,
                {
                    "name": "Range",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "One byte range (`bytes=first-last`, `bytes=first-`, `bytes=-suffix`).",
                },
            ],
            "responses": {
                "200": {"description": "The object's bytes.", "content": _BYTES},
                "206": {"description": "The bytes of the range asked for (Content-Range).", "content": _BYTES},
                **failures(
                    (400, "Bad key or Range header.", ("VALIDATION_FAILED",)),
                    (403, "Bad or expired signature.", ("FORBIDDEN",)),
                    (404, "No such object.", ("NOT_FOUND",)),
                    (416, "The range starts past the object's end.", ("RANGE_NOT_SATISFIABLE",)),
                ),
            },
        },
        "head": {
            "operationId": "headStorageObject",
            "summary": "The download's headers without its body (local storage backend).",
            "tags": [_STORAGE],
            "parameters": _DOWNLOAD_PARAMETERS,
            "responses": {
                "200": {"description": "Content-Type, Content-Length, Content-Disposition, Accept-Ranges."},
                **{
                    str(c): {"description": d}
                    for c, d in (
                        (400, "Bad key."),
                        (403, "Bad or expired signature."),
                        (404, "No such object."),
                        (500, ERROR_TEXT[500]),
                        (503, ERROR_TEXT[503]),
                    )
                },
            },
        },
    },
    f"{SWITCHBOARD}/is-clinic-opened": {
        "post": operation(
            "isClinicOpened",
            "Is the clinic within its office hours now (clinic's timezone, odd/even ISO weeks)?",
            scope="read",
            request=schemas.EMPTY_REQUEST,
            request_required=False,
            response=schemas.CLINIC_OPENED,
            tag="switchboard",
        ),
    },
    f"{SWITCHBOARD}/is-on-vacation": {
        "post": operation(
            "isOnVacation",
            "Is a switchboard vacation active, or is today a public holiday?",
            scope="read",
            request=schemas.VACATION_REQUEST,
            request_required=False,
            response=schemas.ON_VACATION,
            tag="switchboard",
        ),
    },
    f"{SWITCHBOARD}/has-active-request": {
        "post": operation(
            "hasActiveRequest",
            "Does the caller or patient have an open request in this clinic?",
            scope="read",
            request=schemas.ACTIVE_REQUEST_REQUEST,
            response=schemas.ACTIVE_REQUEST,
            tag="switchboard",
        ),
    },
    f"{SWITCHBOARD}/recording-complete": {
        "post": operation(
            "recordingComplete",
            "Hand off an ended call: store it (idempotent per CallSid), then download, transcribe "
            "and create a voice message or missed call request asynchronously.",
            scope="write",
            request=schemas.RECORDING_COMPLETE,
            response=schemas.SUCCESS,
            codes={409: ("CALL_SID_CONFLICT",)},
            texts={409: "This CallSid belongs to another clinic's call: do not retry."},
            reads_any_type=True,
            tag="switchboard",
        ),
    },
}


# --- Signed documents (docs/spec/signed-documents.md) ------------------------------------
CLINIC = "/external/v1/clinics/{clinic_slug}"
_REQUEST = f"{CLINIC}/patientRequests/{{request_id}}"
# The operations on one request: its id is not one of this clinic's requests.
_REQUEST_NOT_FOUND = ("PATIENT_REQUEST_NOT_FOUND",)
_DOCS = "signed documents"


def _tags_operation() -> dict[str, Any]:
    op = operation(
        "listTags",
        "The clinic's tags that are not deleted.",
        scope="read",
        request=None,
        response=schemas.data({"type": "array", "items": schemas.TAG}),
        codes={400: ("VALIDATION_FAILED",)},
        tag=_DOCS,
    )
    op["parameters"] = [{"name": "type", "in": "query", "required": False, "schema": schemas.TAG_TYPE}]
    return op


def _events_operation() -> dict[str, Any]:
    op = operation(
        "listEvents",
        "The clinic's event log, oldest first: every change integrators are told of, with the ids the webhooks "
        "carry (`id` is their `webhook-id`), kept 30 days. Start without `after`, then pass `nextCursor` as "
        "`after`: no event is skipped or repeated, however the writes interleave (an event committed late is "
        "listed after the ones already read). `type` (repeatable) narrows the types.",
        scope="read",
        request=None,
        response=schemas.EVENT_PAGE,
        codes={400: ("VALIDATION_FAILED",)},
        tag=_DOCS,
    )
    op["parameters"] = [
        {"name": "after", "in": "query", "required": False, "schema": {"type": "string", "maxLength": 300}},
        {
            "name": "limit",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 1, "maximum": 500},
        },
        {
            "name": "type",
            "in": "query",
            "required": False,
            "schema": {"type": "array", "items": schemas.EVENT_TYPE},
            "style": "form",
            "explode": True,
        },
    ]
    return op


def _webhooks() -> dict[str, Any]:
    """OpenAPI 3.1's `webhooks`: what a receiver is sent, one entry per event type."""
    from models.change_events import TYPES

    signed = [
        {"name": name, "in": "header", "required": True, "schema": {"type": "string"}, "description": text}
        for name, text in (
            ("webhook-id", "The event's id: the same on every try. Deduplicate by it."),
            ("webhook-timestamp", "This try's time, seconds since the epoch."),
            ("webhook-signature", "`v1,<base64 HMAC-SHA256>` (Standard Webhooks), two during a secret's rotation."),
        )
    ]
    return {
        kind: {
            "post": {
                "operationId": "on" + "".join(part.capitalize() for part in kind.split(".")),
                "summary": f"{kind}: sent to the clinic's endpoints that want it (Standard Webhooks).",
                "tags": [_DOCS],
                "parameters": signed,
                "requestBody": {"required": True, "content": json_content(schemas.EVENT)},
                "responses": {
                    "200": {"description": "Any 2xx: delivered. 410 disables the endpoint; anything else is retried."}
                },
            }
        }
        for kind in TYPES
    }


def _recording_operation() -> dict[str, Any]:
    # Tagged with the switchboard: its spec describes the recording's lifetime and re-fetch.
    op = operation(
        "getRecording",
        "Play the recording of a voice message or missed call request: 302 to a working download link "
        "(an expired one is re-fetched from the switchboard platform, waiting a few seconds at most), "
        "410 RECORDING_UNAVAILABLE when the recording is gone (the transcript stays in the detail), "
        "503 with Retry-After while the platform does not answer. 404 NOT_FOUND for other requests.",
        scope="read",
        request=None,
        response={"type": "object"},
        codes={404: (*_REQUEST_NOT_FOUND, "NOT_FOUND"), 410: ("RECORDING_UNAVAILABLE",)},
        texts={
            404: "Unknown clinic or request, or the request was not made from a call.",
            410: "The recording is gone; the transcript stays in the detail.",
        },
        tag="switchboard",
    )
    del op["responses"]["200"]
    op["responses"]["302"] = {
        "description": "Redirect to the recording (do not log the Location; fetch it without the bearer token).",
        "headers": {"Location": {"schema": {"type": "string"}}},
    }
    return op


OPERATIONS.update(
    {
        f"{CLINIC}/patientRequestTypes/search": {
            "post": operation(
                "searchPatientRequestTypes",
                "Step 1: the clinic's active request types (`id` is create's `userECRFId`).",
                scope="read",
                request=schemas.EMPTY_REQUEST,
                request_required=False,
                response=schemas.data({"type": "array", "items": schemas.REQUEST_TYPE}),
                tag=_DOCS,
            )
        },
        f"{CLINIC}/patients/search": {
            "post": operation(
                "searchPatients",
                "Step 2: find patients. Organization scope with patient sharing: patients without a record here "
                "read `isInClinic` false and are not usable for create. Next page: `pagination.cursor`.",
                scope="read",
                request=schemas.PATIENT_SEARCH_REQUEST,
                request_required=False,
                response=schemas.page(schemas.PATIENT),
                tag=_DOCS,
            )
        },
        f"{CLINIC}/patients/import": {
            "post": operation(
                "importPatient",
                "Import one patient into this clinic; the same external id (and source) again updates it.",
                scope="write",
                request=schemas.PATIENT_IMPORT,
                response=schemas.data(schemas.PATIENT_IMPORT_RESULT),
                idempotent=True,
                tag=_DOCS,
            )
        },
        f"{CLINIC}/patients/import-bulk": {
            "post": operation(
                "importPatientsBulk",
                "Import up to 1000 patients, answered per item: each item is validated on its own (an invalid item "
                "is answered `failed` with its error, naming its field in `param`), then every valid item is "
                "written in one transaction (all of them or, on a 5xx, none).",
                scope="write",
                request=schemas.PATIENT_IMPORT_BULK,
                response=schemas.data(schemas.PATIENT_IMPORT_BULK_RESULT),
                idempotent=True,
                tag=_DOCS,
            )
        },
        f"{CLINIC}/patientRequests/create": {
            "post": operation(
                "createPatientRequest",
                "Step 3: create a request (title = type name); the type's default patient tags are applied "
                "best effort. 403 patient without a record here, 404 PATIENT_NOT_FOUND / USER_ECRF_NOT_FOUND, "
                "410 PATIENT_MERGED with mergedInto. After a 5xx or a timeout: retry with the same Idempotency-Key, "
                "or (sent without one) look via search first.",
                scope="write",
                request=schemas.CREATE_REQUEST,
                idempotent=True,
                response=schemas.data(schemas.PATIENT_REQUEST),
                codes={404: ("PATIENT_NOT_FOUND", "USER_ECRF_NOT_FOUND"), 410: ("PATIENT_MERGED",)},
                texts={
                    403: "Token lacks the scope or has no access to the clinic, or the patient has no record in this "
                    "clinic.",
                    410: "The patient was merged into another: `mergedInto`.",
                },
                error_schemas={410: schemas.PATIENT_MERGED_ERROR},
                tag=_DOCS,
            )
        },
        f"{CLINIC}/patientRequests/search": {
            "post": operation(
                "searchPatientRequests",
                "The clinic's requests, newest first; `filter.patientId` and `filter.kind` (standard, voice_message, "
                "missed_call) narrow them, together or alone. `medicalRecords` is always empty. Next page: "
                "`pagination.cursor`.",
                scope="read",
                request=schemas.REQUEST_SEARCH_REQUEST,
                request_required=False,
                response=schemas.page(schemas.PATIENT_REQUEST),
                tag=_DOCS,
            )
        },
        _REQUEST: {
            "get": operation(
                "getPatientRequest",
                "Step 7: request detail with attachments and presigned links (at least 30 minutes left). "
                "400 for more than 1000 attachments. A request made from a call (`kind` voice_message or "
                "missed_call) carries `call`: the caller's and callback numbers, the transcript with its status, "
                "issue and language, the switchboard's Extra and the recording's state.",
                scope="read",
                request=None,
                response=schemas.data(schemas.PATIENT_REQUEST_DETAIL),
                codes={400: ("VALIDATION_FAILED",), 404: _REQUEST_NOT_FOUND},
                tag=_DOCS,
            ),
            "patch": operation(
                "updatePatientRequest",
                "Add request tags (`addTagIds`), set the request's own `userNote`, resolve or reopen it (`done`).",
                scope="write",
                request=schemas.REQUEST_PATCH,
                response=schemas.data(schemas.PATIENT_REQUEST),
                codes={404: _REQUEST_NOT_FOUND},
                idempotent=True,
                tag=_DOCS,
            ),
        },
        f"{_REQUEST}/recording": {"get": _recording_operation()},
        f"{_REQUEST}/attachments/upload-link": {
            "post": operation(
                "createUploadLink",
                "Step 4: a presigned PUT URL (10 minutes, reusable, one object) and its `fileHash`. The URL is a "
                "credential: do not log or persist it. 429 TOO_MANY_UPLOAD_LINKS while the clinic holds the most "
                "open links (issued within 10 minutes, not registered) it may; Retry-After says when the oldest "
                "expires. A retry with the same Idempotency-Key answers the same fileHash with a fresh URL.",
                scope="write",
                request=schemas.UPLOAD_LINK_REQUEST,
                response=schemas.data(schemas.UPLOAD_LINK),
                codes={404: _REQUEST_NOT_FOUND, 429: ("TOO_MANY_UPLOAD_LINKS",)},
                idempotent=True,
                tag=_DOCS,
            )
        },
        f"{_REQUEST}/attachments": {
            "post": operation(
                "registerAttachment",
                "Step 6: register an uploaded file (fileHash from an upload link of this request). Registering "
                "the same fileHash again answers the first registration. A file over the service's upload size "
                "limit is refused with 400 naming the limit, and deleted. After a 5xx or a timeout: retry with the "
                "same Idempotency-Key.",
                scope="write",
                request=schemas.ATTACHMENT_REQUEST,
                response=schemas.data(schemas.ATTACHMENT),
                codes={404: _REQUEST_NOT_FOUND},
                idempotent=True,
                tag=_DOCS,
            )
        },
        f"{CLINIC}/tags": {"get": _tags_operation()},
        f"{CLINIC}/events": {"get": _events_operation()},
    }
)


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


def _referenced(node: Any, names: dict[int, str], own: int | None = None) -> Any:
    """`node` with every registered schema in it (but `own`, the one being defined) as a `$ref`."""
    if isinstance(node, dict):
        name = names.get(id(node))
        if name is not None and id(node) != own:
            return {"$ref": f"#/components/schemas/{name}"}
        return {key: _referenced(value, names) for key, value in node.items()}
    if isinstance(node, list):
        return [_referenced(value, names) for value in node]
    return node


_TAGS = [
    {
        "name": "switchboard",
        "description": "The switchboard's routing checks and call hand-off "
        "(docs/spec/switchboard.md), and the recording of a request made "
        "from a call.",
    },
    {
        "name": _DOCS,
        "description": "Externally signed document storage (docs/spec/signed-documents.md): "
        "request types, patients, patient requests, attachments, tags.",
    },
    {"name": _STORAGE, "description": "Presigned storage URLs (local backend): send no bearer token to them."},
    {"name": _SERVICE, "description": "Health, metrics and this document."},
]


_DEPRECATION_HEADERS = {
    "Deprecation": {
        "description": "This operation is deprecated (RFC 9745): since when, `@` and seconds since the epoch.",
        "schema": {"type": "string"},
    },
    "Sunset": {
        "description": "After this date the operation may stop answering (RFC 8594, an HTTP date).",
        "schema": {"type": "string"},
    },
}


def _deprecated(op: dict[str, Any], deprecation: deprecations.Deprecation) -> dict[str, Any]:
    """`op` marked as going away: `deprecated`, the dates in words, the headers on every answer."""
    said = (
        f"Deprecated since {deprecation.announced.isoformat()}; may stop answering after "
        f"{deprecation.sunset.isoformat()} (the Sunset header). What replaces it: {deprecation.link}."
    )
    responses = {
        status: {**answer, "headers": {**answer.get("headers", {}), **_DEPRECATION_HEADERS}}
        for status, answer in op["responses"].items()
    }
    return {
        **op,
        "deprecated": True,
        "description": f"{op.get('description', '')} {said}".strip(),
        "responses": responses,
    }


def document(base_url: str = "/") -> dict[str, Any]:
    names = {id(schema): name for name, schema in schemas.COMPONENTS.items()}
    going = {(d.method.lower(), d.route): d for d in deprecations.DEPRECATED}
    paths: dict[str, Any] = {}
    for template, methods in OPERATIONS.items():
        path = public_path(template)
        item: dict[str, Any] = {
            k: _referenced(_deprecated(v, going[(k, template)]) if (k, template) in going else v, names)
            for k, v in methods.items()
        }
        if _parameters(path):
            item["parameters"] = _parameters(path)
        paths[path] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Clinic integration service",
            "version": versions.API,
            "description": "Switchboard routing checks and call hand-off; externally signed document storage.",
        },
        "servers": [{"url": base_url}],
        "tags": _TAGS,
        "paths": paths,
        "webhooks": {name: _referenced(hook, names) for name, hook in _webhooks().items()},
        "components": {
            "schemas": {name: _referenced(schema, names, id(schema)) for name, schema in schemas.COMPONENTS.items()},
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
