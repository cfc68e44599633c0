"""Every write through the API or the console records who, when, what
and from where (the client's address); logins and failed logins too; the admins' audit
page /console/audit lists the clinic's entries with filters, newest first, paged by keyset;
no row holds a secret, token, presigned URL or password."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from models import AuditEvent, Clinic, MedicalRecord, StaffMembership, StaffUser
from plumbing import clock
from plumbing.database import db
from staff.passwords import hash_password
from storage import LocalStorage
from tests.support import bearer, issue_token, load, switchboard_url
from tests.support.bodies import PNG, call_body
from tests.support.console import PASSWORD, csrf_of, login
from tests.support.live_service import api, patient_id, signing_organization, type_id
from tests.support.processes import run_manage as manage

FROM = {"REMOTE_ADDR": "198.51.100.23"}


@pytest.fixture
def clinics(app):
    """The signing organization (clinic-a, clinic-b); anna is clinic-a's admin, bob its staff."""
    load(signing_organization())
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        for email, role in (("anna@example.cz", "admin"), ("bob@example.cz", "staff")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=a, role=role)


def trail() -> list[AuditEvent]:
    with db.connection_context():
        return list(AuditEvent.select().order_by(AuditEvent.id))


def test_logins_and_failed_logins_are_recorded_with_the_address_and_never_the_password(clinics, app):
    login(app, "anna@example.cz", "wrong password", status=401, **FROM)
    login(app, "nobody@example.cz", "another wrong one", status=401, **FROM)
    login(app, "anna@example.cz", PASSWORD, status=303, **FROM)
    events = [(e.action, e.actor_kind, e.actor_name, e.clinic_id is not None, e.address) for e in trail()]
    assert events == [
        ("staff.login_failed", "staff", "anna@example.cz", True, "198.51.100.23"),
        ("staff.login_failed", "staff", "unknown", False, "198.51.100.23"),
        ("staff.login", "staff", "anna@example.cz", True, "198.51.100.23"),
    ]
    dump = repr([vars(e)["__data__"] for e in trail()])
    for secret in ("wrong password", "another wrong one", PASSWORD, "nobody@example.cz"):
        assert secret not in dump


def test_every_api_write_records_its_address(clinics, app):
    token = issue_token(["clinic-a"], ["read", "write"])
    headers = bearer(token)
    rid = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT")},
        headers=headers,
        extra_environ=FROM,
    ).json["data"]["id"]
    app.patch_json(f"{api()}/patientRequests/{rid}", {"done": True}, headers=headers, extra_environ=FROM)
    link = app.post_json(
        f"{api()}/patientRequests/{rid}/attachments/upload-link",
        {"contentType": "image/png"},
        headers=headers,
        extra_environ=FROM,
    ).json["data"]
    storage = LocalStorage("var/storage", signing_key=b"x" * 16, public_base_url="http://x")  # the app's STORAGE_DIR
    storage.write_stream(link["fileHash"], io.BytesIO(PNG), len(PNG), "image/png")
    record = app.post_json(
        f"{api()}/patientRequests/{rid}/attachments",
        {"contentType": "image/png", "fileHash": link["fileHash"], "description": "consent"},
        headers=headers,
        extra_environ=FROM,
    ).json["data"]
    try:
        app.post_json(
            api() + "/patients/import",
            {"externalId": "E-9", "firstName": "F", "lastName": "L"},
            headers=headers,
            extra_environ=FROM,
        )
        app.post_json(
            api() + "/patients/import-bulk",
            {"patients": [{"externalId": "E-8", "firstName": "F", "lastName": "M"}]},
            headers=headers,
            extra_environ=FROM,
        )
        app.post_json(
            switchboard_url("clinic-a", "recording-complete"),
            call_body("CA-audit-addr"),
            headers=headers,
            extra_environ=FROM,
        )
        events = trail()
        assert [e.action for e in events] == [
            "patient_request.create",
            "patient_request.patch",
            "attachment.upload_link",
            "attachment.register",
            "patient.import",
            "patient.import_bulk",
            "call.receive",
        ]
        assert all((e.actor_name, e.address) == ("test-service", "198.51.100.23") for e in events)
        dump = repr([vars(e)["__data__"] for e in events])
        assert token.split("_", 2)[2] not in dump and "signature" not in dump.lower() and "X-Amz" not in dump
    finally:
        with db.connection_context():
            storage.delete(MedicalRecord.get_by_id(record["id"]).object_key)


def test_a_staff_users_console_write_is_recorded_as_theirs_with_the_address(clinics, app):
    token = issue_token(["clinic-a"], ["read", "write"])
    rid = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT")},
        headers=bearer(token),
    ).json["data"]["id"]
    login(app, "bob@example.cz", PASSWORD, status=303)
    app.post(
        f"/console/requests/{rid}/note",
        {"csrf_token": csrf_of(app.get("/console/")), "note": "x"},
        status=303,
        extra_environ=FROM,
    )
    event = trail()[-1]
    assert (event.action, event.actor_kind, event.actor_name, event.address) == (
        "patient_request.patch",
        "staff",
        "bob@example.cz",
        "198.51.100.23",
    )


def test_the_audit_page_is_for_the_clinics_admins_only(clinics, app):
    login(app, "bob@example.cz", PASSWORD, status=303)
    app.get("/console/audit", status=403)
    app.get("/console/audit?clinic=clinic-a", status=403)
    app.reset()
    assert app.get("/console/audit", status=303).headers["Location"].endswith("/console/login")


def test_the_audit_page_lists_the_clinics_entries_newest_first_with_who_what_and_where(clinics, app):
    token = issue_token(["clinic-a"], ["read", "write"])
    other = issue_token(["clinic-b"], ["read", "write"])
    app.post_json(
        api("clinic-b") + "/patients/import",
        {"externalId": "B-1", "firstName": "F", "lastName": "L"},
        headers=bearer(other),
    )
    rid = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT")},
        headers=bearer(token),
        extra_environ=FROM,
    ).json["data"]["id"]
    login(app, "anna@example.cz", PASSWORD, status=303, **FROM)
    page = app.get("/console/audit")
    trs = page.html.select("table.audit tbody tr")
    rows = [[td.text.strip() for td in tr.find_all("td")] for tr in trs]
    codes = [tr["data-action"] for tr in trs]
    assert codes == ["staff.login", "patient_request.create"], "newest first; clinic-b's not here"
    assert [r[2] for r in rows] == ["Přihlášení", "Vytvořen požadavek"], "in words, in the user's Czech"
    who = trs[0].find_all("td")[1].find("span")
    assert (who.text, who["title"]) == ("Anna", "anna@example.cz") and rows[0][5] == "198.51.100.23"
    assert rows[1][1] == "klíč API test-service" and rows[1][5] == "198.51.100.23"
    subject = trs[1].find_all("td")[3]
    assert subject.find("a")["href"] == f"/console/requests/{rid}"
    assert " ".join(subject.text.split()) == "Požadavek Signed consent – Jana Nováková"
    details = {dt.text: dd.text for dt, dd in zip(trs[1].find_all("dt"), trs[1].find_all("dd"))}
    assert set(details) == {"Pacient", "Typ požadavku"} and rid not in page.text.replace(f"/console/requests/{rid}", "")
    assert "B-1" not in page.text and len(rows) == 2
    assert 'href="/console/audit"' in page.text, "the nav links it for an admin"


def test_the_audit_page_filters_by_who_what_and_when(clinics, app, clock):
    token = issue_token(["clinic-a"], ["read", "write"])
    app.post_json(
        api() + "/patients/import", {"externalId": "E-1", "firstName": "F", "lastName": "L"}, headers=bearer(token)
    )
    login(app, "anna@example.cz", PASSWORD, status=303)

    def actions(query: str) -> list[str]:
        page = app.get("/console/audit?clinic=clinic-a&" + query)
        return [tr["data-action"] for tr in page.html.select("table.audit tbody tr")]

    assert actions("who=ANNA") == ["staff.login"], "part of the name, any case"
    assert actions("who=anna%40example") == ["staff.login"], "or of the e-mail"
    assert actions("what=patient.import") == ["patient.import"]
    assert actions("what=not-an-action") == ["staff.login", "patient.import"], "an unknown verb filters nothing"
    with db.connection_context():
        zone = ZoneInfo(Clinic.by_slug("clinic-a").timezone)
        # The days are the clinic's: between 23:00 and 24:00 UTC it is already tomorrow in Prague.
        days = sorted({e.at.replace(tzinfo=UTC).astimezone(zone).date().isoformat() for e in AuditEvent.select()})
    assert actions(f"since={days[0]}&until={days[-1]}") == ["staff.login", "patient.import"]
    assert actions("until=2000-01-01") == [] and actions("since=2999-01-01") == []
    # At the edge, whatever the hour the suite runs at: 30 minutes before midnight UTC.
    late = datetime(2026, 11, 18, 23, 30)  # naive UTC, as stored
    with db.connection_context():  # the trail is append-only: the event is written at that time
        AuditEvent.create(
            at=late,
            actor_kind="operator",
            actor_name="night",
            clinic_id=Clinic.by_slug("clinic-a").id,
            action="patient.import",
            target_type="patient",
            target_id="1",
        )
    local = late.replace(tzinfo=UTC).astimezone(zone).date()
    assert local.isoformat() == "2026-11-19", "Prague is an hour ahead of UTC in November"
    assert actions("who=night&since=2026-11-19&until=2026-11-19") == ["patient.import"], "the clinic's day"
    assert actions("who=night&since=2026-11-18&until=2026-11-18") == [], "not UTC's"
    page = app.get("/console/audit?clinic=clinic-a&who=%3Cscript%3E")
    assert 'value="&lt;script&gt;"' in page.text, "escaped"


def test_the_audit_page_pages_by_keyset_without_gaps_or_repeats(clinics, app):
    from models import Actor

    with db.connection_context(), db.atomic():
        a = Clinic.by_slug("clinic-a")
        for i in range(120):
            AuditEvent.record(Actor("operator", f"op-{i:03d}"), a, "patient.import", ("patient", i), at=clock.now())
    login(app, "anna@example.cz", PASSWORD, status=303)
    seen: list[str] = []
    url = "/console/audit?clinic=clinic-a&what=patient.import"
    pages = 0
    while url:
        page = app.get(url)
        seen += [tr.find_all("td")[1].find("span")["title"] for tr in page.html.select("table.audit tbody tr")]
        more = page.html.find("a", {"rel": "next"})
        url = more["href"] if more else None
        pages += 1
        assert pages < 10
    assert pages == 3 and seen == [f"op-{i:03d}" for i in reversed(range(120))]
    app.get("/console/audit?clinic=clinic-a&after=garbage", status=400)


def test_manage_audit_prints_a_clinics_entries_with_their_address(clinics, app):
    login(app, "anna@example.cz", PASSWORD, status=303, **FROM)
    done = manage("audit", "--clinic", "clinic-a", "--since", "2000-01-01")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert re.search(r"  clinic-a  staff:anna@example.cz  staff.login  staff_user:\S+  .*from=198\.51\.100\.23$", line)
    assert manage("audit", "--clinic", "clinic-b").stdout == ""


def test_the_trail_keeps_no_update_or_delete_path_for_its_new_column(clinics, app):
    login(app, "anna@example.cz", PASSWORD, status=303, **FROM)
    from models import AppendOnly

    event = trail()[0]
    with pytest.raises(AppendOnly):
        event.save()
    with db.connection_context(), pytest.raises(Exception, match="append-only"), db.atomic():
        db.execute_sql('UPDATE "audit_event" SET "address" = %s', ("10.0.0.1",))
    assert trail()[0].address == "198.51.100.23"
