"""What every schema module builds with: the component registry, response objects,
scalars, and the error bodies."""

from __future__ import annotations

from typing import Any

#: name -> schema: the document's `components.schemas`, in the order registered.
COMPONENTS: dict[str, dict[str, Any]] = {}


def component(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Register `schema` as the component `name`; returns it unchanged."""
    assert name not in COMPONENTS, name
    COMPONENTS[name] = schema
    return schema


def answer(properties: dict[str, Any], *, optional: tuple[str, ...] = (), **keywords: Any) -> dict[str, Any]:
    """A response object: every property required except those in `optional`."""
    assert set(optional) <= set(properties), optional
    return {
        "type": "object",
        "required": [k for k in properties if k not in optional],
        "properties": properties,
        **keywords,
    }


def nullable(schema: dict[str, Any], **keywords: Any) -> dict[str, Any]:
    """`schema` or null (an `anyOf`, so a registered schema stays one `$ref`)."""
    return {"anyOf": [schema, {"type": "null"}], **keywords}


UUID = {"type": "string", "format": "uuid"}
DATE_TIME = {"type": "string", "format": "date-time"}
NULLABLE_DATE_TIME = {"type": ["string", "null"], "format": "date-time"}
NULLABLE_STRING = {"type": ["string", "null"]}
TEXT = {"type": "string", "maxLength": 10000}

_ERROR_PROPERTIES: dict[str, Any] = {
    "error": {"type": "string", "description": "A message for people; may change."},
    "code": {
        "type": "string",
        "description": "Stable, machine-readable (VALIDATION_FAILED, NOT_FOUND, ...). Each code's row in "
        "the error table (its cause and what to do): `/docs/errors#error-` and the code in lower case, "
        "`-` for `_` ([`VALIDATION_FAILED`](/docs/errors#error-validation-failed)).",
    },
    "param": {
        "type": "string",
        "description": "On a 400 about one field: the field, as a JSON Pointer (RFC 6901) into the "
        "request body (`/timeSlotInput/end`, `/patients/3/phone`); in a bulk import's item, into the "
        "item (`/phone`); for a query parameter, `?` and its name (`?type`). Absent when the refusal "
        "is not about one field. Stable: read it instead of the message.",
        "examples": ["/timeSlotInput/end"],
    },
}

RATE_LIMIT_STANDING = component(
    "RateLimitStanding",
    answer(
        {
            "policy": {"type": "string", "description": "The budget: `handoffs` or `writes`."},
            "limit": {"type": "integer", "description": "Its quota: requests per `window`."},
            "window": {"type": "integer", "description": "The quota's window in seconds."},
            "remaining": {"type": "integer", "description": "Requests left now: 0 on the 429."},
            "reset": {"type": "integer", "description": "Seconds until the whole quota is back."},
        },
        description="In a 429 RATE_LIMITED: where the token stands on the spent rate-limit budget: the "
        "numbers of the RateLimit-Policy (`q`, `w`) and RateLimit (`r`, `t`) fields, which every answer to a "
        "counted write carries.",
    ),
)

ERROR = component(
    "Error",
    answer(
        {
            **_ERROR_PROPERTIES,
            "rateLimit": RATE_LIMIT_STANDING,
        },
        optional=("param", "rateLimit"),
        description="Every non-2xx answer. `rateLimit` only on a 429 RATE_LIMITED: the budget that is spent.",
    ),
)

PATIENT_MERGED_ERROR = component(
    "PatientMergedError",
    answer(
        {
            **_ERROR_PROPERTIES,
            "mergedInto": {**UUID, "description": "The patient to use instead."},
        },
        optional=("param",),
        description="410 PATIENT_MERGED: the patient was merged into another one.",
    ),
)

EMPTY_REQUEST = component("Empty", {"type": "object", "description": "No fields; an empty object or no body."})

HEALTH_UNAVAILABLE = component(
    "HealthUnavailable",
    answer(
        {
            **_ERROR_PROPERTIES,
            "database": {"type": "string", "enum": ["ok", "last_known", "down"]},
            "schema": {"type": "string", "enum": ["ok", "behind"]},
            "redis": {"type": "string", "enum": ["ok", "down"]},
            "lastKnownSeconds": {"type": "number"},
        },
        optional=("param", "schema", "lastKnownSeconds"),
        description="503 of the readiness check: the database unreachable with nothing recent known, or its "
        "schema not migrated; each part's state (`schema` is missing while the database does not answer).",
    ),
)
