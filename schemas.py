"""JSON Schemas of request and response bodies: used to validate input and to build the
OpenAPI document, so the two can never disagree."""
from __future__ import annotations

from typing import Any

import falcon
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match

from errors import validation_failed

UUID = {"type": "string", "format": "uuid"}

ERROR = {
    "type": "object",
    "required": ["error", "code"],
    "properties": {
        "error": {"type": "string"},
        "code": {"type": "string"},
        "mergedInto": UUID,
    },
}

EMPTY_REQUEST = {"type": "object", "description": "No fields; an empty object or no body."}

VACATION_REQUEST = {
    "type": "object",
    "properties": {
        "calendarIds": {
            "type": "array",
            "items": UUID,
            "maxItems": 1000,
            "description": "Only vacations of these calendars count; omitted = all calendars.",
        }
    },
}

ACTIVE_REQUEST_REQUEST = {
    "type": "object",
    "properties": {
        "callFrom": {"type": "string", "maxLength": 64, "description": "Caller's number, any common format."},
        "patientId": UUID,
    },
    "description": "At least one of callFrom and patientId.",
}


def boolean_answer(name: str) -> dict[str, Any]:
    return {"type": "object", "required": [name], "properties": {name: {"type": "boolean"}}}


_format_checker = FormatChecker(formats=["uuid", "date", "date-time", "email"])
_validators: dict[int, Draft202012Validator] = {}


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    key = id(schema)
    if key not in _validators:
        _validators[key] = Draft202012Validator(schema, format_checker=_format_checker)
    return _validators[key]


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def check(instance: Any, schema: dict[str, Any]) -> None:
    """Raise 400 VALIDATION_FAILED naming the first offending field."""
    error = best_match(_validator(schema).iter_errors(instance))
    if error is not None:
        raise validation_failed(f"{_where(error.absolute_path)}: {error.message}")


def body(req: falcon.Request, schema: dict[str, Any], *, optional: bool = False) -> dict[str, Any]:
    """The request's JSON body, validated against `schema`.

    `optional` bodies may be absent (treated as `{}`).
    """
    media = req.get_media(default_when_empty={} if optional else None)
    if media is None:
        raise validation_failed("body: a JSON object is required")
    if not isinstance(media, dict):
        raise validation_failed("body: must be a JSON object")
    check(media, schema)
    return media
