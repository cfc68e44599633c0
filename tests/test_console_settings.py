"""The clinic's settings pages through WebTest: office hours with their
preview, calendars and vacations, calls, request types and patient tags. Every change goes
through onboarding's validator (its messages and paths show on the page), is audited as the
staff user, and reaches the routing checks on the very next call; staff members get 403 and
another clinic's rows 404."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from models import (
    Actor,
    AuditEvent,
    Calendar,
    Clinic,
    OfficeHours,
    RequestType,
    RequestTypeDefaultTag,
    StaffMembership,
    StaffUser,
    Tag,
    Vacation,
)
from onboarding.clinic_settings import ClinicSettings
from plumbing import clock
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import SECRET_KEY, bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.console import csrf_of

PASSWORD = "correct horse battery"
PRAGUE = ZoneInfo("Europe/Prague")
SWITCHBOARD = {
    "apiUrl": "https://pbx.example.cz/api",
    "username": "clinic-a",
    "password": "pbx-Secret-42",
    "sourceMarkers": ["pbx"],
}
PAGES = (
    "/console/settings/office-hours",
    "/console/settings/calendars",
    "/console/settings/calls",
    "/console/settings/request-types",
)
B_SETUP = {
    "officeHours": [{"weekday": "mon", "opens": "08:00", "closes": "12:00"}],
    "calendars": [{"name": "B", "vacations": [{"start": "2027-01-04", "end": "2027-01-05"}]}],
    "tags": [{"type": "patient", "name": "b-tag"}],
    "requestTypes": [{"ecrfId": "B_TYPE", "name": "B type"}],
}


@pytest.fixture
def people(app):
    """clinic-a (Prague) and clinic-b with a little of everything; anna administers
    clinic-a, bob is a staff member there."""
    load(organization(clinic("clinic-a", switchboard=SWITCHBOARD), clinic("clinic-b", **B_SETUP)))
    with db.connection_context():
        a = Clinic.get(Clinic.slug == "clinic-a")
        for email, role in (("anna@example.cz", "admin"), ("bob@example.cz", "staff")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=a, role=role)


def log_in(app, email: str = "anna@example.cz") -> None:
    form = app.get("/console/login").forms[0]
    form["email"], form["password"] = email, PASSWORD
    form.submit(status=303)


def move(app, clock, moment: datetime) -> None:
    """Set the service's clock, and log in again: a session ends 12 idle hours after its
    last page, by the same clock."""
    clock.set(moment)
    app.reset()  # the old session's cookie
    log_in(app)


def post(app, path: str, fields: dict, status: int = 303, clinic_slug: str = "clinic-a"):
    csrf = csrf_of(app.get("/console/"))
    return app.post(path, {"csrf_token": csrf, "clinic": clinic_slug, **fields}, status=status)


def events(action: str) -> list[AuditEvent]:
    with db.connection_context():
        return [e for e in AuditEvent.trail(limit=1000) if e.action == action]


def one_of(model, *where):
    with db.connection_context():
        return list(model.select().where(*where))


def a_id():
    with db.connection_context():
        return Clinic.get(Clinic.slug == "clinic-a").id


def is_open(app, token: str) -> bool:
    return app.post_json(switchboard_url("clinic-a", "is-clinic-opened"), {}, headers=bearer(token)).json["isOpen"]


def test_a_staff_member_gets_403_on_every_settings_page_and_change(people, app):
    log_in(app, "bob@example.cz")
    for path in PAGES:
        assert "správci" in app.get(path, status=403).text
        post(app, path, {"action": "add", "weekday": "mon", "opens": "08:00", "closes": "12:00"}, status=403)
    assert one_of(OfficeHours, OfficeHours.clinic == a_id()) == []


def test_an_admin_cannot_act_on_another_clinic_nor_its_rows(people, app):
    log_in(app)
    for path in PAGES:
        app.get(path + "?clinic=clinic-b", status=403)
        post(app, path, {"name": "x"}, status=403, clinic_slug="clinic-b")
    with db.connection_context():
        b = Clinic.get(Clinic.slug == "clinic-b")
        hours = OfficeHours.get(OfficeHours.clinic == b)
        calendar = Calendar.get(Calendar.clinic == b)
        vacation = Vacation.get(Vacation.calendar == calendar)
        tag = Tag.get(Tag.clinic == b)
        request_type = RequestType.get(RequestType.clinic == b)
    # clinic-a's own form naming clinic-b's rows: 404, nothing changes.
    post(app, PAGES[0], {"action": "remove", "id": str(hours.id)}, status=404)
    post(app, PAGES[1], {"action": "remove-vacation", "id": str(vacation.id)}, status=404)
    post(
        app,
        PAGES[1],
        {"action": "add-vacation", "calendar": str(calendar.id), "start": "2027-02-01", "end": "2027-02-02"},
        status=404,
    )
    post(app, PAGES[1], {"action": "save-calendar", "id": str(calendar.id), "name": "mine"}, status=404)
    post(app, PAGES[3], {"action": "save-type", "id": str(request_type.id), "ecrfId": "X", "name": "X"}, status=404)
    post(app, PAGES[3], {"action": "save-type", "ecrfId": "X", "name": "X", f"tag-{tag.id}": "1"}, status=404)
    post(app, PAGES[0], {"action": "remove", "id": "not-a-number"}, status=404)
    post(app, PAGES[0], {"action": "remove", "id": str(2**40)}, status=404)
    post(app, PAGES[1], {"action": "remove-vacation", "id": "not-a-uuid"}, status=404)
    with db.connection_context():
        assert Vacation.select().count() == 1 and Calendar.get_by_id(calendar.id).name == "B"
        assert OfficeHours.select().count() == 1 and RequestType.select().count() == 1
    assert events("settings.office_hours.remove") == [] and events("settings.request_type.create") == []


def test_office_hours_past_midnight_on_odd_weeks_and_the_preview_agree_with_is_clinic_opened(people, app, clock):
    token = issue_token(["clinic-a"], ["read"])
    # 2026-11-16 is Monday of ISO week 47 (odd); 2026-11-23 Monday of week 48 (even).
    move(app, clock, datetime(2026, 11, 16, 22, 30, tzinfo=UTC))  # Monday 23:30 in Prague
    assert not is_open(app, token)  # cached now: the change must still be seen on the next call
    post(app, PAGES[0], {"action": "add", "weekday": "mon", "opens": "22:00", "closes": "06:00", "weeks": "odd"})
    assert is_open(app, token), "the routing check sees the change on the very next call"
    page = app.get(PAGES[0])
    assert "22:00" in page.text and "06:00" in page.text and "liché týdny" in page.text
    (event,) = events("settings.office_hours.add")
    assert (event.actor_kind, event.actor_name, event.clinic_id) == ("staff", "anna@example.cz", a_id())
    assert json.loads(event.details) == {"weekday": "mon", "opens": "22:00", "closes": "06:00", "weeks": "odd"}

    instants = [
        datetime(2026, 11, 17, 4, 59, tzinfo=UTC),  # Tue 05:59, after midnight, odd week
        datetime(2026, 11, 17, 5, 0, tzinfo=UTC),  # Tue 06:00: closed
        datetime(2026, 11, 23, 22, 30, tzinfo=UTC),  # Mon 23:30 of an even week
        datetime(2026, 11, 29, 22, 59, tzinfo=UTC),  # Sun 23:59: the week boundary
        datetime(2026, 11, 30, 21, 0, tzinfo=UTC),  # Mon 22:00 of week 49 (odd)
        # After the spring DST change (28 March 2027), Monday of week 13 (odd), in CEST:
        datetime(2027, 3, 29, 19, 59, tzinfo=UTC),  # 21:59 local: closed
        datetime(2027, 3, 29, 20, 0, tzinfo=UTC),
    ]  # 22:00 local (21:00 in winter time)
    for moment in instants:
        move(app, clock, moment)
        local = moment.astimezone(PRAGUE)
        preview = app.get(PAGES[0], {"at": local.strftime("%Y-%m-%dT%H:%M")})
        answer = preview.html.select_one("p.preview.at strong").text
        now = preview.html.select_one("p.preview.now strong").text
        assert answer == now == ("otevřeno" if is_open(app, token) else "zavřeno"), moment
    assert [is_open_at(app, token, clock, m) for m in instants] == [True, False, False, False, True, False, True]


def is_open_at(app, token, clock, moment) -> bool:
    clock.set(moment)
    return is_open(app, token)


def test_office_hours_are_validated_by_the_onboarding_rules(people, app):
    log_in(app)
    refused = post(app, PAGES[0], {"action": "add", "weekday": "mon", "opens": "08:00", "closes": "08:00"}, status=400)
    assert "officeHours[0].closes" in refused.text and "equals opens" in refused.text
    assert refused.html.find("input", {"name": "opens"})["value"] == "08:00", "the form keeps what was typed"
    refused = post(app, PAGES[0], {"action": "add", "weekday": "mon", "opens": "25:00", "closes": "08:00"}, status=400)
    assert "officeHours[0].opens" in refused.text
    post(app, PAGES[0], {"action": "add", "weekday": "someday", "opens": "07:00", "closes": "08:00"}, status=400)
    assert one_of(OfficeHours, OfficeHours.clinic == a_id()) == [] and events("settings.office_hours.add") == []
    post(app, PAGES[0], {"action": "add", "weekday": "tue", "opens": "07:00", "closes": "15:00"})
    (row,) = one_of(OfficeHours, OfficeHours.clinic == a_id())
    post(app, PAGES[0], {"action": "remove", "id": str(row.id)})
    assert one_of(OfficeHours, OfficeHours.clinic == a_id()) == [] and len(events("settings.office_hours.remove")) == 1


def test_a_switchboard_vacation_in_local_time_turns_is_on_vacation_true(people, app, clock):
    log_in(app)
    token = issue_token(["clinic-a"], ["read"])
    page = app.get(PAGES[1])
    assert "2026-12-24" in page.text and "Štědrý den" in page.text, "the coming year's public holidays, in Czech"
    assert "2027-11-17" in page.text and "2025-12-24" not in page.text
    post(app, PAGES[1], {"action": "save-calendar", "name": "Ordinace", "ignore_holidays": "1"})
    (calendar,) = one_of(Calendar, Calendar.clinic == a_id())
    assert calendar.ignore_holidays and len(events("settings.calendar.create")) == 1
    url = switchboard_url("clinic-a", "is-on-vacation")

    def on_vacation() -> bool:
        return app.post_json(url, {}, headers=bearer(token)).json["isOnVacation"]

    move(app, clock, datetime(2026, 11, 20, 11, 30, tzinfo=UTC))  # 12:30 in Prague
    assert not on_vacation()
    post(
        app,
        PAGES[1],
        {
            "action": "add-vacation",
            "calendar": str(calendar.id),
            "name": "Školení",
            "start": "2026-11-20 12:00",
            "end": "2026-11-20T14:00",
            "switchboard": "1",
        },
    )
    assert on_vacation()
    (vacation,) = one_of(Vacation, Vacation.calendar == calendar.id)
    assert (vacation.starts_at, vacation.ends_at) == (datetime(2026, 11, 20, 11, 0), datetime(2026, 11, 20, 13, 0))
    (event,) = events("settings.vacation.add")
    assert event.target_id == str(calendar.id) and json.loads(event.details)["start"] == "2026-11-20T12:00:00+01:00"
    shown = app.get(PAGES[1]).html.select_one("table.vacations tbody tr").text
    assert "Školení" in shown and "2026-11-20 12:00" in shown and "2026-11-20 14:00" in shown
    # A vacation that leaves the switchboard alone, and whole days (the end day included).
    post(
        app,
        PAGES[1],
        {"action": "add-vacation", "calendar": str(calendar.id), "start": "2026-12-01", "end": "2026-12-02"},
    )
    rows = [r.text for r in app.get(PAGES[1]).html.select("table.vacations tbody tr")]
    assert "2026-12-01" in rows[1] and "2026-12-02" in rows[1] and "00:00" not in rows[1], "whole days, as typed"
    move(app, clock, datetime(2026, 12, 2, 20, 0, tzinfo=UTC))
    assert not on_vacation()
    post(app, PAGES[1], {"action": "remove-vacation", "id": str(vacation.id)})
    clock.set(datetime(2026, 11, 20, 11, 30, tzinfo=UTC))
    assert not on_vacation()


def test_a_vacation_is_typed_the_way_the_pages_write_dates(people, app):
    """„24. 12. 2026“ (or „24.12.2026“), with a time or without, as well as ISO 8601."""
    log_in(app)
    post(app, PAGES[1], {"action": "save-calendar", "name": "Ordinace"})
    (calendar,) = one_of(Calendar, Calendar.clinic == a_id())
    for start, end in (("24. 12. 2026", "26.12.2026"), ("20. 11. 2026 8:00", "20. 11. 2026 14:30")):
        post(app, PAGES[1], {"action": "add-vacation", "calendar": str(calendar.id), "start": start, "end": end})
    spans = sorted((v.starts_at, v.ends_at) for v in one_of(Vacation, Vacation.calendar == calendar.id))
    assert spans == [
        (datetime(2026, 11, 20, 7, 0), datetime(2026, 11, 20, 13, 30)),  # Prague is UTC+1 in November
        (datetime(2026, 12, 23, 23, 0), datetime(2026, 12, 26, 23, 0)),  # whole local days, the last included
    ]


def test_vacations_and_calendars_are_validated_by_the_onboarding_rules(people, app):
    log_in(app)
    post(app, PAGES[1], {"action": "save-calendar", "name": "Ordinace"})
    (calendar,) = one_of(Calendar, Calendar.clinic == a_id())
    refused = post(
        app,
        PAGES[1],
        {
            "action": "add-vacation",
            "calendar": str(calendar.id),
            "start": "2026-12-10",
            "end": "2026-12-01",
            "switchboard": "1",
        },
        status=400,
    )
    assert "calendars[0].vacations[0].end" in refused.text and "is not after start" in refused.text
    refused = post(
        app,
        PAGES[1],
        {"action": "add-vacation", "calendar": str(calendar.id), "start": "tomorrow", "end": "2026-12-01"},
        status=400,
    )
    assert "vacations[0].start" in refused.text
    refused = post(app, PAGES[1], {"action": "save-calendar", "name": "Ordinace"}, status=400)
    assert "calendars[1].name" in refused.text and "duplicate" in refused.text
    post(app, PAGES[1], {"action": "save-calendar", "name": ""}, status=400)
    post(app, PAGES[1], {"action": "save-calendar", "id": str(calendar.id), "name": "Recepce"})
    assert one_of(Calendar, Calendar.clinic == a_id())[0].name == "Recepce"
    assert one_of(Vacation, Vacation.calendar == calendar.id) == []
    assert len(events("settings.calendar.update")) == 1 and events("settings.vacation.add") == []


def test_calls_missed_call_requests_and_caller_languages(people, app):
    log_in(app)
    page = app.get(PAGES[2])
    assert page.html.find("input", {"name": "missed_call_requests"}).has_attr("checked")
    post(app, PAGES[2], {"languages": "cs, en  uk"})
    with db.connection_context():
        a = Clinic.get(Clinic.slug == "clinic-a")
    assert not a.missed_call_requests and a.language_list == ["cs", "en", "uk"]
    (event,) = events("settings.calls.update")
    assert json.loads(event.details) == {"missedCallRequests": False, "languages": ["cs", "en", "uk"]}
    refused = post(app, PAGES[2], {"missed_call_requests": "1", "languages": "cs klingon"}, status=400)
    assert "languages[1]" in refused.text and "whisper.cpp" in refused.text
    assert refused.html.find("input", {"name": "languages"})["value"] == "cs klingon"
    refused = post(app, PAGES[2], {"languages": "cs cs"}, status=400)
    assert "duplicate" in refused.text
    post(app, PAGES[2], {"missed_call_requests": "1", "languages": ""})
    with db.connection_context():
        a = Clinic.get(Clinic.slug == "clinic-a")
    assert a.missed_call_requests and a.languages is None


def test_request_types_with_default_patient_tags_created_here(people, app):
    log_in(app)
    post(app, PAGES[3], {"action": "add-tag", "name": "souhlas"})
    (tag,) = one_of(Tag, Tag.clinic == a_id())
    assert tag.type == "patient" and len(events("settings.tag.create")) == 1
    refused = post(app, PAGES[3], {"action": "add-tag", "name": "souhlas"}, status=400)
    assert "duplicate" in refused.text
    post(
        app,
        PAGES[3],
        {
            "action": "save-type",
            "name": "Podepsaný souhlas",
            "ecrfId": "SIGNED_CONSENT",
            "requiresPayment": "1",
            "active": "1",
            "reservationLength": "30",
            f"tag-{tag.id}": "1",
        },
    )
    (t,) = one_of(RequestType, RequestType.clinic == a_id())
    assert (t.name, t.ecrf_id, t.requires_payment, t.requires_reservation, t.reservation_length, t.active) == (
        "Podepsaný souhlas",
        "SIGNED_CONSENT",
        True,
        False,
        30,
        True,
    )
    assert [d.tag_id for d in one_of(RequestTypeDefaultTag, RequestTypeDefaultTag.request_type == t.id)] == [tag.id]
    (event,) = events("settings.request_type.create")
    assert json.loads(event.details) == {"ecrfId": "SIGNED_CONSENT", "name": "Podepsaný souhlas"}
    # The API's catalogue shows it at once; deactivated, it is gone from there.
    token = issue_token(["clinic-a"], ["read"])
    search = "/external/v1/clinics/clinic-a/patientRequestTypes/search"
    assert [x["ecrfId"] for x in app.post_json(search, {}, headers=bearer(token)).json["data"]] == ["SIGNED_CONSENT"]
    post(app, PAGES[3], {"action": "save-type", "id": str(t.id), "name": "Souhlas", "ecrfId": "SIGNED_CONSENT"})
    (t,) = one_of(RequestType, RequestType.clinic == a_id())
    assert (t.name, t.active, t.requires_payment) == ("Souhlas", False, False)
    assert one_of(RequestTypeDefaultTag, RequestTypeDefaultTag.request_type == t.id) == []
    assert app.post_json(search, {}, headers=bearer(token)).json["data"] == []
    # The onboarding rules: a code is unique in the clinic, numbers are not negative.
    refused = post(app, PAGES[3], {"action": "save-type", "name": "Jiný", "ecrfId": "SIGNED_CONSENT"}, status=400)
    assert "requestTypes" in refused.text and "duplicate" in refused.text
    refused = post(
        app, PAGES[3], {"action": "save-type", "name": "Jiný", "ecrfId": "OTHER", "remindDaysBefore": "-2"}, status=400
    )
    assert "remindDaysBefore" in refused.text
    assert len(one_of(RequestType, RequestType.clinic == a_id())) == 1


def test_pages_render_in_english_and_escape_what_they_show(people, app):
    with db.connection_context():
        StaffUser.update(language="en").where(StaffUser.email == "anna@example.cz").execute()
    log_in(app)
    post(app, PAGES[3], {"action": "add-tag", "name": "<b>bold</b>"})
    page = app.get(PAGES[3])
    assert "Request types" in page.text and "&lt;b&gt;bold&lt;/b&gt;" in page.text and "<b>bold" not in page.text
    index = app.get("/console/settings")
    for path in PAGES:
        assert f'href="{path}?clinic=clinic-a"' in index.text
    assert "Office hours" in app.get(PAGES[0]).text and "Calls" in app.get(PAGES[2]).text


def test_a_change_without_the_csrf_token_is_refused(people, app):
    log_in(app)
    app.post(PAGES[2], {"clinic": "clinic-a", "languages": "cs"}, status=403)
    assert events("settings.calls.update") == []


def test_a_change_keeps_the_switchboard_credentials_and_never_shows_them(people, app):
    with db.connection_context():
        before = Clinic.get(Clinic.slug == "clinic-a")
    log_in(app)
    post(app, PAGES[2], {"languages": "cs"})
    post(app, PAGES[0], {"action": "add", "weekday": "mon", "opens": "08:00", "closes": "12:00"})
    with db.connection_context():
        after = Clinic.get(Clinic.slug == "clinic-a")
        trail = " ".join(e.details for e in AuditEvent.trail(limit=1000))
    assert (
        after.platform_api_url,
        after.platform_username,
        after.platform_password_encrypted,
        after.platform_source_markers,
    ) == (
        before.platform_api_url,
        before.platform_username,
        before.platform_password_encrypted,
        before.platform_source_markers,
    )
    assert "pbx-Secret-42" not in trail
    for path in PAGES:
        assert "pbx-Secret-42" not in app.get(path).text


def test_two_admins_changing_at_once_both_land(people):
    """Each change reads the whole clinic and writes it back: without taking turns, a change
    would undo one committed in between. Four at once (the test pool's size), five rounds."""
    with db.connection_context():
        a = Clinic.get(Clinic.slug == "clinic-a")
    days = ("mon", "tue", "wed", "thu")
    errors: list[BaseException] = []
    for round_ in range(5):
        barrier = threading.Barrier(len(days))

        def add(weekday: str, barrier: threading.Barrier = barrier, round_: int = round_) -> None:
            try:
                with db.connection_context():
                    barrier.wait(timeout=10)
                    ClinicSettings(
                        a, Actor("staff", f"{weekday}@example.cz"), SECRET_KEY, clock.now()
                    ).add_office_hours(weekday, f"{8 + round_:02d}:00", "20:00", "every")
            except BaseException as exc:  # the assertion below names it
                errors.append(exc)

        threads = [threading.Thread(target=add, args=(day,)) for day in days]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert errors == []
    assert len(one_of(OfficeHours, OfficeHours.clinic == a.id)) == 20
    assert len(events("settings.office_hours.add")) == 20


def test_a_clinic_read_back_as_a_document_writes_back_unchanged(app, example):
    """The settings pages edit `clinic_document`: for the example organization (hours past
    midnight, vacations, tags, request types with default tags, a switchboard) it must be
    the clinic exactly, or every change would also rewrite what it did not touch."""
    from onboarding.clinic_settings import clinic_document
    from onboarding.writer import onboard

    load(example)
    with db.connection_context():
        for c in Clinic.select():
            assert onboard(clinic_document(c, SECRET_KEY), secret_key=SECRET_KEY, now=clock.now()).endswith(
                " 0 change(s)"
            ), c.slug
