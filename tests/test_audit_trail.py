"""Attribution: every API write leaves exactly one event in the append-only
audit trail (models.AuditEvent) naming its token, service account, clinic, action and
target, written in the write's own transaction; `manage.py audit` prints the trail."""

from __future__ import annotations

import io
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import peewee as pw
import pytest

from models import (
    Actor,
    ApiToken,
    AppendOnly,
    AuditEvent,
    Call,
    Clinic,
    MedicalRecord,
    Patient,
    PatientRequest,
    PatientRequestTag,
    UploadLink,
)
from onboarding.writer import stable_id
from plumbing import clock
from plumbing.database import db
from storage import LocalStorage
from switchboard.intake import GroupCommit
from tests.support import bearer, issue_token, load, switchboard_url
from tests.support.bodies import PNG, call_body
from tests.support.live_service import api, patient_id, signing_organization, tag_id, type_id
from tests.support.processes import run_manage as manage

CLINIC_A = stable_id("clinic", "clinic-a")


@pytest.fixture
def token(app) -> str:
    load(signing_organization())
    return issue_token(["clinic-a"], ["read", "write"])


def token_id(text: str) -> uuid.UUID:
    return uuid.UUID(hex=text.split("_")[1])


def events() -> list[AuditEvent]:
    with db.connection_context():
        return list(AuditEvent.select().order_by(AuditEvent.id))


def the_event(token: str, action: str, target_type: str | None, target_id: Any) -> AuditEvent:
    """The trail holds exactly one event, and it is this write's."""
    trail = events()
    assert len(trail) == 1, [(e.action, e.target_id) for e in trail]
    event = trail[0]
    assert (event.actor_kind, event.token_id, event.actor_name) == ("token", token_id(token), "test-service")
    assert (event.clinic_id, event.action) == (CLINIC_A, action)
    assert (event.target_type, event.target_id) == (target_type, str(target_id) if target_id else None)
    assert event.request_id and event.at is not None
    return event


def create(app, token: str, **body: Any) -> str:
    body = {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT"), **body}
    return app.post_json(api() + "/patientRequests/create", body, headers=bearer(token)).json["data"]["id"]


def forget_events() -> None:
    """Start a case's count from zero, the way the tests reset tables (the trail refuses DELETE)."""
    with db.connection_context():
        db.execute_sql('TRUNCATE "audit_event"')


# --- one event per write, through the real app ------------------------------------------------------


def test_create_records_who_where_what_and_the_request_id(app, token):
    response = app.post_json(
        api() + "/patientRequests/create",
        headers={**bearer(token), "X-Request-Id": "rid-audit-1"},
        params={"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT"), "userNote": "a private note"},
    )
    rid = response.json["data"]["id"]
    event = the_event(token, "patient_request.create", "patient_request", rid)
    assert event.request_id == "rid-audit-1"
    assert json.loads(event.details) == {"patientId": patient_id("jana"), "requestTypeId": type_id("SIGNED_CONSENT")}
    assert "a private note" not in event.details


def test_patch_records_the_names_of_the_fields_it_set_never_their_values(app, token):
    rid = create(app, token)
    forget_events()
    app.patch_json(
        f"{api()}/patientRequests/{rid}",
        {"addTagIds": [tag_id("patient_request", "needs-callback")], "userNote": "call back after 5"},
        headers=bearer(token),
    )
    event = the_event(token, "patient_request.patch", "patient_request", rid)
    assert json.loads(event.details) == {"fields": ["addTagIds", "userNote"]}
    assert "call back" not in event.details


def test_upload_link_and_registration_record_one_event_each_and_a_repeat_none(app, token):
    rid = create(app, token)
    forget_events()
    link = app.post_json(
        f"{api()}/patientRequests/{rid}/attachments/upload-link", {"contentType": "image/png"}, headers=bearer(token)
    ).json["data"]
    event = the_event(token, "attachment.upload_link", "patient_request", rid)
    assert json.loads(event.details) == {"fileHash": link["fileHash"], "contentType": "image/png"}
    assert "signature" not in event.details  # the key, never the presigned URL

    forget_events()
    storage = LocalStorage("var/storage", signing_key=b"x" * 16, public_base_url="http://x")  # the app's STORAGE_DIR
    storage.write_stream(link["fileHash"], io.BytesIO(PNG), len(PNG), "image/png")
    body = {"contentType": "image/png", "fileHash": link["fileHash"], "description": "Jana Novakova consent.png"}
    url = f"{api()}/patientRequests/{rid}/attachments"
    record = app.post_json(url, body, headers=bearer(token)).json["data"]
    try:
        event = the_event(token, "attachment.register", "medical_record", record["id"])
        assert json.loads(event.details) == {
            "patientRequestId": rid,
            "contentType": "image/png",
            "sha256": record["sha256"],
        }
        assert "Novakova" not in event.details  # a file name may name the patient
        assert app.post_json(url, body, headers=bearer(token)).json["data"] == record  # answers the first one
        assert len(events()) == 1, "registering the same upload again writes nothing, so records nothing"
    finally:
        with db.connection_context():
            storage.delete(MedicalRecord.get_by_id(record["id"]).object_key)


def test_patient_import_records_created_then_updated(app, token):
    item = {
        "externalId": "EXT-AUDIT",
        "externalIdSource": "signing-system",
        "firstName": "Eva",
        "lastName": "Dvořáková",
        "phone": "+420 603 111 222",
    }
    first = app.post_json(api() + "/patients/import", item, headers=bearer(token)).json["data"]
    event = the_event(token, "patient.import", "patient", first["patient"]["id"])
    assert json.loads(event.details) == {"created": True}
    assert "Dvo" not in event.details and "603" not in event.details
    forget_events()
    app.post_json(api() + "/patients/import", dict(item, lastName="Nová"), headers=bearer(token))
    assert json.loads(the_event(token, "patient.import", "patient", first["patient"]["id"]).details) == {
        "created": False
    }


def test_bulk_import_records_one_event_with_its_counts(app, token):
    items = [{"externalId": f"B{i}", "firstName": "F", "lastName": str(i)} for i in range(3)]
    items += [{"externalId": "B0", "firstName": "F", "lastName": "again"}, {"externalId": "bad", "firstName": "F"}]
    answer = app.post_json(api() + "/patients/import-bulk", {"patients": items}, headers=bearer(token)).json["data"]
    assert [r["status"] for r in answer] == ["created"] * 3 + ["updated", "failed"]
    event = the_event(token, "patient.import_bulk", None, None)
    assert json.loads(event.details) == {"created": 3, "updated": 1, "failed": 1}


def test_recording_complete_records_the_call_once_per_call_sid(app, token):
    sid = f"CA-audit-{uuid.uuid4().hex[:8]}"
    url = switchboard_url("clinic-a", "recording-complete")
    app.post_json(url, call_body(sid), headers={**bearer(token), "X-Request-Id": "rid-call-1"})
    with db.connection_context():
        call = Call.get(Call.call_sid == sid)
    assert the_event(token, "call.receive", "call", call.id).request_id == "rid-call-1"
    app.post_json(url, call_body(sid), headers=bearer(token))  # a retry: the call is stored already
    assert len(events()) == 1


def test_group_commit_records_each_stored_call_and_none_for_a_refused_row(token):
    """One INSERT for the batch writes the events too; a row the database refuses (its
    clinic deleted meanwhile) fails alone and leaves no event; a repeat leaves none."""
    with db.connection_context():
        home, writer = Clinic.get_by_id(CLINIC_A), ApiToken.get_by_id(token_id(token))
    gone = Clinic(id=uuid.uuid4(), slug="deleted-meanwhile")
    fields = [{"call_sid": f"CA-batch-{i}", "call_from": "+420601123456", "call_to": "+420222333444"} for i in range(3)]
    commit = GroupCommit()
    try:
        stored = [commit.receive(home, f, writer, clock.now()) for f in fields]
        with pytest.raises(pw.IntegrityError):
            commit.receive(gone, {**fields[0], "call_sid": "CA-batch-gone"}, writer, clock.now())
        assert commit.receive(home, fields[0], writer, clock.now())[1] is False
    finally:
        if not db.is_closed():
            db.close()
    trail = events()
    assert sorted(e.target_id for e in trail) == sorted(str(call.id) for call, _ in stored)
    assert {(e.action, e.token_id, e.actor_name, e.clinic_id) for e in trail} == {
        ("call.receive", writer.id, "test-service", CLINIC_A)
    }


def test_the_event_keeps_the_service_account_name_it_wrote_under(app, token):
    rid = create(app, token)
    with db.connection_context():
        ApiToken.update(name="renamed-later").where(ApiToken.id == token_id(token)).execute()
    assert the_event(token, "patient_request.create", "patient_request", rid).actor_name == "test-service"


# --- nothing recorded for what was not written ------------------------------------------------------


def test_refused_writes_record_nothing(app, token):
    h = bearer(token)
    rid = create(app, token)
    forget_events()
    app.post_json(api() + "/patientRequests/create", {"patientId": "not-a-uuid"}, headers=h, status=400)
    app.post_json(
        api() + "/patientRequests/create",
        {"patientId": patient_id("petr"), "userECRFId": type_id("SIGNED_CONSENT")},
        headers=h,
        status=403,
    )
    app.patch_json(
        f"{api()}/patientRequests/{rid}", {"addTagIds": [tag_id("patient", "signed-consent")]}, headers=h, status=400
    )
    app.post_json(f"{api()}/patientRequests/{rid}/attachments/upload-link", {}, headers=h, status=400)
    app.post_json(
        f"{api()}/patientRequests/{rid}/attachments",
        {"contentType": "application/pdf", "fileHash": "not-issued", "description": "x.pdf"},
        headers=h,
        status=400,
    )
    app.post_json(
        api() + "/patients/import",
        {"externalId": "X", "firstName": "F", "lastName": "L", "phone": "not a phone"},
        headers=h,
        status=400,
    )
    answer = app.post_json(api() + "/patients/import-bulk", {"patients": [{"externalId": "X"}]}, headers=h).json
    assert [r["status"] for r in answer["data"]] == ["failed"]  # nothing written, nothing recorded
    app.post_json(
        switchboard_url("clinic-a", "recording-complete"), {"CallFrom": "+420601123456"}, headers=h, status=400
    )
    read_only = issue_token(["clinic-a"], ["read"])
    app.patch_json(f"{api()}/patientRequests/{rid}", {"userNote": "x"}, headers=bearer(read_only), status=403)
    assert events() == []


WRITES = ["create", "patch", "upload_link", "register", "import", "import_bulk"]


@pytest.mark.parametrize("write", WRITES)
def test_a_write_whose_transaction_rolls_back_leaves_no_event(app, token, monkeypatch, write):
    """The event is recorded, then the write's transaction fails: both are gone together."""
    h = bearer(token)
    rid = create(app, token)
    link = app.post_json(
        f"{api()}/patientRequests/{rid}/attachments/upload-link", {"contentType": "image/png"}, headers=h
    ).json["data"]
    storage = LocalStorage("var/storage", signing_key=b"x" * 16, public_base_url="http://x")
    storage.write_stream(link["fileHash"], io.BytesIO(PNG), len(PNG), "image/png")
    forget_events()
    with db.connection_context():
        before = {
            m.__name__: m.select().count()
            for m in (PatientRequest, PatientRequestTag, UploadLink, MedicalRecord, Patient)
        }
    real = AuditEvent.record.__func__

    def record_then_fail(cls, *args: Any, **kwargs: Any) -> None:
        real(cls, *args, **kwargs)
        assert AuditEvent.select().count() == 1  # written, inside the transaction
        raise pw.OperationalError("connection lost after the event was written")

    monkeypatch.setattr(AuditEvent, "record", classmethod(record_then_fail))
    patient = {"externalId": "RB-1", "firstName": "F", "lastName": "L"}
    send = {
        "create": lambda: app.post_json(
            api() + "/patientRequests/create",
            {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT")},
            headers=h,
            status=503,
        ),
        "patch": lambda: app.patch_json(
            f"{api()}/patientRequests/{rid}",
            {"addTagIds": [tag_id("patient_request", "needs-callback")], "userNote": "x"},
            headers=h,
            status=503,
        ),
        "upload_link": lambda: app.post_json(
            f"{api()}/patientRequests/{rid}/attachments/upload-link",
            {"contentType": "image/png"},
            headers=h,
            status=503,
        ),
        "register": lambda: app.post_json(
            f"{api()}/patientRequests/{rid}/attachments",
            {"contentType": "image/png", "fileHash": link["fileHash"], "description": "x.png"},
            headers=h,
            status=503,
        ),
        "import": lambda: app.post_json(api() + "/patients/import", patient, headers=h, status=503),
        "import_bulk": lambda: app.post_json(
            api() + "/patients/import-bulk", {"patients": [patient]}, headers=h, status=503
        ),
    }
    try:
        send[write]()
    finally:
        storage.delete(link["fileHash"])
        shutil.rmtree(Path("var/storage/registered") / rid, ignore_errors=True)  # the sealed copy, if made
    with db.connection_context():
        after = {
            m.__name__: m.select().count()
            for m in (PatientRequest, PatientRequestTag, UploadLink, MedicalRecord, Patient)
        }
        assert PatientRequest.get_by_id(rid).user_note == ""
    assert after == before, "the write rolled back"
    assert events() == [], "and its event with it"


# --- append-only ------------------------------------------------------------------------------------


def test_postgresql_refuses_update_and_delete_of_the_trail(app, token):
    create(app, token)
    for statement in (
        'UPDATE "audit_event" SET "actor_name" = \'someone else\'',
        'DELETE FROM "audit_event"',
        'DELETE FROM "audit_event" WHERE false',
    ):
        with db.connection_context(), pytest.raises(pw.ProgrammingError, match="append-only"), db.atomic():
            db.execute_sql(statement)
    assert [e.actor_name for e in events()] == ["test-service"]


def test_the_model_has_no_way_to_change_or_delete_an_event(app, token):
    create(app, token)
    event = events()[0]
    with db.connection_context():
        for attempt in (
            lambda: AuditEvent.update(actor_name="x"),
            AuditEvent.delete,
            event.delete_instance,
            event.save,
        ):
            with pytest.raises(AppendOnly):
                attempt()
        with pytest.raises(pw.IntegrityError), db.atomic():  # a token that wrote is revoked, never deleted
            ApiToken.delete().where(ApiToken.id == token_id(token)).execute()
    assert len(events()) == 1


def test_record_outside_a_transaction_is_refused(app, token):
    with db.connection_context(), pytest.raises(RuntimeError, match="transaction"):
        AuditEvent.record(Actor("operator", "x"), None, "noop", at=clock.now())


# --- the operator CLI -------------------------------------------------------------------------------


def test_audit_cli_prints_the_trail_newest_first_filtered_and_without_secrets(app, token):
    rid = create(app, token)
    app.patch_json(f"{api()}/patientRequests/{rid}", {"userNote": "secret note"}, headers=bearer(token))
    other = issue_token(["clinic-b"], ["read", "write"])
    app.post_json(
        api("clinic-b") + "/patients/import",
        {"externalId": "B-1", "firstName": "F", "lastName": "L"},
        headers=bearer(other),
    )
    done = manage("audit", "--clinic", "clinic-a")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split("  ")[3] for line in lines] == ["patient_request.patch", "patient_request.create"]
    assert all(line.split("  ")[1] == "clinic-a" for line in lines)
    assert f"token:test-service ({token_id(token)})" in lines[0] and f"patient_request:{rid}" in lines[0]
    assert token.split("_", 2)[2] not in done.stdout and "secret note" not in done.stdout
    newest = manage("audit", "--limit", "1")
    assert len(newest.stdout.splitlines()) == 1
    assert "patient.import" in newest.stdout  # newest of all clinics
    # Events left out are said (on stderr, so a script reading the list reads only events).
    assert "older events match too; only the newest 1 are listed" in newest.stderr
    assert "older events" not in manage("audit", "--limit", "3").stderr
    assert manage("audit", "--since", "2999-01-01").stdout == ""
    assert len(manage("audit", "--since", "2000-01-01T00:00:00Z").stdout.splitlines()) == 3
    for bad in (["--clinic", "nowhere"], ["--since", "yesterday"], ["--limit", "0"]):
        refused = manage("audit", *bad)
        assert refused.returncode == 2 and refused.stdout == "", bad


def test_token_create_and_revoke_are_recorded_as_the_operators(app, token):
    forget_events()
    created = manage(
        "token", "create", "--name", "pbx", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "30"
    )
    assert created.returncode == 0, created.stderr
    made = token_id(created.stdout.strip())
    assert manage("token", "revoke", str(made)).returncode == 0
    assert manage("token", "revoke", str(made)).returncode == 0  # already revoked: nothing written
    trail = events()
    assert [(e.actor_kind, e.token_id, e.action, e.target_type, e.target_id) for e in trail] == [
        ("operator", None, "token.create", "api_token", str(made)),
        ("operator", None, "token.revoke", "api_token", str(made)),
    ]
    details = json.loads(trail[0].details)
    assert details.pop("expiresAt").endswith("Z")
    assert details == {"name": "pbx", "clinics": ["clinic-a"], "scopes": "read"}
    assert trail[0].actor_name and created.stdout.strip() not in trail[0].details
