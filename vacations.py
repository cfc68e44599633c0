"""Is the clinic on vacation? Switchboard vacations of its calendars, and public holidays."""
from __future__ import annotations

from datetime import date, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

import holidays

from clock import as_utc

from models import Calendar, Clinic, Vacation


@lru_cache(maxsize=256)
def _holidays(country: str, subdivision: str | None, year: int) -> holidays.HolidayBase:
    return holidays.country_holidays(country, subdiv=subdivision, years=year)


def is_public_holiday(country: str, subdivision: str | None, day: date) -> bool:
    return day in _holidays(country, subdivision, day.year)


def is_on_vacation(clinic: Clinic, calendars: list[Calendar], now: datetime) -> bool:
    """True for an active switchboard vacation in `calendars`, or a public holiday today.

    Holidays count unless there is at least one relevant calendar and every one of
    them ignores holidays; a clinic without calendars follows the public holidays.
    """
    if calendars:
        moment = as_utc(now)
        active = Vacation.select().where(
            Vacation.calendar.in_(calendars)
            & Vacation.applies_to_switchboard
            & (Vacation.starts_at <= moment)
            & (Vacation.ends_at > moment)
        )
        if active.exists():
            return True
        if all(c.ignore_holidays for c in calendars):
            return False
    local_day = now.astimezone(ZoneInfo(clinic.timezone)).date()
    return is_public_holiday(clinic.country, clinic.subdivision, local_day)
