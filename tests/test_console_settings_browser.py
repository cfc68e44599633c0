"""The settings pages in a real headless Chromium against gunicorn
started from the Procfile, the session's real RQ worker, PostgreSQL and Redis (the style of
tests/test_console_browser.py): an admin sets office hours with an odd-week interval and the
preview agrees with `is-clinic-opened` over HTTP at a week boundary, past midnight and across
the spring DST change; a switchboard vacation turns `is-on-vacation` true; with missed-call
requests off an empty voicemail creates nothing; a request type with a default patient tag
made here tags the patient on an API create; a staff member gets 403 on every settings page.

gunicorn runs on the real clock, so "open at …?" is compared with `is-clinic-opened` asked
over HTTP of the same app served in this process with the tests' clock set to each instant
(tests/support/live_service.py), against the same database."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
import requests

from models import AuditEvent, Clinic, PatientRequest, StaffMembership, StaffUser
from onboarding.writer import stable_id
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.clocks import Clock
from tests.support.console_browser import PASSWORD, WAIT_MS, _publish, log_in
from tests.support.handoffs import audio, call_body
from tests.support.https_server import static
from tests.support.live_service import serve
from tests.support.worker import processed_call

PRAGUE = ZoneInfo("Europe/Prague")
SETTINGS = ("office-hours", "calendars", "calls", "request-types")


@pytest.fixture
def admin(app):
    load(
        organization(
            clinic("clinic-cz", name="Ordinace Vinohrady"),
            patients=[
                {
                    "key": "jana",
                    "firstName": "Jana",
                    "lastName": "Dvořáková",
                    "phone": "+420 601 123 456",
                    "records": [{"clinic": "clinic-cz"}],
                }
            ],
        )
    )
    with db.connection_context():
        cz = Clinic.get(Clinic.slug == "clinic-cz")
        for email, role in (("anna@example.cz", "admin"), ("bob@example.cz", "staff")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=cz, role=role)


def add_interval(page, weekday: str, opens: str, closes: str, weeks: str) -> None:
    page.get_by_label("Den", exact=True).select_option(weekday)
    page.locator("#opens").fill(opens)
    page.locator("#closes").fill(closes)
    page.get_by_label("Týdny").select_option(weeks)
    page.get_by_role("button", name="Přidat – ordinační hodiny", exact=True).click()
    page.wait_for_load_state()


def preview_at(page, local: datetime) -> bool:
    page.get_by_label("Datum a čas (místní)").fill(local.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_role("button", name="Zjistit").click()
    answer = page.locator("p.preview.at")
    answer.wait_for()
    assert local.strftime("%Y-%m-%d %H:%M") in answer.inner_text()
    return {"otevřeno": True, "zavřeno": False}[answer.locator("strong").inner_text()]


def test_an_admin_sets_the_clinics_settings_and_the_service_follows(
    service,
    admin,
    app,
    browser,
    https_server,
    worker,
    tmp_path,
):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.set_default_timeout(WAIT_MS)
    log_in(page, service)
    page.wait_for_url(service + "/console/")
    page.get_by_role("link", name="Nastavení").click()
    page.get_by_role("link", name="Ordinační hodiny").click()
    page.wait_for_url(service + "/console/settings/office-hours?clinic=clinic-cz")
    read = issue_token(["clinic-cz"], ["read"])

    # 1. Office hours: Monday nights of odd weeks (past midnight), Sunday nights of odd weeks
    # into Monday (across the week boundary), Sunday 01:00-04:00 every week (the DST night).
    add_interval(page, "mon", "22:00", "06:00", "odd")
    add_interval(page, "sun", "23:00", "01:00", "odd")
    add_interval(page, "sun", "01:00", "04:00", "every")
    assert page.locator("table.hours tbody tr").count() == 3
    # Refused by the onboarding rules, shown on the page, nothing written.
    add_interval(page, "tue", "08:00", "08:00", "every")
    assert "equals opens" in page.locator("p.error").inner_text()
    page.goto(service + "/console/settings/office-hours?clinic=clinic-cz")
    assert page.locator("table.hours tbody tr").count() == 3

    # "Open now?" on the page and is-clinic-opened on gunicorn, at the same real moment.
    now_page = page.locator("p.preview.now strong").inner_text() == "otevřeno"
    live = requests.post(
        service + switchboard_url("clinic-cz", "is-clinic-opened"), json={}, headers=bearer(read), timeout=60
    ).json()["isOpen"]
    assert now_page == live

    instants = {  # UTC instant: expected answer (Prague local time, ISO week)
        datetime(2026, 11, 16, 21, 30, tzinfo=UTC): True,  # Mon 22:30, week 47 (odd)
        datetime(2026, 11, 16, 23, 0, tzinfo=UTC): True,  # Tue 00:00: midnight, still open
        datetime(2026, 11, 17, 4, 59, tzinfo=UTC): True,  # Tue 05:59
        datetime(2026, 11, 17, 5, 0, tzinfo=UTC): False,  # Tue 06:00
        datetime(2026, 11, 23, 21, 30, tzinfo=UTC): False,  # Mon 22:30, week 48 (even)
        datetime(2026, 11, 22, 23, 30, tzinfo=UTC): True,  # Mon 00:30 of week 48, from Sunday of 47
        datetime(2026, 11, 29, 23, 30, tzinfo=UTC): False,  # Mon 00:30 of week 49, Sunday of 48 even
        datetime(2027, 3, 28, 0, 59, tzinfo=UTC): True,  # Sun 01:59 CET, before the DST change
        datetime(2027, 3, 28, 1, 0, tzinfo=UTC): True,  # Sun 03:00 CEST, just after it
        datetime(2027, 3, 28, 1, 59, tzinfo=UTC): True,  # 03:59 CEST
        datetime(2027, 3, 28, 2, 0, tzinfo=UTC): False,  # 04:00 CEST (03:00 in winter time)
    }
    clock = Clock()
    with serve(clock=clock) as base:
        for moment, expected in instants.items():
            clock.set(moment)
            api = requests.post(
                base + switchboard_url("clinic-cz", "is-clinic-opened"), json={}, headers=bearer(read), timeout=60
            ).json()["isOpen"]
            assert preview_at(page, moment.astimezone(PRAGUE)) == api == expected, moment
    page.screenshot(path=str(tmp_path / "console-settings.png"), full_page=True)
    _publish(tmp_path / "console-settings.png")

    # 2. A switchboard vacation from today to tomorrow turns is-on-vacation true (the
    # calendar ignores public holidays, so the answer before it is false on any day).
    def on_vacation() -> bool:
        return requests.post(
            service + switchboard_url("clinic-cz", "is-on-vacation"), json={}, headers=bearer(read), timeout=60
        ).json()["isOnVacation"]

    page.goto(service + "/console/settings/calendars?clinic=clinic-cz")
    assert page.locator("aside.holidays li").count() >= 10, "the coming year's Czech public holidays"
    page.locator("#new-calendar").fill("Ordinace")
    page.get_by_label("Nebrat ohled na státní svátky").last.check()
    page.get_by_role("button", name="Vytvořit kalendář").click()
    page.locator("section.calendar").wait_for()
    assert not on_vacation()
    today = datetime.now(PRAGUE).date()
    section = page.locator("section.calendar")
    section.get_by_label("Dovolená", exact=True).fill("Školení")
    section.get_by_label("Od", exact=True).fill(today.isoformat())
    section.get_by_label("Do", exact=True).fill(today.isoformat())  # the end day included
    section.get_by_role("button", name="Přidat dovolenou").click()
    page.locator("table.vacations td[data-label]", has_text="Školení").wait_for()
    assert on_vacation()

    # 3. Missed-call requests off: an empty voicemail then creates nothing.
    page.goto(service + "/console/settings/calls?clinic=clinic-cz")
    page.get_by_label("Vytvořit požadavek o zmeškaném hovoru").uncheck()
    page.get_by_role("button", name="Uložit – nastavení hovorů").click()
    page.wait_for_load_state()
    assert not page.get_by_label("Vytvořit požadavek o zmeškaném hovoru").is_checked()
    https_server.route("/rec/CA-silent.mp3", static(audio("silence_line.mp3"), "audio/mpeg"))
    write = issue_token(["clinic-cz"], ["read", "write"])
    handed = requests.post(
        service + switchboard_url("clinic-cz", "recording-complete"),
        timeout=60,
        json=call_body("CA-silent", https_server.url("/rec/CA-silent.mp3")),
        headers=bearer(write),
    )
    assert handed.status_code == 200, handed.text
    call = processed_call("CA-silent", timeout=180)
    with db.connection_context():
        assert call.outcome == "opted_out" and PatientRequest.select().count() == 0

    # 4. A patient tag and a request type carrying it; an API create tags the patient.
    page.goto(service + "/console/settings/request-types?clinic=clinic-cz")
    page.get_by_label("Nový štítek pacienta").fill("souhlas")
    page.get_by_role("button", name="Vytvořit štítek").click()
    page.locator("section.patient-tags .tag", has_text="souhlas").wait_for()
    new = page.locator("section.request-type.new")
    new.get_by_label("Název").fill("Podepsaný souhlas")
    new.get_by_label("Kód").fill("SIGNED_CONSENT")
    new.get_by_label("souhlas", exact=True).check()
    new.get_by_role("button", name="Vytvořit typ požadavku").click()
    page.locator("section.request-type h2", has_text="Podepsaný souhlas").wait_for()
    api = service + "/external/v1/clinics/clinic-cz"
    types = requests.post(api + "/patientRequestTypes/search", json={}, headers=bearer(write), timeout=60).json()[
        "data"
    ]
    assert [t["ecrfId"] for t in types] == ["SIGNED_CONSENT"]
    jana = str(stable_id("patient", "test-org", "jana"))
    created = requests.post(
        api + "/patientRequests/create",
        json={"patientId": jana, "userECRFId": types[0]["id"]},
        headers=bearer(write),
        timeout=60,
    )
    assert created.status_code == 200, created.text
    found = requests.post(
        api + "/patients/search", json={"filter": {"query": "Dvořáková"}}, headers=bearer(write), timeout=60
    ).json()["data"]
    assert [t["name"] for t in found[0]["tags"]] == ["souhlas"]

    # Every change is in the audit trail as Anna's.
    with db.connection_context():
        mine = [e.action for e in AuditEvent.trail(limit=1000) if e.actor_name == "anna@example.cz"]
    for action in (
        "settings.office_hours.add",
        "settings.calendar.create",
        "settings.vacation.add",
        "settings.calls.update",
        "settings.tag.create",
        "settings.request_type.create",
    ):
        assert action in mine, action
    assert mine.count("settings.office_hours.add") == 3

    # A staff member gets 403 on every settings page.
    other = browser.new_page()
    other.set_default_timeout(WAIT_MS)
    log_in(other, service, "bob@example.cz")
    other.wait_for_url(service + "/console/")
    assert other.goto(service + "/console/settings").status == 403
    for name in SETTINGS:
        answer = other.goto(f"{service}/console/settings/{name}?clinic=clinic-cz")
        assert answer.status == 403 and "správci" in other.content(), name
