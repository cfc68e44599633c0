"""Patient search (organization scope, external ids, free text, paging) and import."""

from __future__ import annotations

import threading

import pytest

from models import Actor, Clinic, ExternalId, Patient, PatientRecord
from patients import directory as patients
from plumbing import clock
from plumbing import json_schema as validation
from plumbing.database import db
from plumbing.errors import DomainError
from tests.support import bearer, issue_token, load
from tests.support.live_service import api, patient_id, signing_organization, type_id
from web import schemas

SEARCH = api() + "/patients/search"
IMPORT = api() + "/patients/import"
BULK = api() + "/patients/import-bulk"
TESTER = Actor("operator", "test")  # who the imports called directly are attributed to


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
    assert jana.pop("updatedAt").endswith("Z"), "its last change (an onboarding's time, the database's)"
    assert jana == {
        "id": patient_id("jana"),
        "firstName": "Jana",
        "lastName": "Nováková",
        "phone": "+420601123456",
        "email": "jana@example.org",
        "birthDate": "1980-04-12",
        "tags": [],
        "note": "Prefers mornings.",
        "externalIds": [{"source": "signing-system", "id": "EXT-1"}],
        "status": "ACTIVE",
        "isInClinic": True,
    }
    petr = next(p for p in everyone["data"] if p["id"] == patient_id("petr"))
    assert (petr["status"], petr["note"], petr["tags"], petr["externalIds"], petr["isInClinic"]) == (
        "WAITING",
        "",
        [],
        [],
        False,
    )
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


@pytest.mark.parametrize(
    "text, expected",
    [
        ("nováková", ["jana"]),
        ("Jana Nováková", ["jana"]),
        ("jana@example", ["jana"]),
        ("601 123 456", ["jana"]),
        ("+420601123456", ["jana"]),
        ("EXT-1", ["jana"]),
        ("svoboda", ["petr"]),
        ("EXT-2", []),
        ("nobody", []),
    ],
)
def test_free_text_over_name_phone_email_and_external_id(app, token, text, expected):
    assert ids(search(app, token, {"filter": {"query": text}})) == [patient_id(k) for k in expected]


def test_pagination_walks_every_patient_once(app, token):
    for i in range(5):
        search(app, token, {"externalId": f"P{i}", "firstName": f"P{i}", "lastName": "Paged"}, url=IMPORT)
    seen, cursor = [], None
    while True:
        page = search(
            app,
            token,
            {"filter": {"query": "Paged"}, "pagination": {"limit": 2, **({"cursor": cursor} if cursor else {})}},
        )
        seen += ids(page)
        cursor = page["pagination"]["nextCursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 5
    assert search(app, token, {"pagination": {"cursor": "nope"}}, status=400)["code"] == "VALIDATION_FAILED"


def test_import_creates_then_updates_never_duplicates(app, token):
    item = {
        "externalId": "SIGN-77",
        "externalIdSource": "signing-system",
        "firstName": "Eva",
        "lastName": "Malá",
        "phone": "777 888 999",
        "email": "eva@example.org",
        "birthDate": "1990-01-31",
    }
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
    created = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": patient["id"], "userECRFId": type_id("SIGNED_CONSENT")},
        headers=bearer(token),
    )
    assert created.json["data"]["patientId"] == patient["id"]


def test_import_of_an_id_known_in_another_clinic_makes_a_new_patient_here(app, token):
    # External ids are per clinic: EXT-2 in clinic-b says nothing about clinic-a.
    answer = search(
        app,
        token,
        {"externalId": "EXT-2", "externalIdSource": "signing-system", "firstName": "Petr", "lastName": "Svoboda"},
        url=IMPORT,
    )["data"]
    assert answer["created"] is True and answer["patient"]["id"] != patient_id("petr")


def test_import_validation(app, token):
    bad_phone = search(
        app, token, {"externalId": "X", "firstName": "A", "lastName": "B", "phone": "call me"}, url=IMPORT, status=400
    )
    assert bad_phone["code"] == "VALIDATION_FAILED" and "phone" in bad_phone["error"]
    assert "externalId" in search(app, token, {"firstName": "A", "lastName": "B"}, url=IMPORT, status=400)["error"]
    read_only = issue_token(["clinic-a"], ["read"])
    assert (
        search(app, read_only, {"externalId": "X", "firstName": "A", "lastName": "B"}, url=IMPORT, status=403)["code"]
        == "FORBIDDEN"
    )


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


# --- the bulk import is batched, with the answers of importing one by one ----------


def _mixed_items(count: int) -> list[dict]:
    """New ids, ids imported before, ids given twice in the batch, invalid items, and
    optional fields present, null or absent."""
    items = []
    for i in range(count):
        item = {"externalId": f"M{i % (count * 3 // 4)}", "firstName": f"First{i}", "lastName": f"Last{i}"}
        if i % 3 == 0:
            item["phone"] = f"+420 601 {i:03d} {i % 1000:03d}"
        if i % 5 == 0:
            item["phone"] = None
        if i % 4 == 1:
            item["email"] = f"p{i}@example.org"
        if i % 7 == 2:
            item["birthDate"] = f"19{50 + i % 50}-0{1 + i % 9}-1{i % 10}"
        if i % 11 == 3:
            item["externalIdSource"] = "other-system"
        if i % 13 == 4:
            item["phone"] = "not a phone"
        if i % 17 == 5:
            del item["firstName"]
        items.append(item)
    return items


def _state(slug: str) -> dict:
    """Each of the test's external ids in the clinic -> its patient's fields, and the
    clinic's record count."""
    with db.connection_context():
        rows = (
            ExternalId.select(ExternalId, Patient)
            .join(Patient)
            .where(ExternalId.clinic == Clinic.get(Clinic.slug == slug))
        )
        patients = {
            (r.source, r.value): (
                r.patient.first_name,
                r.patient.last_name,
                r.patient.phone,
                r.patient.email,
                r.patient.birth_date,
            )
            for r in rows
            if r.value.startswith("M")
        }
        records = PatientRecord.select().join(Clinic).where(Clinic.slug == slug).count()
    return {"patients": patients, "records": records}


def _one_by_one(slug: str, items: list[dict]) -> list[str]:
    """The import as it was: each item validated and imported alone."""
    statuses = []
    with db.connection_context():
        home = Clinic.get(Clinic.slug == slug)
        for item in items:
            try:
                validation.check(item, schemas.PATIENT_IMPORT)
                statuses.append("created" if patients.import_patient(home, item, TESTER, clock.now())[1] else "updated")
            except DomainError:
                statuses.append("failed")
    return statuses


def test_bulk_import_of_a_thousand_answers_as_importing_them_one_by_one(app, token):
    earlier = _mixed_items(1000)[:200:3]  # some ids exist before the bulk import, in both clinics
    _one_by_one("clinic-a", earlier)
    _one_by_one("clinic-b", earlier)
    before = {slug: _state(slug)["records"] for slug in ("clinic-a", "clinic-b")}
    items = _mixed_items(1000)
    answer = search(app, token, {"patients": items}, url=BULK)["data"]
    expected = _one_by_one("clinic-b", items)
    assert [r["status"] for r in answer] == expected
    assert {"created", "updated", "failed"} <= set(expected)
    bulk, single = _state("clinic-a"), _state("clinic-b")
    assert bulk["patients"] == single["patients"]
    assert bulk["records"] - before["clinic-a"] == single["records"] - before["clinic-b"]
    by_key: dict = {}
    for item, result in zip(items, answer):  # one patient per external id, the same for every item naming it
        if result["status"] != "failed":
            key = (item.get("externalIdSource", ""), item["externalId"])
            assert by_key.setdefault(key, result["patientId"]) == result["patientId"]


def test_bulk_import_statements_do_not_grow_with_the_items(app, token, monkeypatch):
    database = db.obj
    statements: list[str] = []
    real = type(database).execute_sql
    monkeypatch.setattr(
        database,
        "execute_sql",
        lambda sql, params=None, *a, **k: statements.append(sql) or real(database, sql, params, *a, **k),
    )
    counts = []
    for size, prefix in ((20, "S"), (400, "L")):
        statements.clear()
        items = [
            {"externalId": f"{prefix}{i}", "firstName": "F", "lastName": "L", "phone": "601 123 456"}
            for i in range(size)
        ]
        items += [dict(item, lastName="again") for item in items[: size // 2]]  # updates too
        with db.connection_context():
            outcome = patients.import_patients(
                Clinic.get(Clinic.slug == "clinic-a"), items, TESTER, schemas.PATIENT_IMPORT, clock.now()
            )
        assert [status for _, status, _ in outcome] == ["created"] * size + ["updated"] * (size // 2)
        counts.append(len(statements))
    assert counts[1] == counts[0], counts


def test_two_overlapping_bulk_imports_at_once_give_one_patient_per_id(app, token):
    shared = [{"externalId": f"C{i}", "firstName": "Shared", "lastName": str(i)} for i in range(300)]
    batches = [
        shared + [{"externalId": f"{who}{i}", "firstName": who, "lastName": str(i)} for i in range(200)]
        for who in ("X", "Y")
    ]
    outcomes: dict = {}

    def run(who: str, items: list[dict]) -> None:
        with db.connection_context():
            outcomes[who] = patients.import_patients(
                Clinic.get(Clinic.slug == "clinic-a"), items, TESTER, schemas.PATIENT_IMPORT, clock.now()
            )

    threads = [threading.Thread(target=run, args=(who, items)) for who, items in zip("XY", batches)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert set(outcomes) == {"X", "Y"}
    for i in range(300):  # both name the same patient; exactly one of them created it
        (x_id, x_status, _), (y_id, y_status, _) = outcomes["X"][i], outcomes["Y"][i]
        assert x_id == y_id and sorted([x_status, y_status]) == ["created", "updated"], (i, x_status, y_status)
    with db.connection_context():
        links = (
            ExternalId.select().join(Clinic).where(Clinic.slug == "clinic-a", ExternalId.value.regexp("^[CXY][0-9]+$"))
        )
        assert links.count() == 700
        made = Patient.select().where(Patient.first_name.in_(["Shared", "X", "Y"]))
        assert made.count() == 700, "no patient left behind by the import that lost an id"
