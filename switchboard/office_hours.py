"""Is the clinic open now? Office hours in the clinic's timezone, by ISO week parity."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, time, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class Interval(NamedTuple):
    """One office-hours row, as the schedule keeps it."""

    weekday: int  # ISO 1..7
    opens: time
    closes: time
    weeks: str  # "every" | "odd" | "even"


def week_matches(weeks: str, day: date) -> bool:
    """Week parity is the parity of the ISO week number (week 53 is odd)."""
    if weeks == "every":
        return True
    odd = day.isocalendar().week % 2 == 1
    return odd if weeks == "odd" else not odd


def is_open(intervals: Iterable[Interval], tz: str, now: datetime) -> bool:
    """Whether `now` (aware) falls inside any interval, read in the clinic's local time.

    The local wall clock decides, so a 08:00-16:00 day stays 08:00-16:00 across DST
    changes. An interval whose closing time is not after its opening time runs past
    midnight into the next day; its week parity is that of the day it opened.
    """
    local = now.astimezone(ZoneInfo(tz))
    today, clock = local.date(), local.time().replace(tzinfo=None)
    yesterday = today - timedelta(days=1)
    for iv in intervals:
        overnight = iv.closes <= iv.opens
        opened_today = iv.weekday == today.isoweekday() and week_matches(iv.weeks, today)
        if opened_today and iv.opens <= clock and (overnight or clock < iv.closes):
            return True
        opened_yesterday = overnight and iv.weekday == yesterday.isoweekday() and week_matches(iv.weeks, yesterday)
        if opened_yesterday and clock < iv.closes:
            return True
    return False
