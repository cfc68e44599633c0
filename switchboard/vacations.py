"""Is the clinic on vacation? Switchboard vacations of its calendars, and public holidays."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Protocol
from zoneinfo import ZoneInfo

import holidays

from models import Clinic
from switchboard.schedules import Schedule


@lru_cache(maxsize=256)
def _holidays(country: str, subdivision: str | None, year: int) -> holidays.HolidayBase:
    return holidays.country_holidays(country, subdiv=subdivision, years=year)


@lru_cache(maxsize=4096)
def is_public_holiday(country: str, subdivision: str | None, day: date) -> bool:
    # Cached per day as well: `day in HolidayBase` normalizes its key on every lookup.
    return day in _holidays(country, subdivision, day.year)


class _IgnoresHolidays(Protocol):
    @property
    def ignore_holidays(self) -> bool: ...


def decide(clinic: Clinic, calendars: Sequence[_IgnoresHolidays], vacation_now: bool, now: datetime) -> bool:
    """The rule, given whether one of the relevant `calendars` has a switchboard vacation
    at `now`: that vacation, or a public holiday today unless every relevant calendar
    ignores holidays; a clinic without calendars follows the public holidays."""
    if calendars:
        if vacation_now:
            return True
        if all(c.ignore_holidays for c in calendars):
            return False
    local_day = now.astimezone(ZoneInfo(clinic.timezone)).date()
    return is_public_holiday(clinic.country, clinic.subdivision, local_day)


def on_vacation(clinic: Clinic, schedule: Schedule, calendar_ids: frozenset[uuid.UUID] | None, now: datetime) -> bool:
    """Whether the clinic is on vacation, from its schedule (schedules.py), for the
    calendars `calendar_ids` (None: all of the clinic's)."""
    calendars = [c for c in schedule.calendars if calendar_ids is None or c.id in calendar_ids]
    active = bool(calendars) and schedule.on_vacation_calendars(frozenset(c.id for c in calendars), now)
    return decide(clinic, calendars, active, now)


def coming_holidays(
    country: str, subdivision: str | None, today: date, language: str | None = None, days: int = 366
) -> list[tuple[date, str]]:
    """The public holidays of `country` (and `subdivision`) from `today` on, for `days`
    days, named in `language` where the package has it: what the settings page shows
    beside the clinic's vacations."""
    end = today + timedelta(days=days)
    found = holidays.country_holidays(
        country, subdiv=subdivision, years=range(today.year, end.year + 1), language=language
    )
    return sorted((day, name) for day, name in found.items() if today <= day < end)
