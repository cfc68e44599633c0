"""Patient search (organization scope, external ids, free text, paging) and import."""
from __future__ import annotations

import pytest

from database import db

from models import ExternalId, Patient, PatientRecord
from tests.support import bearer, issue_token, load
from tests.support.live_service import api, patient_id, signing_organization, type_id

SEARCH = api() + "/patients/search"
IMPORT = api() + "/patients/import"
BULK = api() + "/patients/import-bulk"


@pytest.fixture
def token(app) -> str:
    load(signing_organization())
    return issue_token(["clinic-a"], ["read", "write"])


def search(app, token: str, body: dict | None = None, status: int = 200, url: str = SEARCH):
    return app.post_json(url, body or {}, headers=bearer(token), status=status).json


def ids(answer: dict) -> list[str]:
    return [p["id"] for p in answer["data"]]


def test_sharing_org_scope_marks_sibling_patients_and_in_clinic_filters_them(app, token):
    everyone = search(app, token)
    assert sorted(ids(everyone)) == sorted([patient_id("jana"), patient_id("petr")])  # merged duplicate not listed
    jana = next(p for p in everyone["data"] if p["id"] == patient_id("jana"))
    assert jana == {"id": patient_id("jana"), "firstName": "Jana", "lastName": "Nováková", "phone": "+420601123456",
                    "email": "jana@example.org", "birthDate": "1980-04-12", "tags": [], "note": "Prefers mornings.",
                    "externalIds": [{"source": "signing-system", "id": "EXT-1"}], "status": "ACTIVE",
                    "isInClinic": True}
    petr = next(p for p in everyone["data"] if p["id"] == patient_id("petr"))
    assert (petr["status"], petr["note"], petr["tags"], petr["externalIds"], petr["isInClinic"]) == (
        "WAITING", "", [], [], False)
    assert ids(search(app, token, {"filter": {"inClinic": True}})) == [patient_id("jana")]


def test_without_sharing_only_this_clinics_patients(app):
    load(signing_organization(sharing=False))
    token = issue_token(["clinic-a"], ["read"])
    assert ids(search(app, token)) == [patient_id("jana")]
    assert ids(search(app, token, {"filter": {"query": "Svoboda"}})) == []


def test_external_ids_only_match_ids_registered_in_this_clinic(app, token):
    assert ids(search(app, token, {"filter": {"externalId": "EXT-1"}})) == [patient_id("jana")]
    assert ids(search(app, token, {"filter": {"externalId": "EXT-2"}})) == []  # Petr's id lives in clinic-b
    assert ids(search(app, token, {"filter": {"externalId": "EXT-1", "externalIdSource": "other"}})) == []
    union = search(app, token, {"filter": {"externalId": "EXT-1", "externalIds": ["EXT-2", "nope"]}})
    assert ids(union) == [patient_id("jana")]
    too_many = search(app, token, {"filter": {"externalIds": [f"E{i}" for i in range(101)]}}, status=400)
    assert too_many["code"] == "VALIDATION_FAILED" and "externalIds" in too_many["error"]


@pytest.mark.parametrize("text, expected", [
    ("nováková", ["jana"]), ("Jana Nováková", ["jana"]), ("jana@example", ["jana"]), ("601 123 456", ["jana"]),
    ("+420601123456", ["jana"]), ("EXT-1", ["jana"]), ("svoboda", ["petr"]), ("EXT-2", []), ("nobody", []),
])
def test_free_text_over_name_phone_email_and_external_id(app, token, text, expected):
    assert ids(search(app, token, {"filter": {"query": text}})) == [patient_id(k) for k in expected]


def test_pagination_walks_every_patient_once(app, token):
    for i in range(5):
        search(app, token, {"externalId": f"P{i}", "firstName": f"P{i}", "lastName": "Paged"}, url=IMPORT)
    seen, cursor = [], None
    while True:
        page = search(app, token, {"filter": {"query": "Paged"}, "pagination": {"limit": 2, **({"cursor": cursor} if cursor else {})}})
        seen += ids(page)
        cursor = page["pagination"]["nextCursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 5
    assert search(app, token, {"pagination": {"cursor": "nope"}}, status=400)["code"] == "VALIDATION_FAILED"


def test_import_creates_then_updates_never_duplicates(app, token):
    item = {"externalId": "SIGN-77", "externalIdSource": "signing-system", "firstName": "Eva", "lastName": "Malá",
            "phone": "777 888 999", "email": "eva@example.org", "birthDate": "1990-01-31"}
    first = search(app, token, item, url=IMPORT)["data"]
    assert first["created"] is True
    patient = first["patient"]
    assert patient["phone"] == "+420777888999" and patient["isInClinic"] is True
    assert patient["externalIds"] == [{"source": "signing-system", "id": "SIGN-77"}]
    again = search(app, token, {**item, "lastName": "Malá-Nová", "phone": None}, url=IMPORT)["data"]
    assert again["created"] is False and again["patient"]["id"] == patient["id"]
    assert again["patient"]["lastName"] == "Malá-Nová" and again["patient"]["phone"] is None
    with db.connection_context():
        assert ExternalId.select().where(ExternalId.value == "SIGN-77").count() == 1
        assert Patient.select().where(Patient.first_name == "Eva").count() == 1
    # The imported patient is usable for create at once.
    created = app.post_json(api() + "/patientRequests/create",
                            {"patientId": patient["id"], "userECRFId": type_id("SIGNED_CONSENT")},
                            headers=bearer(token))
    assert created.json["data"]["patientId"] == patient["id"]


def test_import_of_an_id_known_in_another_clinic_makes_a_new_patient_here(app, token):
    # External ids are per clinic: EXT-2 in clinic-b says nothing about clinic-a.
    answer = search(app, token, {"externalId": "EXT-2", "externalIdSource": "signing-system",
                                 "firstName": "Petr", "lastName": "Svoboda"}, url=IMPORT)["data"]
    assert answer["created"] is True and answer["patient"]["id"] != patient_id("petr")


def test_import_validation(app, token):
    bad_phone = search(app, token, {"externalId": "X", "firstName": "A", "lastName": "B", "phone": "call me"},
                       url=IMPORT, status=400)
    assert bad_phone["code"] == "VALIDATION_FAILED" and "phone" in bad_phone["error"]
    assert "externalId" in search(app, token, {"firstName": "A", "lastName": "B"}, url=IMPORT, status=400)["error"]
    read_only = issue_token(["clinic-a"], ["read"])
    assert search(app, read_only, {"externalId": "X", "firstName": "A", "lastName": "B"}, url=IMPORT,
                  status=403)["code"] == "FORBIDDEN"


def test_bulk_import_answers_per_item(app, token):
    items = [
        {"externalId": "B1", "firstName": "One", "lastName": "Bulk"},
        {"externalId": "B2", "firstName": "Two", "lastName": "Bulk", "phone": "not a phone"},
        {"externalId": "B1", "firstName": "One", "lastName": "Bulk-Updated"},
        {"firstName": "No id"},
        {"externalId": "EXT-1", "externalIdSource": "signing-system", "firstName": "Jana", "lastName": "Nováková"},
    ]
    result = search(app, token, {"patients": items}, url=BULK)["data"]
    assert [r["status"] for r in result] == ["created", "failed", "updated", "failed", "updated"]
    assert [r["index"] for r in result] == list(range(5))
    assert result[0]["patientId"] == result[2]["patientId"]
    assert result[4]["patientId"] == patient_id("jana")
    assert result[1]["error"]["code"] == "VALIDATION_FAILED" and "phone" in result[1]["error"]["error"]
    assert "externalId" in result[3]["error"]["error"]
    with db.connection_context():
        assert PatientRecord.select().join(Patient).where(Patient.last_name.startswith("Bulk")).count() == 1
    assert search(app, token, {"patients": []}, url=BULK, status=400)["code"] == "VALIDATION_FAILED"
