"""A clinic's routing schedule: office hours, calendars and switchboard vacations, read
once per process and kept until the database says they changed.

`is-clinic-opened` and `is-on-vacation` are asked while a caller waits, for every call,
and the answer depends on rows that change a few times a year. Reading them from
PostgreSQL per request cost more CPU (Peewee building the queries, two or three round
trips) than everything else the check does. So the schedule rides the per-process
cache of the token rows (plumbing/row_cache.py): the same NOTIFY triggers (migration 8 adds
`office_hours`, `calendar` and `vacation` to the tables that announce changes) empty it
within a millisecond of a commit, and without a listening connection nothing is cached.

The rules themselves stay in `office_hours` and `vacations`; `tests/test_switchboard_checks.py`
checks that answers from a cached schedule equal the answers read straight from the
database, on randomized clinics.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from models import Calendar, Clinic, OfficeHours, Vacation
from plumbing.clock import as_utc
from plumbing.row_cache import RowCache
from switchboard.office_hours import Interval, is_open


class CalendarFacts(NamedTuple):
    id: uuid.UUID
    ignore_holidays: bool


class SwitchboardVacation(NamedTuple):
    calendar_id: uuid.UUID
    starts_at: datetime  # naive UTC, inclusive
    ends_at: datetime  # naive UTC, exclusive


@dataclass(frozen=True)
class Schedule:
    office_hours: tuple[Interval, ...]
    calendars: tuple[CalendarFacts, ...]
    vacations: tuple[SwitchboardVacation, ...]  # those that apply to the switchboard

    def on_vacation_calendars(self, calendar_ids: frozenset[uuid.UUID], now: datetime) -> bool:
        """Whether one of `calendar_ids` has a switchboard vacation at `now` (as the
        vacation query: starts_at <= now < ends_at, in UTC)."""
        moment = as_utc(now)
        return any(v.calendar_id in calendar_ids and v.starts_at <= moment < v.ends_at for v in self.vacations)


def read_schedule(clinic_id: uuid.UUID) -> Schedule:
    """The clinic's schedule from the database (three small queries)."""
    hours = tuple(
        Interval(h.weekday, h.opens, h.closes, h.weeks)
        for h in OfficeHours.select().where(OfficeHours.clinic == clinic_id)
    )
    calendars = tuple(
        CalendarFacts(c.id, c.ignore_holidays)
        for c in Calendar.select(Calendar.id, Calendar.ignore_holidays).where(Calendar.clinic == clinic_id)
    )
    vacations = tuple(
        SwitchboardVacation(v.calendar_id, v.starts_at, v.ends_at)
        for v in Vacation.select(Vacation.calendar, Vacation.starts_at, Vacation.ends_at)
        .join(Calendar)
        .where((Calendar.clinic == clinic_id) & Vacation.applies_to_switchboard)
    )
    return Schedule(hours, calendars, vacations)


def schedule_of(clinic: Clinic, cache: RowCache | None) -> Schedule:
    """The clinic's schedule, from `cache` when it holds a current one (or, while the
    database is unreachable, the last one known: plumbing/row_cache.py)."""
    if cache is None:
        return read_schedule(clinic.id)
    found = cache.read(("schedule", clinic.id), lambda: (read_schedule(clinic.id),), lookup="schedule")
    assert found is not None  # the load always finds a schedule
    return found[0]


def is_clinic_open(clinic: Clinic, cache: RowCache | None, now: datetime) -> bool:
    """`is-clinic-opened`'s answer at `now`; the console's preview asks this very function."""
    return is_open(schedule_of(clinic, cache).office_hours, clinic.timezone, now)
