"""Spec section 4, rules 1-3: the three routing checks, answered with 200 and a boolean."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from datetime import time as dt_time
from zoneinfo import ZoneInfo

import phonenumbers
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import Calendar, Clinic, OfficeHours, Patient, PatientRequest, Vacation
from onboarding.writer import stable_id
from plumbing.clock import as_utc, utc_now
from plumbing.database import db
from plumbing.phones import to_e164
from switchboard import schedules
from switchboard.office_hours import is_open
from switchboard.vacations import decide, on_vacation
from tests.support import bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.row_caches import caught_up
from tests.support.servers import wait_until

PRAGUE = ZoneInfo("Europe/Prague")


def at(local: str, tz: ZoneInfo = PRAGUE) -> datetime:
    return datetime.fromisoformat(local).replace(tzinfo=tz)


def ask(app, check: str, body=None, slug: str = "clinic-a", token: str | None = None, status: int = 200):
    token = token or issue_token([slug], ["read"])
    if body is None:
        return app.post(switchboard_url(slug, check), headers=bearer(token), status=status)
    return app.post_json(switchboard_url(slug, check), body, headers=bearer(token), status=status)


@pytest.fixture
def server_tz():
    """Run the server process in a timezone far from the clinic's."""
    old = os.environ.get("TZ")

    def set_tz(name: str) -> None:
        os.environ["TZ"] = name
        time.tzset()

    yield set_tz
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


# --- is-clinic-opened ---------------------------------------------------------------


def test_open_within_office_hours_and_closed_outside(app, clock):
    load(organization(clinic(officeHours=[{"weekday": "wed", "opens": "08:00", "closes": "16:00"}])))
    for local, expected in [
        ("2026-11-18T07:59", False),
        ("2026-11-18T08:00", True),
        ("2026-11-18T15:59", True),
        ("2026-11-18T16:00", False),
        ("2026-11-19T10:00", False),
    ]:
        clock.set(at(local))
        assert ask(app, "is-clinic-opened").json == {"isOpen": expected}, local


def test_empty_object_body_is_accepted(app, clock):
    load(organization(clinic(officeHours=[{"weekday": "wed", "opens": "08:00", "closes": "16:00"}])))
    clock.set(at("2026-11-18T09:00"))
    assert ask(app, "is-clinic-opened", {}).json == {"isOpen": True}


def test_odd_and_even_iso_weeks_at_a_53_week_year_boundary(app, clock):
    # 2026 has 53 ISO weeks: Mon 2026-12-28 is week 53 (odd), Mon 2027-01-04 is week 1
    # (odd again), Mon 2027-01-11 is week 2 (even). Mon 2026-12-21 is week 52 (even).
    load(
        organization(
            clinic(
                officeHours=[
                    {"weekday": "mon", "opens": "08:00", "closes": "12:00", "weeks": "odd"},
                    {"weekday": "mon", "opens": "13:00", "closes": "17:00", "weeks": "even"},
                ]
            )
        )
    )
    expectations = {
        "2026-12-21": (False, True),
        "2026-12-28": (True, False),
        "2027-01-04": (True, False),
        "2027-01-11": (False, True),
    }
    for day, (morning, afternoon) in expectations.items():
        clock.set(at(f"{day}T09:00"))
        assert ask(app, "is-clinic-opened").json["isOpen"] is morning, day
        clock.set(at(f"{day}T14:00"))
        assert ask(app, "is-clinic-opened").json["isOpen"] is afternoon, day


def test_week_parity_is_read_in_the_clinic_timezone_not_utc(app, clock):
    # Sunday 2027-01-10 23:30 UTC is already Monday 2027-01-11 (week 2, even) in Tokyo,
    # while in UTC it is still Sunday of week 1.
    tokyo = ZoneInfo("Asia/Tokyo")
    load(
        organization(
            clinic(
                tz="Asia/Tokyo",
                country="JP",
                officeHours=[{"weekday": "mon", "opens": "08:00", "closes": "12:00", "weeks": "even"}],
            )
        )
    )
    clock.set(datetime(2027, 1, 10, 23, 30, tzinfo=UTC))
    assert at("2027-01-11T08:30", tokyo) == clock.now
    assert ask(app, "is-clinic-opened").json == {"isOpen": True}


@pytest.mark.parametrize("server", ["Pacific/Kiritimati", "Pacific/Pago_Pago", "UTC"])
def test_clinic_far_from_the_server_timezone(app, clock, server_tz, server):
    la = ZoneInfo("America/Los_Angeles")
    server_tz(server)
    load(
        organization(
            clinic(
                tz="America/Los_Angeles",
                country="US",
                officeHours=[{"weekday": "wed", "opens": "09:00", "closes": "17:00"}],
            )
        )
    )
    clock.set(at("2026-11-18T09:30", la))
    assert ask(app, "is-clinic-opened").json == {"isOpen": True}
    clock.set(at("2026-11-18T08:30", la))
    assert ask(app, "is-clinic-opened").json == {"isOpen": False}


@pytest.mark.parametrize(
    "day, utc_open, utc_before",
    [
        # Spring forward (CET -> CEST): 08:00 local is 06:00 UTC.
        ("2026-03-29", "2026-03-29T06:00", "2026-03-29T05:59"),
        # Fall back (CEST -> CET): 08:00 local is 07:00 UTC.
        ("2026-10-25", "2026-10-25T07:00", "2026-10-25T06:59"),
    ],
)
def test_dst_change_days_keep_local_wall_clock_hours(app, clock, day, utc_open, utc_before):
    load(organization(clinic(officeHours=[{"weekday": "sun", "opens": "08:00", "closes": "12:00"}])))
    clock.set(datetime.fromisoformat(utc_before).replace(tzinfo=UTC))
    assert ask(app, "is-clinic-opened").json == {"isOpen": False}
    clock.set(datetime.fromisoformat(utc_open).replace(tzinfo=UTC))
    assert ask(app, "is-clinic-opened").json == {"isOpen": True}


def test_interval_past_midnight_belongs_to_the_day_it_opened(app, clock):
    load(organization(clinic(officeHours=[{"weekday": "fri", "opens": "22:00", "closes": "02:00", "weeks": "odd"}])))
    # Fri 2026-11-20 is in ISO week 47 (odd); Fri 2026-11-27 in week 48 (even).
    for local, expected in [
        ("2026-11-20T23:00", True),
        ("2026-11-21T01:30", True),
        ("2026-11-21T02:00", False),
        ("2026-11-28T01:00", False),
        ("2026-11-27T23:00", False),
    ]:
        clock.set(at(local))
        assert ask(app, "is-clinic-opened").json["isOpen"] is expected, local


def test_clinic_without_office_hours_is_closed(app, clock):
    load(organization(clinic()))
    assert ask(app, "is-clinic-opened").json == {"isOpen": False}


# --- is-on-vacation -----------------------------------------------------------------


def _vacation_clinic(**extra):
    return clinic(
        calendars=[
            {
                "name": "Doctor",
                "vacations": [
                    {"name": "Ski", "start": "2026-12-01", "end": "2026-12-05"},
                    {"name": "Course", "start": "2026-12-10T09:00:00+01:00", "end": "2026-12-10T12:00:00+01:00"},
                    {"name": "Desk only", "start": "2026-12-15", "end": "2026-12-16", "switchboard": False},
                ],
            },
            {"name": "Nurse", "ignoreHolidays": True},
        ],
        **extra,
    )


def _calendar_id(name: str, slug: str = "clinic-a") -> str:
    return str(stable_id("calendar", slug, name))


def test_active_vacation_counts_for_all_calendars_and_only_for_its_own(app, clock):
    load(organization(_vacation_clinic()))
    clock.set(at("2026-12-03T10:00"))
    assert ask(app, "is-on-vacation", {}).json == {"isOnVacation": True}
    assert ask(app, "is-on-vacation").json == {"isOnVacation": True}
    assert ask(app, "is-on-vacation", {"calendarIds": [_calendar_id("Doctor")]}).json == {"isOnVacation": True}
    assert ask(app, "is-on-vacation", {"calendarIds": [_calendar_id("Nurse")]}).json == {"isOnVacation": False}


def test_vacation_boundaries_in_clinic_time(app, clock):
    load(organization(_vacation_clinic()))
    # Whole days: start at local midnight, the end date is inclusive.
    for local, expected in [
        ("2026-11-30T23:59", False),
        ("2026-12-01T00:00", True),
        ("2026-12-05T23:59", True),
        ("2026-12-06T00:00", False),
        # Exact instants: end exclusive.
        ("2026-12-10T08:59", False),
        ("2026-12-10T09:00", True),
        ("2026-12-10T12:00", False),
    ]:
        clock.set(at(local))
        assert ask(app, "is-on-vacation", {}).json["isOnVacation"] is expected, local


def test_vacation_not_applying_to_switchboard_is_ignored(app, clock):
    load(organization(_vacation_clinic()))
    clock.set(at("2026-12-15T10:00"))
    assert ask(app, "is-on-vacation", {}).json == {"isOnVacation": False}


def test_national_holiday_of_the_clinic_country(app, clock):
    # 28 October: Czech Independent State Day. Not a holiday in Germany.
    load(organization(_vacation_clinic(), clinic("clinic-de", tz="Europe/Berlin", country="DE")))
    clock.set(at("2026-10-28T10:00"))
    assert ask(app, "is-on-vacation", {}).json == {"isOnVacation": True}
    assert ask(app, "is-on-vacation", {}, slug="clinic-de").json == {"isOnVacation": False}
    clock.set(at("2026-10-27T10:00"))
    assert ask(app, "is-on-vacation", {}).json == {"isOnVacation": False}


def test_holiday_is_read_in_the_clinic_local_date(app, clock):
    # 2026-10-27 23:30 UTC is already 28 October in Prague.
    load(organization(_vacation_clinic()))
    clock.set(datetime(2026, 10, 27, 23, 30, tzinfo=UTC))
    assert ask(app, "is-on-vacation", {}).json == {"isOnVacation": True}


def test_calendar_that_ignores_holidays(app, clock):
    load(organization(_vacation_clinic()))
    clock.set(at("2026-10-28T10:00"))
    # Only the nurse calendar is relevant and it ignores holidays.
    assert ask(app, "is-on-vacation", {"calendarIds": [_calendar_id("Nurse")]}).json == {"isOnVacation": False}
    # One relevant calendar that does not ignore holidays is enough.
    both = [_calendar_id("Nurse"), _calendar_id("Doctor")]
    assert ask(app, "is-on-vacation", {"calendarIds": both}).json == {"isOnVacation": True}


def test_every_calendar_ignoring_holidays(app, clock):
    load(organization(clinic(calendars=[{"name": "A", "ignoreHolidays": True}, {"name": "B", "ignoreHolidays": True}])))
    clock.set(at("2026-12-24T10:00"))
    assert ask(app, "is-on-vacation", {}).json == {"isOnVacation": False}


def test_clinic_without_calendars_follows_public_holidays(app, clock):
    load(organization(clinic()))
    clock.set(at("2026-12-24T10:00"))
    assert ask(app, "is-on-vacation", {}).json == {"isOnVacation": True}


@pytest.mark.parametrize("ids", [["not-a-uuid"], "abc", [1], [None]])
def test_malformed_calendar_ids_are_400(app, ids):
    load(organization(_vacation_clinic()))
    answer = ask(app, "is-on-vacation", {"calendarIds": ids}, status=400).json
    assert answer["code"] == "VALIDATION_FAILED" and answer["error"].startswith("calendarIds")


def test_calendar_ids_of_another_clinic_or_deleted_count_as_calendars_without_vacations(app, clock):
    """A flow set up with a calendar id that was deleted since (or another clinic's) gets an
    answer, not a 400 on every call: that id has no vacations; the others still count."""
    load(
        organization(
            _vacation_clinic(),
            clinic(
                "clinic-b",
                calendars=[
                    {"name": "Other", "vacations": [{"name": "Away", "start": "2026-11-30", "end": "2026-12-06"}]}
                ],
            ),
        )
    )
    foreign, deleted = _calendar_id("Other", "clinic-b"), str(uuid.uuid4())
    clock.set(at("2026-12-03T10:00"))  # the Doctor's ski week, and clinic-b's Other is away too
    for stray in (foreign, deleted):
        assert ask(app, "is-on-vacation", {"calendarIds": [_calendar_id("Doctor"), stray]}).json == {
            "isOnVacation": True
        }
        assert ask(app, "is-on-vacation", {"calendarIds": [stray]}).json == {"isOnVacation": False}
        assert ask(app, "is-on-vacation", {"calendarIds": [_calendar_id("Nurse"), stray]}).json == {
            "isOnVacation": False
        }
    # Unknown ids are calendars without vacations that do not ignore holidays: Christmas Eve counts.
    clock.set(at("2026-12-24T10:00"))
    assert ask(app, "is-on-vacation", {"calendarIds": [deleted]}).json == {"isOnVacation": True}
    assert ask(app, "is-on-vacation", {"calendarIds": [_calendar_id("Nurse")]}).json == {"isOnVacation": False}


# --- has-active-request -------------------------------------------------------------


def _with_patient(phone: str = "+420601123456", **extra):
    load(
        organization(
            clinic(),
            clinic("clinic-b"),
            patients=[
                {
                    "key": "p1",
                    "firstName": "Jana",
                    "phone": phone,
                    "records": [{"clinic": "clinic-a"}, {"clinic": "clinic-b"}],
                },
                {"key": "p1-old", "phone": "+420777000111", "mergedInto": "p1", "records": [{"clinic": "clinic-a"}]},
            ],
            **extra,
        )
    )
    return stable_id("patient", "test-org", "p1")


def _open_request(patient_id, slug: str = "clinic-a", done: bool = False):
    with db.connection_context():
        clinic_row = Clinic.get(Clinic.slug == slug)
        return PatientRequest.create(
            clinic=clinic_row, patient=patient_id, title="t", done_at=utc_now() if done else None
        )


@pytest.mark.parametrize(
    "written",
    [
        "+420601123456",
        "+420 601 123 456",
        "601 123 456",
        "601123456",
        "00420 601 123 456",
        "00420601123456",
        "+420-601-123-456",
        "(+420) 601 123 456",
    ],
)
def test_caller_number_in_any_common_format(app, written):
    _open_request(_with_patient())
    assert ask(app, "has-active-request", {"callFrom": written}).json == {"hasActiveRequest": True}


def test_only_open_requests_count(app):
    pid = _with_patient()
    _open_request(pid, done=True)
    assert ask(app, "has-active-request", {"callFrom": "+420601123456"}).json == {"hasActiveRequest": False}
    _open_request(pid)
    assert ask(app, "has-active-request", {"callFrom": "+420601123456"}).json == {"hasActiveRequest": True}


def test_resolving_by_patch_ends_the_active_request_and_reopening_brings_it_back(app):
    """PATCH `done`: the switchboard's very next check follows, both ways."""
    request = _open_request(_with_patient())
    token = issue_token(["clinic-a"], ["read", "write"])
    url = f"/external/v1/clinics/clinic-a/patientRequests/{request.id}"
    assert ask(app, "has-active-request", {"callFrom": "+420601123456"}).json == {"hasActiveRequest": True}
    resolved = app.patch_json(url, {"done": True}, headers=bearer(token)).json["data"]
    assert resolved["doneAt"] is not None
    assert ask(app, "has-active-request", {"callFrom": "+420601123456"}).json == {"hasActiveRequest": False}
    again = app.patch_json(url, {"done": True}, headers=bearer(token)).json["data"]
    assert again["doneAt"] == resolved["doneAt"], "a second resolve keeps the first one's time"
    assert app.patch_json(url, {"done": False}, headers=bearer(token)).json["data"]["doneAt"] is None
    assert ask(app, "has-active-request", {"callFrom": "+420601123456"}).json == {"hasActiveRequest": True}
    app.patch_json(url, {"done": "yes"}, headers=bearer(token), status=400)


def test_only_this_clinics_requests_count(app):
    _open_request(_with_patient(), slug="clinic-b")
    assert ask(app, "has-active-request", {"callFrom": "+420601123456"}).json == {"hasActiveRequest": False}
    assert ask(app, "has-active-request", {"callFrom": "+420601123456"}, slug="clinic-b").json == {
        "hasActiveRequest": True
    }


def test_by_patient_id(app):
    pid = _with_patient()
    assert ask(app, "has-active-request", {"patientId": str(pid)}).json == {"hasActiveRequest": False}
    _open_request(pid)
    assert ask(app, "has-active-request", {"patientId": str(pid)}).json == {"hasActiveRequest": True}
    assert ask(app, "has-active-request", {"patientId": str(uuid.uuid4())}).json == {"hasActiveRequest": False}


def test_either_field_may_match(app):
    pid = _with_patient()
    _open_request(pid)
    body = {"callFrom": "+420 700 000 000", "patientId": str(pid)}
    assert ask(app, "has-active-request", body).json == {"hasActiveRequest": True}


def test_merged_patient_number_finds_the_survivors_request(app):
    _open_request(_with_patient())
    assert ask(app, "has-active-request", {"callFrom": "777 000 111"}).json == {"hasActiveRequest": True}


def test_unknown_caller_has_no_request(app):
    _with_patient()
    assert ask(app, "has-active-request", {"callFrom": "+44 20 7946 0958"}).json == {"hasActiveRequest": False}


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "body"),
        ({"patientId": "42"}, "patientId"),
        ({"patientId": 42}, "patientId"),
        ({"callFrom": ["+420601123456"]}, "callFrom"),
    ],
)
def test_bad_has_active_request_bodies_are_400(app, body, field):
    _with_patient()
    answer = ask(app, "has-active-request", body, status=400).json
    assert answer["code"] == "VALIDATION_FAILED"
    assert answer["error"].startswith(field)


@pytest.mark.parametrize(
    "withheld", ["", "anonymous", "Anonymous", "unknown", "private", None, "hello", "+", "x" * 5000]
)
def test_a_caller_number_that_is_no_number_is_answered_not_refused(app, withheld):
    """Success is always 200: a withheld or unparseable callFrom matches no patient, so the
    answer is false, or the patientId's answer when that is sent too."""
    pid = _with_patient()
    _open_request(pid)
    assert ask(app, "has-active-request", {"callFrom": withheld}).json == {"hasActiveRequest": False}
    both = {"callFrom": withheld, "patientId": str(pid)}
    assert ask(app, "has-active-request", both).json == {"hasActiveRequest": True}


def test_a_caller_number_sent_as_a_json_number_is_read_as_one(app):
    _open_request(_with_patient())
    assert ask(app, "has-active-request", {"callFrom": 420601123456}).json == {"hasActiveRequest": True}
    assert ask(app, "has-active-request", {"callFrom": 601123456}).json == {"hasActiveRequest": True}


# --- the fast paths answer exactly as the database does ------------------------


def test_the_schedule_is_read_once_and_a_change_is_answered_at_once(app, clock, monkeypatch):
    """Office hours and vacations come from the per-process cache (no query per call)
    and a committed change is seen by the next check (NOTIFY, within a bounded wait)."""
    load(organization(_vacation_clinic(officeHours=[{"weekday": "wed", "opens": "08:00", "closes": "16:00"}])))
    clock.set(at("2026-11-18T10:00"))  # a Wednesday, no vacation, no holiday
    reads = []
    real_read = schedules.read_schedule
    monkeypatch.setattr(schedules, "read_schedule", lambda clinic_id: reads.append(clinic_id) or real_read(clinic_id))
    token = issue_token(["clinic-a"], ["read"])
    # The cache listens from the first request on (in the background), and once it has
    # counted this test's own setup (which may still be on its way to it) no more reads.
    assert wait_until(
        lambda: (
            ask(app, "is-clinic-opened", token=token).json == {"isOpen": True}
            and caught_up(app)
            and len(reads) == len((ask(app, "is-on-vacation", {}, token=token), reads)[1])
        ),
        timeout=10,
    )
    before = len(reads)
    for _ in range(5):
        assert ask(app, "is-clinic-opened", token=token).json == {"isOpen": True}
        assert ask(app, "is-on-vacation", {}, token=token).json == {"isOnVacation": False}
    assert len(reads) == before, "the schedule was read again without a change"

    with db.connection_context():
        clinic_row = Clinic.get(Clinic.slug == "clinic-a")
        OfficeHours.update(closes=dt_time(9, 0)).where(OfficeHours.clinic == clinic_row).execute()
        Vacation.create(
            calendar=uuid.UUID(_calendar_id("Doctor")),
            name="Sick",
            starts_at=datetime(2026, 11, 18),
            ends_at=datetime(2026, 11, 19),
        )
    assert wait_until(lambda: ask(app, "is-clinic-opened", token=token).json == {"isOpen": False}, timeout=2)
    assert wait_until(lambda: ask(app, "is-on-vacation", {}, token=token).json == {"isOnVacation": True}, timeout=2)


TIMEZONES = ["Europe/Prague", "America/New_York", "Pacific/Kiritimati", "UTC"]
COUNTRIES = ["CZ", "SK", "US", "DE"]
CALLER_NUMBERS = ["+420601123456", "+420777000111"]
WRITTEN = ["{e164}", "{spaced}", "00{digits}", "{national}", "({cc}) {national}"]

interval = st.tuples(
    st.integers(1, 7), st.integers(0, 47), st.integers(0, 47), st.sampled_from(["every", "odd", "even"])
)
# (calendar, start in hours from now, length in hours, applies to the switchboard, which
# edge, if any, falls exactly on now: the boundaries are where two readings would differ)
vacation = st.tuples(
    st.integers(0, 2),
    st.integers(-800, 800),
    st.integers(0, 400),
    st.booleans(),
    st.sampled_from([None, "starts", "ends"]),
)
patient = st.tuples(
    st.sampled_from([*CALLER_NUMBERS, None]),
    st.one_of(st.none(), st.integers(0, 3)),
    st.lists(st.tuples(st.sampled_from(["clinic-a", "clinic-b"]), st.booleans()), max_size=2),
)


def _written(e164: str, form: str) -> str:
    number = phonenumbers.parse(e164)
    national = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.NATIONAL)
    spaced = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
    return form.format(e164=e164, spaced=spaced, digits=e164[1:], national=national, cc=f"+{number.country_code}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tz=st.sampled_from(TIMEZONES),
    country=st.sampled_from(COUNTRIES),
    hours=st.lists(interval, max_size=6),
    calendars=st.lists(st.booleans(), max_size=3),
    vacations=st.lists(vacation, max_size=5),
    wanted=st.one_of(st.none(), st.sets(st.integers(0, 2))),
    minutes=st.integers(0, 2 * 366 * 24 * 60),
    patients=st.lists(patient, max_size=4),
    caller=st.tuples(
        st.one_of(st.none(), st.sampled_from(CALLER_NUMBERS)),
        st.sampled_from(WRITTEN),
        st.one_of(st.none(), st.integers(0, 4)),
    ),
)
def test_fast_paths_agree_with_the_database_on_random_clinics(
    two_clinics, tz, country, hours, calendars, vacations, wanted, minutes, patients, caller
):
    """The cached schedule, the one-query active-request check and the open callers held
    in memory against the plain ORM reading of the same rows: office hours, calendars, vacations, holidays, time
    zones, merge chains (cycles included) and caller number formats."""
    now = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes, microseconds=minutes % 7)
    with db.connection_context(), db.atomic():
        for model in (PatientRequest, Patient, Vacation, Calendar, OfficeHours):
            model.delete().execute()
        Clinic.update(timezone=tz, country=country).where(Clinic.slug.in_(["clinic-a", "clinic-b"])).execute()
        home, other = Clinic.get(Clinic.slug == "clinic-a"), Clinic.get(Clinic.slug == "clinic-b")
        for weekday, opens, closes, weeks in hours:
            OfficeHours.create(
                clinic=home,
                weekday=weekday,
                opens=dt_time(opens // 2, 30 * (opens % 2)),
                closes=dt_time(closes // 2, 30 * (closes % 2)),
                weeks=weeks,
            )
        rows = [
            Calendar.create(clinic=home, name=f"c{i}", ignore_holidays=ignore) for i, ignore in enumerate(calendars)
        ]
        for index, start, length, applies, edge in vacations:
            if index < len(rows):
                start = {"starts": 0, "ends": -length}.get(edge, start)
                starts = as_utc(now) + timedelta(hours=start)
                Vacation.create(
                    calendar=rows[index],
                    starts_at=starts,
                    ends_at=starts + timedelta(hours=length),
                    applies_to_switchboard=applies,
                )
        people = [Patient.create(organization=home.organization_id, phone=phone) for phone, _, _ in patients]
        for person, (_, merged, requests) in zip(people, patients):
            if merged is not None and merged < len(people):
                Patient.update(merged_into=people[merged]).where(Patient.id == person.id).execute()
            for slug, done in requests:
                PatientRequest.create(
                    clinic=home if slug == "clinic-a" else other,
                    patient=person,
                    title="t",
                    done_at=as_utc(now) if done else None,
                )

    with db.connection_context():
        home = Clinic.get(Clinic.slug == "clinic-a")
        schedule = schedules.read_schedule(home.id)
        assert is_open(schedule.office_hours, tz, now) == is_open(list(home.office_hours), tz, now)
        ids = None if wanted is None else frozenset(rows[i].id for i in wanted if i < len(rows))
        plain_calendars = [c for c in home.calendars if ids is None or c.id in ids]
        assert on_vacation(home, schedule, ids, now) == _plain_on_vacation(home, plain_calendars, now)

        number, form, pick = caller
        phone = to_e164(_written(number, form), home.country) if number else None
        patient_id = (
            people[pick].id if pick is not None and pick < len(people) else uuid.uuid4() if pick is not None else None
        )
        plain_ids = (Patient.ids_with_phone(home.organization_id, phone) if phone else []) + (
            [patient_id] if patient_id else []
        )
        plain = _plain_open_for(home, Patient.with_survivors(plain_ids))
        assert PatientRequest.open_for_caller(home, phone, patient_id) == plain
        held = PatientRequest.open_callers(home, keep=1000)  # has-active-request's memory
        assert held is not None and held.has(phone, patient_id) == plain


def _plain_on_vacation(home: Clinic, calendars: list[Calendar], now: datetime) -> bool:
    """The vacation check read straight from the database with the ORM: the reference the
    cached schedule's answers are held to."""
    active = (
        bool(calendars)
        and Vacation.select()
        .where(
            Vacation.calendar.in_(calendars)
            & Vacation.applies_to_switchboard
            & (Vacation.starts_at <= as_utc(now))
            & (Vacation.ends_at > as_utc(now))
        )
        .exists()
    )
    return decide(home, calendars, active, now)


def _plain_open_for(home: Clinic, patient_ids: list[uuid.UUID]) -> bool:
    """Open requests of the clinic for these patients, with the ORM: the reference of the CTE."""
    return (
        bool(patient_ids)
        and PatientRequest.select()
        .where(
            (PatientRequest.clinic == home) & PatientRequest.patient.in_(patient_ids) & PatientRequest.done_at.is_null()
        )
        .exists()
    )


def test_has_active_request_is_planned_once_per_connection_and_survives_a_lost_statement(app, monkeypatch):
    """The recursive query runs as a prepared statement (its planning cost more than its
    work); a session that lost it (a pooler handing us another one) answers the same,
    through the plain query, and prepares it again."""
    from plumbing import database

    monkeypatch.setattr(database, "_prepare_failures", 0)
    _open_request(_with_patient())

    def prepared() -> int:
        return db.execute_sql("SELECT count(*) FROM pg_prepared_statements WHERE name = 'open_for_caller'").fetchone()[
            0
        ]

    with db.connection_context():
        home = Clinic.get(Clinic.slug == "clinic-a")
        assert PatientRequest.open_for_caller(home, "+420601123456", None) is True
        assert prepared() == 1
        db.execute_sql("DEALLOCATE open_for_caller")
        assert PatientRequest.open_for_caller(home, "+420601123456", None) is True
        assert database._prepare_failures == 1
        assert PatientRequest.open_for_caller(home, "+420777000111", None) is True  # the merged patient's number
        assert prepared() == 1
        assert PatientRequest.open_for_caller(home, "+420601999999", None) is False
