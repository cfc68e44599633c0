"""Keyset pagination (keyset.py): cursors as the searches have always written them, and
the refusal of anything else. Paging through real rows is covered by the searches'
own tests (test_patients.py, test_request_kinds.py, test_signed_documents.py)."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime

import peewee as pw
import pytest

from models import Patient, PatientRequest
from plumbing.errors import Invalid
from plumbing.keyset import INVALID_CURSOR, Keyset
from web.errors import from_domain

REQUESTS = Keyset(PatientRequest.created_at, PatientRequest.id, descending=True)
PATIENTS = Keyset(Patient.id)
CREATED = datetime(2026, 11, 18, 10, 0, 0, 123456)
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
# Written by documents.py before keyset.py existed: such cursors must keep working.
ISSUED = "WyIyMDI2LTExLTE4VDEwOjAwOjAwLjEyMzQ1NiIsICIxMjM0NTY3OC0xMjM0LTU2NzgtMTIzNC01Njc4MTIzNDU2NzgiXQ"


def b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def sql(expression: pw.Node) -> tuple[str, list]:
    return pw.PostgresqlDatabase(None).get_sql_context().sql(expression).query()


def test_a_request_cursor_is_the_one_issued_before_and_reads_back():
    cursor = REQUESTS.cursor(PatientRequest(created_at=CREATED, id=ID))
    assert cursor == ISSUED
    assert REQUESTS.key(cursor) == (CREATED, ID)


def test_a_patient_cursor_is_the_id_itself():
    assert PATIENTS.cursor(Patient(id=ID)) == str(ID)
    assert PATIENTS.key(str(ID)) == (ID,)


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "nope",
        "%%%",
        "Ž",
        b64(["2026-11-18T10:00:00"]),
        b64(["2026-11-18T10:00:00", str(ID), "x"]),
        b64({"a": 1}),
        b64(5),
        b64(None),
        b64(["yesterday", str(ID)]),
        b64(["2026-11-18T10:00:00", "not-an-id"]),
        b64([1, str(ID)]),
        b64(["2026-11-18T10:00:00", 1]),  # the last one answered 500 before keyset.py
    ],
)
def test_anything_else_is_refused_as_before(cursor):
    with pytest.raises(Invalid) as refused:
        REQUESTS.key(cursor)
    assert refused.value.to_dict() == {
        "error": INVALID_CURSOR,
        "code": "VALIDATION_FAILED",
        "param": "/pagination/cursor",
    }
    assert from_domain(refused.value).status == "400 Bad Request"  # as the API answers it


def test_a_patient_cursor_that_is_no_id_is_refused():
    with pytest.raises(Invalid) as refused:
        PATIENTS.key("nope")
    assert refused.value.to_dict() == {
        "error": INVALID_CURSOR,
        "code": "VALIDATION_FAILED",
        "param": "/pagination/cursor",
    }


def test_the_rows_after_a_key_are_selected_as_before():
    created, rid = CREATED, ID
    assert sql(REQUESTS.after((created, rid))) == sql(
        (PatientRequest.created_at < created) | ((PatientRequest.created_at == created) & (PatientRequest.id < rid))
    )
    assert sql(PATIENTS.after((rid,))) == sql(Patient.id > rid)
    three = Keyset(PatientRequest.created_at, PatientRequest.done_at, PatientRequest.id)
    assert sql(three.after((1, 2, 3))) == sql(
        (PatientRequest.created_at > 1)
        | (
            (PatientRequest.created_at == 1)
            & ((PatientRequest.done_at > 2) | ((PatientRequest.done_at == 2) & (PatientRequest.id > 3)))
        )
    )


def test_a_column_without_a_cursor_form_is_refused_when_the_order_is_made():
    with pytest.raises(TypeError):
        Keyset(Patient.first_name)
