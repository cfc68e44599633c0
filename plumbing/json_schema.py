"""Validating JSON against a JSON Schema: the one validator set-up of the service.

Request bodies (the catalogue in `web/schemas/`, read by `web/validation.py`) and
onboarding documents (`onboarding/document_schema.py`) both go through `first_error`: a fast path
that may only accept, then the Python `jsonschema` validator, the sole authority for
refusals and their messages. `check` turns a refusal into `errors.Invalid` naming the
field (the API answers it 400 VALIDATION_FAILED).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError, best_match

from plumbing.errors import Invalid

_format_checker = FormatChecker(formats=["uuid", "date", "date-time", "email"])
# PostgreSQL refuses NUL in text, and an unpaired surrogate (valid JSON: "\ud800") cannot
# be encoded as UTF-8: either would fail deep in the driver as a 500. No real text holds
# them, so every field typed "string" refuses them with the field's name.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_draft_type = Draft202012Validator.VALIDATORS["type"]


def _storable_type(validator: Any, types: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    yield from _draft_type(validator, types, instance, schema)
    if isinstance(instance, str) and _UNSTORABLE.search(instance):
        yield ValidationError("must not contain NUL (U+0000) or unpaired surrogate characters")


_Validator = validators.extend(Draft202012Validator, {"type": _storable_type})
_validators: dict[int, Any] = {}


def _validator(schema: dict[str, Any]) -> Any:
    key = id(schema)
    if key not in _validators:
        _validators[key] = _Validator(schema, format_checker=_format_checker)
    return _validators[key]


# Two validators per schema: jsonschema_rs says "valid" in under 1 µs, the common case; the
# Python one (~40 µs) stays the sole authority for refusals and their messages. So the fast
# path only ever accepts; whatever it does not vouch for (invalid, not plain JSON, a string
# holding NUL or a lone surrogate, which only the Python "type" refuses, or jsonschema_rs
# raising) goes on to the Python path, which may still accept it (its `re` `$` matches
# before a final newline). Formats use the Python checks: jsonschema_rs's own accept year 0
# and leap seconds. The walk runs first: it also keeps over-deep bodies out of the Rust code.
def _python_format(name: str) -> Callable[[str], bool]:
    return lambda text: _format_checker.conforms(text, name)


_RS_FORMATS: dict[str, Callable[[str], bool]] = {name: _python_format(name) for name in _format_checker.checkers}
_JSON_SCALARS = (int, float, bool, type(None))
_fast_validators: dict[int, tuple[dict[str, Any], Any]] = {}


def _storable(value: Any) -> bool:
    """Plain JSON whose strings (keys included) hold no NUL or lone surrogate."""
    kind = type(value)
    if kind is str:
        return _UNSTORABLE.search(value) is None
    if kind is dict:
        return all(map(_storable, value)) and all(map(_storable, value.values()))
    if kind is list:
        return all(map(_storable, value))
    return kind in _JSON_SCALARS


def _fast_valid(instance: Any, schema: dict[str, Any]) -> bool:
    key = id(schema)
    if key not in _fast_validators:
        try:
            fast = jsonschema_rs.Draft202012Validator(schema, validate_formats=True, formats=_RS_FORMATS)
        except Exception:
            fast = None  # no fast path for this schema
        _fast_validators[key] = (schema, fast)  # holding `schema` keeps its id from being reused
    fast = _fast_validators[key][1]
    try:
        return fast is not None and _storable(instance) and fast.is_valid(instance)
    except Exception:  # e.g. RecursionError in the walk, a format check raising
        return False


def first_error(instance: Any, schema: dict[str, Any]) -> ValidationError | None:
    """None when `instance` is valid, else the error `best_match` picks among the Python
    validator's (the one a reader is best shown first)."""
    if _fast_valid(instance, schema):
        return None
    return best_match(_validator(schema).iter_errors(instance))


def field_path(parts: Iterable[Any], root: str = "body") -> str:
    """A JSON path as messages name it (`clinics[0].slug`); `root` for the whole instance."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or root


def pointer(parts: Iterable[Any]) -> str:
    """The JSON Pointer (RFC 6901) of a path: `/clinics/0/slug`; "" for the whole instance."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def check(instance: Any, schema: dict[str, Any]) -> None:
    """Raise `Invalid` naming the first offending field, in its message and as `param`
    (the field's JSON Pointer; absent when the refusal is about the whole instance)."""
    error = first_error(instance, schema)
    if error is None:
        return
    path = list(error.schema_path)
    if error.validator == "required" and path[-2:] == ["then", "required"]:
        # "At least one of" written as if/then (schemas.ACTIVE_REQUEST_REQUEST): name every field that would do.
        parent = schema
        for part in path[:-2]:
            parent = parent[part]
        fields = [*parent["if"]["not"]["required"], *error.validator_value]
        # The first of the fields that would do is the one named.
        where = [*error.absolute_path, fields[0]]
        raise Invalid(f"{field_path(error.absolute_path)}: {' or '.join(fields)} is required", param=pointer(where))
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = next(p for p in error.validator_value if p not in error.instance)
        where = [*error.absolute_path, missing]
        raise Invalid(f"{field_path(where)}: is required", param=pointer(where))
    raise Invalid(f"{field_path(error.absolute_path)}: {error.message}", param=pointer(error.absolute_path))
