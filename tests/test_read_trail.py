"""The read trail (docs/data-protection.md, "Who read what"): every kind of read of a
patient's data, through the console and through the API, leaves exactly one row naming its
reader (a staff user or an API key) at the service's clock; a search leaves one row per
patient or request it listed, in one INSERT; the breach question, "everything X read between
two times", is answered the same on the console's page, as CSV and by `manage.py reads`; the
data-protection officer reads the trails and has no inbox and no settings."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import timedelta

import pytest
import webtest

from models import (
    AppendOnly,
    Call,
    Clinic,
    MedicalRecord,
    PatientRequest,
    ReadEvent,
    StaffMembership,
    StaffUser,
)
from plumbing.clock import as_utc
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import bearer, issue_token
from tests.support.console import PASSWORD, csrf_of, login, make
from tests.support.live_service import api
from tests.support.people import new_person, seed
from tests.support.processes import run_manage

FROM = {"REMOTE_ADDR": "198.51.100.7"}


def person_of(app, clock):
    from tests.support import load
    from tests.support.people import lifecycle_organization

    load(lifecycle_organization())
    token = issue_token(["clinic-a"], ["read", "write"])
    return token, seed(app, token, new_person(), clock())


def member(email: str, role: str, slug: str = "clinic-a") -> StaffUser:
    with db.connection_context():
        user = StaffUser.create(email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.by_slug(slug), role=role)
        return user


def browser_of(wsgi_app, email: str) -> webtest.TestApp:
    """A console session of its own (its own cookies) for `email`."""
    browser = webtest.TestApp(wsgi_app)
    login(browser, email, PASSWORD, status=303)
    return browser


def rows() -> list[ReadEvent]:
    with db.connection_context():
        return list(ReadEvent.select().order_by(ReadEvent.id))


def new_rows(before: int) -> list[ReadEvent]:
    return rows()[before:]


@pytest.fixture
def seeded(app, clock):
    token, person = person_of(app, clock)
    bob = member("bob@example.cz", "staff")
    anna = member("anna@example.cz", "admin")
    return token, person, bob, anna


# --- every kind of read, once each, with its reader ----------------------------------------


def test_the_api_request_detail_is_one_row_naming_the_key_at_the_clock(seeded, app, clock, wsgi_app):
    token, person, *_ = seeded
    clock.set(clock() + timedelta(minutes=7))
    before = len(rows())
    detail = app.get(f"{api()}/patientRequests/{person.requests['message']}", headers=bearer(token), extra_environ=FROM)
    assert detail.json["data"]["call"]["transcript"] == person.transcript  # the transcript was read
    (row,) = new_rows(before)
    with db.connection_context():
        key = ReadEvent.select().get().reader_id
        request = PatientRequest.get_by_id(person.requests["message"])
    assert (row.kind, row.reader_kind, row.patient_request_id, row.patient_id) == (
        "request",
        "token",
        request.id,
        request.patient_id,
    )
    assert row.reader_id == key and row.reader_name == "test-service"
    assert as_utc(row.at) == as_utc(clock()) and row.address == "198.51.100.7"


def test_the_api_recording_played_is_one_row(seeded, app):
    token, person, *_ = seeded
    before = len(rows())
    app.get(f"{api()}/patientRequests/{person.requests['message']}/recording", headers=bearer(token), status=302)
    (row,) = new_rows(before)
    assert (row.kind, row.reader_kind) == ("recording", "token")
    assert str(row.patient_request_id) == person.requests["message"]


def test_a_detail_carrying_document_links_is_one_row_of_its_request(seeded, app):
    token, person, *_ = seeded
    before = len(rows())
    detail = app.get(f"{api()}/patientRequests/{person.requests['signed']}", headers=bearer(token))
    assert detail.json["data"]["medicalRecords"][0]["downloadUrl"]  # the documents' links were handed out
    (row,) = new_rows(before)
    assert (row.kind, str(row.patient_request_id)) == ("request", person.requests["signed"])


def test_a_request_search_is_one_row_per_request_listed(seeded, app):
    token, person, *_ = seeded
    before = len(rows())
    found = app.post_json(
        f"{api()}/patientRequests/search", {"filter": {"patientId": person.patient_id}}, headers=bearer(token)
    ).json["data"]
    assert len(found) >= 2
    written = new_rows(before)
    assert sorted(str(r.patient_request_id) for r in written) == sorted(r["id"] for r in found)
    assert {r.kind for r in written} == {"request_search"} and len({r.at for r in written}) == 1


def test_a_patient_search_is_one_row_per_patient_listed_and_none_for_an_empty_answer(seeded, app):
    token, *_ = seeded
    before = len(rows())
    found = app.post_json(f"{api()}/patients/search", {}, headers=bearer(token)).json["data"]
    written = new_rows(before)
    assert found and sorted(str(r.patient_id) for r in written) == sorted(p["id"] for p in found)
    assert {r.kind for r in written} == {"patient_search"}
    before = len(rows())
    app.post_json(f"{api()}/patients/search", {"filter": {"externalId": "nobody-has-this-id"}}, headers=bearer(token))
    assert new_rows(before) == []


def test_the_console_request_page_is_one_row_naming_the_staff_member(seeded, clock, wsgi_app):
    _, person, bob, _ = seeded
    browser = browser_of(wsgi_app, "bob@example.cz")
    before = len(rows())
    page = browser.get(f"/console/requests/{person.requests['message']}", extra_environ=FROM)
    assert person.last in page.html.select_one("blockquote.transcript").text
    (row,) = new_rows(before)
    assert (row.kind, row.reader_kind, row.reader_id, row.reader_name) == ("request", "staff", bob.id, bob.email)
    assert str(row.patient_request_id) == person.requests["message"] and as_utc(row.at) == as_utc(clock())


def test_the_console_recording_and_a_signed_document_opened_are_one_row_each(seeded, clock, wsgi_app):
    _, person, bob, _ = seeded
    browser = browser_of(wsgi_app, "bob@example.cz")
    page = browser.get(f"/console/requests/{person.requests['signed']}")
    link = page.html.select_one("table.documents a")["href"]
    assert link.startswith(f"/console/requests/{person.requests['signed']}/documents/")  # not the storage's URL
    before = len(rows())
    opened = browser.get(link, status=302)
    assert "signature=" in opened.location or "X-Amz" in opened.location or "sig" in opened.location
    (row,) = new_rows(before)
    assert (row.kind, row.reader_id) == ("document", bob.id)
    before = len(rows())
    browser.get(f"/console/requests/{person.requests['message']}/recording", status=302)
    (row,) = new_rows(before)
    assert (row.kind, str(row.patient_request_id)) == ("recording", person.requests["message"])
    # The player loads it again whenever its row is shown: once an hour per staff member and request.
    browser.get(f"/console/requests/{person.requests['message']}/recording", status=302)
    assert len(new_rows(before)) == 1
    with db.connection_context():  # a link re-fetched earlier, still good in an hour
        Call.update(
            recording_link="https://platform.example/rec/fresh.mp3",
            recording_link_expires_at=as_utc(clock()) + timedelta(days=1),
        ).where(Call.id == person.calls["message"]).execute()
    clock.set(clock() + timedelta(minutes=61))
    browser_of(wsgi_app, "bob@example.cz").get(f"/console/requests/{person.requests['message']}/recording", status=302)
    assert [r.kind for r in new_rows(before)] == ["recording", "recording"]
    # Another request's document id: 404, and nothing read.
    with db.connection_context():
        document = MedicalRecord.select().get()
    before = len(rows())
    browser.get(f"/console/requests/{person.requests['message']}/documents/{document.id}", status=404)
    assert new_rows(before) == []


def test_the_patient_page_and_copy_are_one_row_each_and_the_page_says_who_read(seeded, wsgi_app):
    _, person, _bob, anna = seeded
    browser_of(wsgi_app, "bob@example.cz").get(f"/console/requests/{person.requests['message']}")
    admin = browser_of(wsgi_app, "anna@example.cz")
    before = len(rows())
    page = admin.get(f"/console/patients/{person.patient_id}?clinic=clinic-a")
    (row,) = new_rows(before)
    assert (row.kind, str(row.patient_id), row.reader_id) == ("patient", person.patient_id, anna.id)
    said = page.html.select_one("table.reads").text
    assert "bob@example.cz" in said
    before = len(rows())
    admin.post(f"/console/patients/{person.patient_id}/copy", {"csrf_token": csrf_of(page), "clinic": "clinic-a"})
    (row,) = new_rows(before)
    assert (row.kind, str(row.patient_id)) == ("copy", person.patient_id)


def test_the_trail_is_never_changed(seeded, app):
    token, person, *_ = seeded
    app.get(f"{api()}/patientRequests/{person.requests['message']}", headers=bearer(token))
    with db.connection_context():
        (row,) = list(ReadEvent.select())
        with pytest.raises(AppendOnly):
            ReadEvent.update(kind="x").execute()
        with pytest.raises(AppendOnly):
            row.delete_instance()
        with pytest.raises(Exception, match="append-only"), db.atomic():  # the trigger, whoever asks
            db.execute_sql("UPDATE read_event SET reader_name = 'someone else'")


# --- the breach question -----------------------------------------------------------------


def test_a_staff_member_disabled_after_reading_three_patients_is_answered_with_those_three(app, clock, wsgi_app):
    from tests.support import clinic, load, organization

    load(organization(clinic("clinic-a"), clinic("clinic-b")))
    member("bob@example.cz", "staff")
    member("anna@example.cz", "admin")
    member("olga@example.cz", "officer")
    requests = [
        make("clinic-a", "voice_message", phone=f"+42060112345{n}", name=("Jana", f"Pacientka{n}"), minutes=n)
        for n in range(5)
    ]
    read_by_bob, read_by_anna = requests[:3], requests[3:4]
    # Bob read one the day before the period asked about (the 18th).
    browser_of(wsgi_app, "bob@example.cz").get(f"/console/requests/{requests[4].id}", status=200)
    clock.set(clock() + timedelta(days=1))  # the 19th
    bob = browser_of(wsgi_app, "bob@example.cz")
    for request in read_by_bob:
        bob.get(f"/console/requests/{request.id}", status=200)
        clock.set(clock() + timedelta(minutes=3))
    browser_of(wsgi_app, "anna@example.cz").get(f"/console/requests/{read_by_anna[0].id}", status=200)
    # Anna, the clinic's admin, disables bob (his password was stolen): his sessions end at once.
    from models import Actor
    from staff import accounts

    with db.connection_context():
        admin, bob_user = StaffUser.by_email("anna@example.cz"), StaffUser.by_email("bob@example.cz")
        assert admin is not None and bob_user is not None
        accounts.disable(Clinic.by_slug("clinic-a"), Actor.staff(admin), str(bob_user.id), admin, clock())
        assert StaffUser.get_by_id(bob_user.id).disabled_at is not None
    bob.get(f"/console/requests/{requests[0].id}", status=303)  # his session is gone: nothing more read
    wanted = sorted(str(r.id) for r in read_by_bob)

    officer = browser_of(wsgi_app, "olga@example.cz")
    asked = "/console/reads?clinic=clinic-a&who=bob@example.cz&since=2026-11-19&until=2026-11-19"
    page = officer.get(asked)
    shown = page.html.select("table.reads tbody tr")
    assert sorted(tr["data-request"] for tr in shown) == wanted
    assert "Pacientka0" in page.text and "Pacientka3" not in page.text

    exported = officer.get(asked + "&format=csv")
    assert exported.content_type == "text/csv"
    table = list(csv.DictReader(io.StringIO(exported.text)))
    assert sorted(r["request_id"] for r in table) == wanted
    assert {r["reader"] for r in table} == {"bob@example.cz"} and {r["kind"] for r in table} == {"request"}

    since, until = "2026-11-19T00:00:00+01:00", "2026-11-20T00:00:00+01:00"
    done = run_manage("reads", "--who", "bob@example.cz", "--since", since, "--until", until)
    assert done.returncode == 0, done.stderr
    assert sorted(r["request_id"] for r in csv.DictReader(io.StringIO(done.stdout))) == wanted


def test_a_key_is_asked_about_by_its_name_or_id(seeded, app):
    token, person, *_ = seeded
    app.get(f"{api()}/patientRequests/{person.requests['message']}", headers=bearer(token))
    from privacy import read_trail

    with db.connection_context():
        key_id = ReadEvent.select().get().reader_id
        clinic_ids = [Clinic.by_slug("clinic-a").id]
        by_name = read_trail.reads_by(clinic_ids, "test-service", None, None)
        by_id = read_trail.reads_by(clinic_ids, str(key_id), None, None)
        nobody = read_trail.reads_by(clinic_ids, str(uuid.uuid4()), None, None)
    assert [r.request_id for r in by_name] == [r.request_id for r in by_id] == [uuid.UUID(person.requests["message"])]
    assert nobody == []


# --- the data-protection officer -----------------------------------------------------------


def test_the_officer_reads_the_trails_and_has_no_inbox_no_request_and_no_settings(seeded, wsgi_app):
    _, person, *_ = seeded
    member("olga@example.cz", "officer")
    officer = browser_of(wsgi_app, "olga@example.cz")
    assert officer.get("/console/", status=303).location.endswith("/console/reads")
    nav = officer.get("/console/reads?clinic=clinic-a").html.select_one("header nav").text
    assert "Inbox" not in nav and "Doručené" not in nav and "Settings" not in nav and "Nastavení" not in nav
    officer.get("/console/audit?clinic=clinic-a", status=200)
    before = len(rows())
    officer.get(f"/console/requests/{person.requests['message']}", status=404)
    officer.get(f"/console/requests/{person.requests['message']}/recording", status=404)
    assert new_rows(before) == []
    for settings in ("", "/retention", "/staff", "/api-keys", "/calls"):
        officer.get(f"/console/settings{settings}?clinic=clinic-a", status=403)
    page = officer.get(f"/console/patients/{person.patient_id}?clinic=clinic-a", status=200)
    assert not page.html.select("table.documents a[href^='/console/requests/']")  # no way into a request
    # A write to the settings, CSRF token and all: refused.
    officer.post(
        "/console/settings/calls?clinic=clinic-a",
        {"csrf_token": csrf_of(page), "clinic": "clinic-a"},
        status=403,
    )
