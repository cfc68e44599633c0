"""A patient erased and a patient's copy (docs/data-protection.md, "Erasure of a patient" and
"A patient's copy"), checked the way a data-protection officer would: the database dumped,
the bucket and Redis read whole, and searched for the person's name, numbers, e-mail, notes
and transcript."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
import zipfile
from datetime import timedelta
from typing import Any

import peewee as pw
import pytest

from models import (
    Actor,
    AuditEvent,
    ChangeEvent,
    Clinic,
    IdempotencyKey,
    MedicalRecord,
    Patient,
    PatientRequest,
    PendingObjectDeletion,
    StaffMembership,
    StaffUser,
)
from plumbing.database import db
from plumbing.errors import NotFound
from privacy import erasure, patient_copy, retention
from staff.passwords import hash_password
from storage import LocalStorage
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY, bearer
from tests.support.live_service import api, type_id
from tests.support.people import (
    STORAGE_DIR,
    bucket_bytes,
    database_dump,
    found,
    new_person,
    redis_values,
    seed,
)

OPERATOR = Actor("operator", "dpo-test")
PASSWORD = "correct horse battery"


@pytest.fixture
def token(app) -> str:
    from tests.support import issue_token, load
    from tests.support.people import lifecycle_organization

    load(lifecycle_organization())
    return issue_token(["clinic-a"], ["read", "write"])


@pytest.fixture
def person(app, token, clock):
    return seed(app, token, new_person(), clock())


def storage() -> LocalStorage:
    return LocalStorage(STORAGE_DIR, signing_key=b"x" * 16, public_base_url="http://x")


def everything() -> tuple[str, bytes]:
    return database_dump(PG_URL), redis_values(REDIS_URL)


class FailingDeletes(LocalStorage):
    """The storage with its deletes failing (a bucket unreachable for a while)."""

    def delete(self, key: str) -> None:
        raise OSError("storage unreachable")


def erase(person, clock, **kwargs: Any) -> erasure.Erased:
    with db.connection_context():
        return erasure.erase(
            uuid.UUID(person.patient_id), OPERATOR, clock(), kwargs.pop("storage", storage()), **kwargs
        )


# --- erasure ------------------------------------------------------------------------------------


def test_an_erasure_leaves_no_trace_of_the_patient_but_the_documents_it_keeps(app, token, person, clock):
    dump, cached = everything()
    assert set(found(person.traces(), dump)) == set(person.traces()), "the seeded traces are there to be found"
    with db.connection_context():
        plan = erasure.plan(uuid.UUID(person.patient_id))
        assert len(plan.patients) == 2 and len(plan.records) == 3 and len(plan.calls) == 2
        assert {str(r.id) for r in plan.requests} == set(person.requests.values())
        answers_before = IdempotencyKey.select().count()

    erased = erase(person, clock)

    assert erased.patients == 2 and erased.records == 3 and erased.calls == 2 and erased.external_ids == 1
    assert erased.requests == 2 and erased.requests_kept == 1 and erased.documents_kept == 1
    assert erased.stored_answers == 2 and erased.objects == 1, "both stored answers named the patient; one upload"
    dump, cached = everything()
    assert found(person.traces(), dump, cached) == []
    # The upload never registered went with its request; the signed document stayed, as registered.
    assert not (STORAGE_DIR / person.upload_keys[0]).exists()
    assert (STORAGE_DIR / person.document_keys[0]).read_bytes() == person.document_text.encode()
    with db.connection_context():
        assert IdempotencyKey.select().count() == answers_before - 2
        kept = PatientRequest.get_by_id(person.requests["signed"])
        assert kept.patient_id == Patient.erased_id(kept.clinic.organization_id)
        assert (kept.title, kept.clinic_note, kept.user_note) == ("Signed consent", "", "")
        assert kept.done_at is not None and kept.call_id is None
        assert Patient.get_by_id(kept.patient_id).last_name == Patient.ERASED_NAME
        tombstones = AuditEvent.select().where(AuditEvent.action == "patient.erase")
        assert sorted(Clinic.get_by_id(e.clinic_id).slug for e in tombstones) == ["clinic-a", "clinic-b"]
        assert all(e.target_id == person.patient_id and json.loads(e.details)["requests"] == 2 for e in tombstones)
    # The API: the patient and their requests are gone; the kept request still serves its documents.
    headers = bearer(token)
    search = app.post_json(api() + "/patients/search", {"filter": {"query": person.last}}, headers=headers).json
    assert search["data"] == []
    app.get(f"{api()}/patientRequests/{person.requests['message']}", headers=headers, status=404)
    app.get(f"{api()}/patientRequests/{person.requests['booked']}", headers=headers, status=404)
    detail = app.get(f"{api()}/patientRequests/{person.requests['signed']}", headers=headers).json["data"]
    assert [d["description"] for d in detail["medicalRecords"]] == ["souhlas.pdf"]
    assert person.last not in json.dumps(detail)
    created = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": person.patient_id, "userECRFId": type_id("SIGNED_CONSENT")},
        headers=headers,
        status=404,
    ).json
    assert created["code"] == "PATIENT_NOT_FOUND"
    everyone = app.post_json(api() + "/patients/search", {"filter": {}}, headers=headers).json["data"]
    assert Patient.ERASED_NAME not in json.dumps(everyone), "the documents' holder is nobody's patient"


def test_an_erasure_run_again_finds_nothing_and_changes_nothing(app, token, person, clock):
    erase(person, clock)
    with db.connection_context():
        # The first erasure's events take their places in the log now, not whenever a worker's
        # relay next places them (it may, between the two dumps): the second erasure is to
        # change nothing, and places given meanwhile are not its doing.
        ChangeEvent.place()
    before = database_dump(PG_URL)
    with pytest.raises(NotFound):
        erase(person, clock)
    assert database_dump(PG_URL) == before


def test_an_erasure_that_includes_the_documents_leaves_no_file_of_them(app, token, person, clock):
    erased = erase(person, clock, include_documents=True)
    assert erased.documents == 1 and erased.requests_kept == 0 and erased.requests == 3
    dump, cached = everything()
    assert found(person.traces(), dump, cached) == []
    assert person.document_text.encode() not in bucket_bytes()
    with db.connection_context():
        assert PatientRequest.select().where(PatientRequest.id == person.requests["signed"]).count() == 0
        assert MedicalRecord.select().count() == 0
        assert PendingObjectDeletion.select().count() == 0


def test_an_erasure_that_fails_halfway_leaves_everything_and_a_rerun_finishes_it(app, token, person, clock):
    """The database refuses the erasure's last deletion (a trigger): every earlier step is
    rolled back with it, nothing is half erased; run again, it erases."""
    with db.connection_context():
        db.execute_sql(
            "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'disk full'; END $$"
        )
        db.execute_sql(
            'CREATE TRIGGER refuse_delete BEFORE DELETE ON "patient" '
            "FOR EACH STATEMENT EXECUTE FUNCTION refuse_delete()"
        )
    try:
        with db.connection_context():
            ChangeEvent.place()  # the setup's events placed now, not by a relay between the dumps
        before = database_dump(PG_URL)
        with pytest.raises(pw.InternalError, match="disk full"):
            erase(person, clock, include_documents=True)
        assert database_dump(PG_URL) == before
        assert (STORAGE_DIR / person.document_keys[0]).exists() and (STORAGE_DIR / person.upload_keys[0]).exists()
    finally:
        with db.connection_context():
            db.execute_sql('DROP TRIGGER refuse_delete ON "patient"')
            db.execute_sql("DROP FUNCTION refuse_delete()")
    erase(person, clock, include_documents=True)
    assert found(person.traces(), database_dump(PG_URL)) == []
    assert not (STORAGE_DIR / person.document_keys[0]).exists()


def test_files_an_erasure_could_not_delete_are_deleted_by_the_next_retention_round(app, token, person, clock):
    failing = FailingDeletes(STORAGE_DIR, signing_key=b"x" * 16, public_base_url="http://x")
    erased = erase(person, clock, include_documents=True, storage=failing)
    assert erased.objects == 0 and erased.patients == 2, "the erasure is done; its files wait"
    with db.connection_context():
        listed = {row.key for row in PendingObjectDeletion.select()}
    assert set(person.document_keys + person.upload_keys) <= listed
    assert (STORAGE_DIR / person.document_keys[0]).exists()
    lifetimes = retention.Lifetimes(*(timedelta(days=1),) * 4)
    with db.connection_context():
        retention.run(storage(), clock(), lifetimes)
        assert PendingObjectDeletion.select().count() == 0
    assert not (STORAGE_DIR / person.document_keys[0]).exists()
    assert not (STORAGE_DIR / person.upload_keys[0]).exists()


def test_a_merged_row_named_for_erasure_erases_the_whole_person(app, token, person, clock):
    from onboarding.writer import stable_id

    duplicate = uuid.UUID(str(stable_id("patient", "test-org", "kat-dup")))
    with db.connection_context():
        erased = erasure.erase(duplicate, OPERATOR, clock(), storage())
    assert erased.patients == 2
    assert found(person.traces(), database_dump(PG_URL)) == []


def test_manage_py_patient_erase_says_what_goes_asks_and_erases(app, token, person):
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "STORAGE_DIR": str(STORAGE_DIR),
    }
    run = [sys.executable, "manage.py", "patient", "erase", person.patient_id]
    declined = subprocess.run(run, cwd=ROOT, env=env, input="no\n", capture_output=True, text=True, timeout=60)
    assert declined.returncode == 1 and "3 request(s)" not in declined.stderr
    assert "2 request(s), 2 call(s)" in declined.stderr and "kept for their 1 signed document(s)" in declined.stderr
    assert "not erased" in declined.stderr
    assert person.last in database_dump(PG_URL)
    done = subprocess.run(run, cwd=ROOT, env=env, input="erase\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "erased: patients 2" in done.stderr
    assert found(person.traces(), database_dump(PG_URL)) == []
    again = subprocess.run([*run, "--yes"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to erase" in again.stderr
    for output in (declined, done, again):
        assert found(person.traces(), output.stderr, output.stdout) == [], "the terminal gets ids and counts only"


# --- a patient's copy -----------------------------------------------------------------------------


def _path_values(document: Any, path: str) -> list[Any]:
    """The values at a FIELDS path such as `requests[].documents[].sha256`."""
    values = [document]
    for part in path.split("."):
        name, many = part.removesuffix("[]"), part.endswith("[]")
        values = [v[name] for v in values if isinstance(v, dict) and name in v]
        if many:
            values = [item for v in values for item in (v or [])]
    return values


def test_a_patients_copy_holds_every_field_of_the_inventory(app, token, person, clock):
    archive = io.BytesIO()
    with db.connection_context():
        made = patient_copy.write_copy(uuid.UUID(person.patient_id), archive, storage(), OPERATOR, clock())
    assert (made.requests, made.calls, made.documents, made.transcripts) == (3, 2, 1, 1)
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
        data = json.loads(z.read("patient-data.json"))
        readme = z.read("README.txt").decode()
        transcripts = [n for n in names if n.startswith("transcripts/")]
        documents = [n for n in names if n.startswith("documents/")]
        assert [z.read(n).decode().strip() for n in transcripts] == [person.transcript]
        assert [z.read(n) for n in documents] == [person.document_text.encode()]
    missing = [
        path
        for path in patient_copy.FIELDS.values()
        if not any(v not in (None, "", [], {}) for v in _path_values(data, path))
    ]
    assert missing == [], "every field the inventory lists, each holding the seeded value"
    assert "platforma" in readme and "platform" in readme
    assert {p["lastName"] for p in data["patients"]} == {person.last, person.last + "-dup"}
    assert {r["note"] for r in data["records"]} == {person.note, ""}
    message = next(c for c in data["calls"] if c["transcript"])
    assert message["transcript"] == person.transcript and message["from"] == person.national
    assert message["recording"]["heldBy"].startswith("the switchboard platform at platform.example")
    # Times in the clinic's zone (Prague in November: one hour ahead of UTC).
    assert message["receivedAt"].endswith("+01:00")
    with db.connection_context():
        copies = list(AuditEvent.select().where(AuditEvent.action == "patient.copy"))
        assert len(copies) == 2 and all(json.loads(e.details)["documents"] == 1 for e in copies)
        assert all(person.last not in e.details for e in copies)


def test_manage_py_patient_copy_writes_the_archive(app, token, person, tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "STORAGE_DIR": str(STORAGE_DIR),
    }
    out = tmp_path / "copy.zip"
    done = subprocess.run(
        [sys.executable, "manage.py", "patient", "copy", person.patient_id, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "3 request(s), 2 call(s), 1 transcript(s), 1 signed document(s)" in done.stderr
    with zipfile.ZipFile(out) as z:
        assert json.loads(z.read("patient-data.json"))["patients"][0]["email"] == person.email
    missing = subprocess.run(
        [sys.executable, "manage.py", "patient", "copy", str(uuid.uuid4()), "--out", str(tmp_path / "none.zip")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and not (tmp_path / "none.zip").exists()


# --- the console -------------------------------------------------------------------------------------


@pytest.fixture
def admin(app, token):
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        for email, role in (("anna@example.cz", "admin"), ("bob@example.cz", "staff")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=a, role=role)


def log_in(app, email: str) -> str:
    app.reset()
    form = app.get("/console/login").forms[0]
    form["email"], form["password"] = email, PASSWORD
    form.submit(status=303)
    return app.get("/console/").html.find("input", {"name": "csrf_token"})["value"]


def erase_form(page):
    return next(form for form in page.forms.values() if (form.action or "").endswith("/erase"))


def test_an_admin_copies_and_erases_a_patient_from_the_console(app, token, person, admin):
    csrf = log_in(app, "anna@example.cz")
    request_page = app.get(f"/console/requests/{person.requests['message']}")
    link = request_page.html.find("a", string=lambda s: s and "kopie" in s.lower())
    assert link is not None and person.patient_id in link["href"]
    page = app.get(link["href"])
    assert person.last in page.text and "Vymazat pacienta" in page.text
    rows = page.html.select("table.documents tbody tr")
    assert len(rows) == 3, "the confirmation lists every request that goes"
    copy = app.post(f"/console/patients/{person.patient_id}/copy", {"csrf_token": csrf, "clinic": "clinic-a"})
    assert copy.content_type == "application/zip" and "attachment" in copy.headers["Content-Disposition"]
    with zipfile.ZipFile(io.BytesIO(copy.body)) as z:
        assert json.loads(z.read("patient-data.json"))["patients"][0]["phone"] == person.phone
    form = erase_form(page)
    unconfirmed = form.submit(status=303)
    assert unconfirmed.location.endswith("#erase")
    assert person.last in database_dump(PG_URL), "nothing erased without the confirmation"
    form = erase_form(app.get(link["href"]))
    form["confirm"] = "1"
    done = form.submit(status=303).follow()
    assert "Pacient byl vymazán" in done.text
    # Art. 19: the confirmation reminds whom else to tell.
    reminder = done.html.select_one("#tell-others").text
    assert "platformě telefonní ústředny" in reminder and "podepisovacímu systému" in reminder
    assert found(person.traces(), database_dump(PG_URL)) == []
    with db.connection_context():
        assert (
            AuditEvent.select()
            .where((AuditEvent.action == "patient.erase") & (AuditEvent.actor_name == "anna@example.cz"))
            .count()
            == 2
        )
    app.get(link["href"], status=404)  # the counts are said once


def test_the_patient_page_is_for_the_clinics_admins_only(app, token, person, admin):
    log_in(app, "bob@example.cz")
    app.get(f"/console/patients/{person.patient_id}?clinic=clinic-a", status=403)
    request_page = app.get(f"/console/requests/{person.requests['message']}")
    assert f"/console/patients/{person.patient_id}" not in request_page.text
    csrf = log_in(app, "anna@example.cz")
    app.get(f"/console/patients/{uuid.uuid4()}?clinic=clinic-a", status=404)
    app.get("/console/patients/not-a-uuid?clinic=clinic-a", status=404)
    app.post(f"/console/patients/{person.patient_id}/erase", {"clinic": "clinic-a", "confirm": "1"}, status=403)
    assert person.last in database_dump(PG_URL), "no CSRF token: refused"
    app.post(f"/console/patients/{person.patient_id}/copy", {"csrf_token": csrf, "clinic": "clinic-b"}, status=403)
