"""A clinic offboarded (docs/data-protection.md, "When a clinic leaves"): `manage.py offboard`
writes one archive of everything the service holds for the clinic, then erases it: a dump of
the database and a listing of the bucket, searched, hold nothing of it (rows, ids, its staff's
e-mails, its callers' numbers and transcripts, its signed documents), and the organization's
other clinic is whole: its records, requests, staff and keys as they were, its key answering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from models import (
    ApiToken,
    Clinic,
    Outbox,
    Patient,
    PatientRecord,
    PatientRequest,
    ReadEvent,
    StaffMembership,
    StaffUser,
    WebhookEndpoint,
)
from plumbing.database import db
from staff.passwords import hash_password
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY, bearer, issue_token
from tests.support.console import PASSWORD, login
from tests.support.live_service import api, type_id
from tests.support.people import STORAGE_DIR, bucket_bytes, database_dump, finish_call, new_person, seed


def manage(*args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "STORAGE_DIR": str(STORAGE_DIR),
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def staff_member(email: str, *slugs: str) -> None:
    with db.connection_context():
        user = StaffUser.create(email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD))
        for slug in slugs:
            StaffMembership.create(user=user, clinic=Clinic.by_slug(slug), role="staff")


def clinic_b_state() -> dict[str, object]:
    with db.connection_context():
        b = Clinic.by_slug("clinic-b")
        return {
            "records": sorted(str(r.id) for r in PatientRecord.select().where(PatientRecord.clinic == b.id)),
            "requests": sorted(str(r.id) for r in PatientRequest.select().where(PatientRequest.clinic == b.id)),
            "staff": sorted(
                m.user.email for m in StaffMembership.select().join(StaffUser).where(StaffMembership.clinic == b.id)
            ),
        }


@pytest.mark.slow
def test_offboarding_a_clinic_leaves_nothing_of_it_and_the_other_clinic_whole(app, clock, wsgi_app, tmp_path):
    from tests.support import load
    from tests.support.people import lifecycle_organization

    load(lifecycle_organization())
    with db.connection_context():  # a webhook endpoint: the events below make its deliveries
        WebhookEndpoint.create(
            clinic=Clinic.by_slug("clinic-a"),
            url="https://hooks.example.com/a",
            secret_encrypted="sealed-secret",
            created_at=clock(),
        )
    token_a = issue_token(["clinic-a"], ["read", "write"])
    person = seed(app, token_a, new_person(), clock())  # records in both clinics: a shared patient
    # A caller only clinic-a knows, by a voice message.
    lonely = new_person()
    finish_call("clinic-a", lonely.national, clock(), "voice_message", transcript=lonely.transcript)
    # Clinic-b's own request for the shared patient, through its own key.
    token_b = issue_token(["clinic-b"], ["read", "write"])
    b_request = app.post_json(
        api("clinic-b") + "/patientRequests/create",
        {"patientId": person.patient_id, "userECRFId": type_id("SIGNED_CONSENT", "clinic-b")},
        headers=bearer(token_b),
    ).json["data"]["id"]
    staff_member("alena.only-a@example.cz", "clinic-a")
    staff_member("bert.both@example.cz", "clinic-a", "clinic-b")
    staff_member("cyril.only-b@example.cz", "clinic-b")
    browser = app
    login(browser, "alena.only-a@example.cz", PASSWORD, status=303)
    browser.get(f"/console/requests/{person.requests['message']}", status=200)  # a read in the trail
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        a_id = str(a.id)
        a_requests = [str(r.id) for r in PatientRequest.select().where(PatientRequest.clinic == a.id)]
        assert ReadEvent.select().where(ReadEvent.clinic_id == a.id).count() == 1
        assert Outbox.select().where((Outbox.topic == "webhook") & (Outbox.clinic_id == a.id)).count() > 0
    before_b = clinic_b_state()
    assert b_request in before_b["requests"]

    archive = tmp_path / "clinic-a.zip"
    done = manage("offboard", "--clinic", "clinic-a", "--archive", str(archive), "--yes")
    assert done.returncode == 0, done.stderr
    assert "backups" in done.stderr

    # The archive: the clinic's rows and its signed document, before anything went.
    with zipfile.ZipFile(archive) as z:
        data = json.loads(z.read("clinic-a/data.json"))
        documents = [n for n in z.namelist() if n.startswith("clinic-a/documents/")]
        assert [z.read(n) for n in documents] == [person.document_text.encode()]
    assert {c["transcript"] for c in data["call"]} >= {person.transcript, lonely.transcript}
    assert sorted(r["id"] for r in data["patient_request"]) == sorted(a_requests)
    assert not any("password_hash" in u or "secret_hash" in t for u in data["staff_user"] for t in data["api_token"])
    assert data["read_event"] and data["audit_event"]
    assert {e["type"] for e in data["change_event"]} >= {"request.created"}
    assert [e["url"] for e in data["webhook_endpoint"]] == ["https://hooks.example.com/a"]
    assert "sealed-secret" not in json.dumps(data)

    # Nothing of clinic-a is left, in the database or the bucket.
    dump, bucket = database_dump(PG_URL), bucket_bytes()
    gone = [a_id, *a_requests, person.transcript, lonely.transcript, lonely.phone, "alena.only-a@example.cz"]
    assert [trace for trace in gone if trace in dump] == []
    assert "sealed-secret" not in dump and "hooks.example.com" not in dump
    assert person.document_text.encode() not in bucket
    listing = [str(p.relative_to(STORAGE_DIR)) for p in STORAGE_DIR.rglob("*") if p.is_file()]
    assert [name for name in listing if any(r in name for r in a_requests)] == []
    with db.connection_context():
        assert Clinic.get_or_none(Clinic.slug == "clinic-a") is None
        assert ApiToken.select().count() == 1  # clinic-b's; clinic-a's key went with it
        assert Patient.get_or_none(Patient.phone == lonely.phone) is None
        assert Patient.get_or_none(Patient.id == person.patient_id) is not None  # clinic-b's patient too

    # Clinic-b is whole: its records, requests, staff and key.
    assert clinic_b_state() == before_b
    app.get(f"{api('clinic-b')}/patientRequests/{b_request}", headers=bearer(token_b), status=200)
    app.get(f"{api('clinic-a')}/patientRequests/{a_requests[0]}", headers=bearer(token_a), status=401)


@pytest.mark.slow
def test_offboarding_an_organization_leaves_nothing_of_it_and_another_organization_whole(app, clock, tmp_path):
    from tests.support import clinic, load, organization
    from tests.support.people import lifecycle_organization

    load(lifecycle_organization())
    load(organization(clinic("other-clinic"), slug="other-org"))
    token = issue_token(["clinic-a"], ["read", "write"])
    person = seed(app, token, new_person(), clock())
    other = issue_token(["other-clinic"], ["read"])
    with db.connection_context():
        org_id = str(Clinic.by_slug("clinic-a").organization_id)
    done = manage("offboard", "--organization", "test-org", "--archive", str(tmp_path / "org.zip"), "--yes")
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(tmp_path / "org.zip") as z:
        assert {"clinic-a/data.json", "clinic-b/data.json"} <= set(z.namelist())
    dump = database_dump(PG_URL)
    assert [t for t in [org_id, person.patient_id, person.transcript, *person.traces()] if t in dump] == []
    assert person.document_text.encode() not in bucket_bytes()
    with db.connection_context():
        assert [c.slug for c in Clinic.select()] == ["other-clinic"]
    app.post_json(api("other-clinic") + "/patients/search", {}, headers=bearer(other), status=200)
