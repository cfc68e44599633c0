"""validation.check's fast path (jsonschema_rs) may only ever accept what the Python validator
accepts; every refusal, and its message, is the Python validator's."""

from __future__ import annotations

import uuid
from datetime import UTC, timedelta, timezone
from typing import Any
from unittest import mock

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onboarding import document_schema as onboarding_schema
from plumbing import json_schema as validation
from plumbing.errors import DomainError
from tests.conftest import EXAMPLE
from tests.support import bearer, clinic, issue_token, load, organization, switchboard_url, tiers
from web import schemas


def _compiles(schema: dict[str, Any]) -> bool:
    try:
        validation._Validator.check_schema(schema)
        jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
    except Exception:
        return False
    return True


# Every module-level schema of schemas.py (request bodies and the rest), plus a boolean answer
# and the onboarding document's (onboarding/document_schema.py: the same engine checks it).
SCHEMAS = {
    name: value
    for name, value in [
        *vars(schemas).items(),
        ("boolean_answer", schemas.boolean_answer("isOn")),
        ("ONBOARDING", onboarding_schema.SCHEMA),
    ]
    if isinstance(value, dict)
    and any(k in value for k in ("type", "oneOf", "anyOf", "enum", "const"))
    and _compiles(value)
}
U = "12345678-1234-1234-1234-123456789abc"
# A valid body of every schema the resources validate requests with.
REQUEST_BODIES = {
    "EMPTY_REQUEST": {},
    "VACATION_REQUEST": {"calendarIds": [U]},
    "ACTIVE_REQUEST_REQUEST": {"callFrom": "+420 601 123 456"},
    "RECORDING_COMPLETE": {
        "CallSid": "x-1",
        "CallFrom": "+1 201 555 0198",
        "CallTo": "+12015550100",
        "RecordingUrl": "https://localhost:8443/v.mp3?sig=x",
        "Source": "bench",
        "Extra": "{}",
    },
    "PATIENT_SEARCH_REQUEST": {"filter": {"externalIds": ["a"], "inClinic": True}, "pagination": {"limit": 9.0}},
    "PATIENT_IMPORT": {
        "externalId": "e1",
        "firstName": "Jan",
        "lastName": "Novák",
        "email": "a@b.cz",
        "birthDate": "1980-02-29",
        "phone": None,
    },
    "PATIENT_IMPORT_BULK": {"patients": [{"externalId": "e1", "firstName": "Jan", "lastName": "Novák"}]},
    "PATIENT_IMPORT_BULK_ENVELOPE": {"patients": [{"anything": 1}]},
    "CREATE_REQUEST": {
        "patientId": U,
        "userECRFId": U.upper(),
        "timeSlotInput": {"start": "2026-11-18T10:00:00Z", "end": "2026-11-18T10:30:00+01:00", "calendarId": U},
    },
    "REQUEST_SEARCH_REQUEST": {"filter": {"patientId": U}, "pagination": {"cursor": "c"}},
    "REQUEST_PATCH": {"addTagIds": [U], "userNote": "note 😀"},
    "UPLOAD_LINK_REQUEST": {"contentType": "application/pdf"},
    "ATTACHMENT_REQUEST": {
        "contentType": "image/png",
        "fileHash": "h",
        "description": "scan.png",
        "categoryType": "OTHER",
        "visibleToPatient": False,
    },
}


def python_outcome(instance: Any, schema: dict[str, Any]) -> str | None:
    """What check() answers on the pure-Python path: None (accepted) or the 400 message."""
    with mock.patch.object(validation, "_fast_valid", return_value=False):
        return outcome(instance, schema)


def outcome(instance: Any, schema: dict[str, Any]) -> str | None:
    try:
        validation.check(instance, schema)
    except DomainError as exc:
        return exc.message
    return None


# --- Instances: usually valid ones of the schema, hostile parts mixed in ---------------

TRICKY_FORMATS = {
    "date": [
        "2024-02-29",
        "2023-02-29",
        "2024-02-30",
        "2024-1-01",
        "2024-01-01\n",
        "20240101",
        "0000-01-01",
        "9999-12-31",
        "２０２４-01-01",
        "2024-13-01",
    ],
    "date-time": [
        "2026-11-18T10:00:00Z",
        "2026-11-18t10:00:00z",
        "2024-06-30T23:59:60Z",
        "2024-01-01T00:59:60+01:00",
        "2026-11-18T10:00:00Z\n",
        "2026-11-18 10:00:00Z",
        "2026-11-18T10:00:00",
        "2026-11-18T24:00:00Z",
        "2026-11-18T10:00:00.123456789Z",
        "2026-11-18T10:00:00+25:00",
        "2026-11-18T10:00:00-00:00",
        "2024-02-30T10:00:00Z",
        "0000-01-01T00:00:00Z",
    ],
    "uuid": [
        U,
        U.upper(),
        "{" + U + "}",
        "urn:uuid:" + U,
        U.replace("-", ""),
        U + "\n",
        "+" + U[1:],
        U[:7] + "-" + U[7] + U[9:],
        U + "0",
        "g" + U[1:],
        " " + U[1:],
        "1_" + U[2:],
        "１" + U[1:],
    ],
    "email": ["a@b", "@", "a@", "@b", "a b@c", "a@b\n", "ü@ä.de", "a..b@c.d", '"a b"@c.d', "a@[127.0.0.1]", "x"],
}
TRICKY_STRINGS = [
    "",
    " ",
    "x",
    "\x00",
    "a\x00b",
    "\ud800",
    "a\udfffb",
    "ok\n",
    "ok\r",
    "\n",
    "a\u2028b",
    "e\u0301",
    "😀",
    "\U0001f468\u200d\U0001f469",
    "null",
    "true",
    "0",
    "ｘ",
    "application/pdf",
    "APPLICATION/PDF",
    "application/pdf\n",
    "OTHER",
    "other",
    "available",
    "patient",
    *(text for texts in TRICKY_FORMATS.values() for text in texts),
]
TRICKY_NUMBERS = [
    0,
    1,
    -1,
    9.0,
    9.5,
    500,
    500.0,
    501,
    500.0000001,
    2**63,
    2**64,
    2**70,
    -(2**70),
    10**400,
    1e308,
    5e-324,
    -0.0,
    True,
    False,
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(TRICKY_STRINGS),
    st.sampled_from(TRICKY_NUMBERS),
)
KEYS = st.one_of(st.text(max_size=6), st.sampled_from(["CallSid", "x", "\x00", "\ud800", "CallSid\n", ""]))
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)


def sized(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """Strings at and around the length bounds, of 1- and 2-code-point characters, with odd tails."""
    lengths = [
        n + d for n in (schema.get("minLength", 0), schema.get("maxLength", 3)) for d in (-1, 0, 1) if n + d >= 0
    ]
    return st.builds(
        lambda n, c, tail: (c * n)[: max(0, n - len(tail))] + tail,
        st.sampled_from(lengths),
        st.sampled_from(["x", "é", "😀", "e\u0301", "\x00", "\ud800"]),
        st.sampled_from(["", "", "\n", "\x00", "\ud800", "x"]),
    )


def hostile(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Wrong types, tricky text and numbers, off-by-one lengths, enum values with a newline."""
    choices = [*schema.get("enum", []), *([schema["const"]] if "const" in schema else [])]
    return st.one_of(
        ANY_JSON,
        sized(schema),
        st.sampled_from(TRICKY_STRINGS),
        st.sampled_from(TRICKY_NUMBERS),
        st.sampled_from([f"{v}\n" for v in choices if isinstance(v, str)] or [None]),
    )


OFFSETS = st.sampled_from([UTC, timezone(timedelta(hours=1)), timezone(timedelta(hours=-5, minutes=-30))])
DATE_TIMES = st.datetimes(timezones=OFFSETS).map(lambda t: t.isoformat())
FORMATS = {  # valid values, and values at the edges of what either validator calls valid
    "uuid": st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper()),
    "date": st.dates().map(lambda d: d.isoformat()) | st.dates().map(lambda d: "0000" + d.isoformat()[4:]),
    "date-time": DATE_TIMES | DATE_TIMES.map(lambda t: t[:17] + "60" + t[19:]),  # leap second
    "email": st.emails(),
}
FORMATS = {name: valid | st.sampled_from(TRICKY_FORMATS[name]) for name, valid in FORMATS.items()}


#: values(schema, rate) built once per schema node and rate: a strategy built inside each draw
#: is validated and analysed again by Hypothesis every time (most of this module's time).
_BUILT: dict[tuple[int, int], st.SearchStrategy[Any]] = {}


def values(schema: dict[str, Any], rate: int) -> st.SearchStrategy[Any]:
    """A value of `schema` (usually valid), each part replaced by a hostile one at `rate` %."""
    key = (id(schema), rate)
    if key not in _BUILT:
        _BUILT[key] = _built(schema, rate)
    return _BUILT[key]


PERCENT = st.integers(0, 99)


@st.composite
def _sometimes_hostile(draw: Any, rate: int, bad: st.SearchStrategy[Any], valid: st.SearchStrategy[Any]) -> Any:
    return draw(bad) if draw(PERCENT) < rate else draw(valid)


def _built(schema: dict[str, Any], rate: int) -> st.SearchStrategy[Any]:
    valid = _valid(schema, rate)
    return _sometimes_hostile(rate, hostile(schema), valid) if rate else valid


@st.composite
def _object(
    draw: Any,
    props: dict[str, st.SearchStrategy[Any]],
    required: list[str],
    optional: st.SearchStrategy[list[str]] | None,
    extra: st.SearchStrategy[dict[str, Any]],
) -> Any:
    names = dict.fromkeys([*required, *(draw(optional) if optional is not None else [])])
    found = draw(extra)
    return {**found, **{name: draw(props[name]) for name in names}}


def _valid(schema: dict[str, Any], rate: int) -> st.SearchStrategy[Any]:
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        return st.one_of(*(values(option, rate) for option in schema.get("anyOf") or schema["oneOf"]))
    kinds = schema.get("type", "object")
    return st.one_of(*(_of_kind(schema, kind, rate) for kind in ([kinds] if isinstance(kinds, str) else kinds)))


def _of_kind(schema: dict[str, Any], kind: str, rate: int) -> st.SearchStrategy[Any]:
    if kind == "object":
        props = schema.get("properties", {})
        required = list(schema.get("required", []))
        optional = st.lists(st.sampled_from(sorted(props)), unique=True) if props else None
        extra = st.dictionaries(KEYS.filter(lambda k: k not in props), ANY_JSON, max_size=2)
        children = {name: values(props.get(name, {}), rate) for name in {*required, *props}}
        return _object(children, required, optional, extra)
    if kind == "array":
        low, high = schema.get("minItems", 0), min(4, schema.get("maxItems", 4))
        return st.lists(values(schema.get("items", {}), rate), min_size=low, max_size=max(low, high))
    if kind == "string":
        if schema.get("format") in FORMATS:
            return FORMATS[schema["format"]]
        if "pattern" in schema:  # its `[^\r\n]+$` lets Python's `$` accept one final newline
            return st.builds(
                lambda text, tail: text + tail,
                st.text(st.characters(exclude_characters="\r\n"), min_size=3, max_size=20),
                st.sampled_from(["", "\n"]),
            )
        low, high = schema.get("minLength", 0), schema.get("maxLength", 20)
        return st.text(min_size=low, max_size=min(high, 20)) | sized(schema)
    if kind == "integer":
        return st.builds(
            lambda number, as_float: float(number) if as_float else number,
            st.integers(schema.get("minimum", -(2**64)), schema.get("maximum", 2**64)),
            st.booleans(),
        )
    return st.booleans() if kind == "boolean" else st.none()


STRATEGIES = {
    name: st.one_of(*(values(schema, rate) for rate in (0, 0, 3, 10, 30))) for name, schema in SCHEMAS.items()
}


# --- Tests ---------------------------------------------------------------------------


def test_every_request_schema_is_covered_and_has_a_fast_path():
    assert set(REQUEST_BODIES) <= set(SCHEMAS)
    for name, instance in REQUEST_BODIES.items():
        assert validation._fast_valid(instance, SCHEMAS[name]), name
        assert python_outcome(instance, SCHEMAS[name]) is None, name


def test_the_example_onboarding_document_has_a_fast_path():
    assert validation._fast_valid(EXAMPLE, onboarding_schema.SCHEMA)
    assert validation.first_error(EXAMPLE, onboarding_schema.SCHEMA) is None


@pytest.mark.parametrize("name", sorted(SCHEMAS))
# 200 examples a schema in the full suite; 25 in the fast tier (`bin/test --fast`), the
# developer's quick loop, where these 40 schemas alone took half the tier's time.
@settings(
    max_examples=25 if tiers.FAST else 200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_fast_path_accepts_only_what_python_accepts(name, data):
    schema = SCHEMAS[name]
    instance = data.draw(STRATEGIES[name], label="instance")
    if validation._fast_valid(instance, schema):
        assert next(validation._validator(schema).iter_errors(instance), None) is None
    assert outcome(instance, schema) == python_outcome(instance, schema)


@pytest.mark.parametrize(
    "value, fmt",
    [("0000-01-01", "date"), ("2024-06-30T23:59:60Z", "date-time"), ("2024-01-01T00:59:60+01:00", "date-time")],
)
def test_formats_jsonschema_rs_alone_accepts_are_refused(value, fmt):
    schema = {"type": "object", "properties": {"at": {"type": "string", "format": fmt}}}
    assert not validation._fast_valid({"at": value}, schema)
    assert outcome({"at": value}, schema) == f"at: {value!r} is not a {fmt!r}"


def test_valid_body_never_reaches_the_python_validator(monkeypatch):
    def refuse(schema: Any) -> Any:
        raise AssertionError("the Python validator was used")

    monkeypatch.setattr(validation, "_validator", refuse)
    for name, instance in REQUEST_BODIES.items():
        validation.check(instance, SCHEMAS[name])


BODY = REQUEST_BODIES["RECORDING_COMPLETE"]
IMPORT = {"externalId": "EXT-1", "firstName": "Jana", "lastName": "Nová", "phone": "+420601123456"}


@pytest.mark.parametrize(
    "body, message",
    [
        ({**IMPORT, "externalId": 3}, "externalId: 3 is not of type 'string'"),
        ({**IMPORT, "externalId": ""}, "externalId: '' should be non-empty"),
        ({**IMPORT, "firstName": "J\x00"}, "firstName: must not contain NUL (U+0000) or unpaired surrogate characters"),
        ({**IMPORT, "lastName": "\ud800"}, "lastName: must not contain NUL (U+0000) or unpaired surrogate characters"),
        ({**IMPORT, "birthDate": 1}, "birthDate: 1 is not of type 'string', 'null'"),
        ({k: v for k, v in IMPORT.items() if k != "firstName"}, "firstName: is required"),
    ],
)
def test_refusals_keep_their_message(body, message):
    assert outcome(body, schemas.PATIENT_IMPORT) == message == python_outcome(body, schemas.PATIENT_IMPORT)


def test_unstorable_text_in_an_unknown_field_is_still_ignored():
    """Unknown fields are not validated, so NUL there was and is accepted: by the Python path,
    since the fast path declines any body holding NUL anywhere."""
    for body in ({**BODY, "Unknown": "a\x00b"}, {**BODY, "a\x00b": 1}, {**BODY, "Deep": [{"x": "\ud800"}]}):
        assert not validation._fast_valid(body, schemas.RECORDING_COMPLETE)
        assert outcome(body, schemas.RECORDING_COMPLETE) is None
        assert python_outcome(body, schemas.RECORDING_COMPLETE) is None


def test_over_the_wire(app):
    load(organization(clinic("clinic-en", tz="America/New_York", country="US", language="en")))
    imports = "/external/v1/clinics/clinic-en/patients/import"
    answer = app.post_json(
        imports, {**IMPORT, "externalId": 3}, headers=bearer(issue_token(["clinic-en"], ["write"])), status=400
    ).json
    assert answer == {
        "error": "externalId: 3 is not of type 'string'",
        "code": "VALIDATION_FAILED",
        "param": "/externalId",
    }
    url, headers = switchboard_url("clinic-en", "recording-complete"), bearer(issue_token(["clinic-en"], ["write"]))
    answer = app.post_json(
        url, {**BODY, "CallSid": f"x-{uuid.uuid4()}", "RecordingUrl": None, "Unknown": "a\x00b"}, headers=headers
    ).json
    assert answer == {"success": True}
