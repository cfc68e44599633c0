"""The service's one clock and its conventions: times are stored as naive UTC.

`Config.clock` is the clock (the wall clock, `wall`, unless a test hands in another), a
`Clock`. Whatever needs the time is handed it by its caller: a resource or a job reads the
clock it was given once and passes that `now` to the writes it makes, which store it.
The entry points also install it here (`use`: `create_app`, `create_worker`, `manage.py`)
for the one thing that has no caller to ask: a column's default, for a row written without
its time (tests/test_layers.py names those defaults and refuses any other read of `now()`
or `utc_now()`). `as_utc` and `iso_utc` convert to the storage and the API conventions.
Nothing else in the service reads the wall clock (tests/test_layers.py holds it), but for
the expiry of presigned storage URLs (storage/), which the bucket checks by its own real
clock, RQ's schedule (jobs/playback.py), which is kept in real time, and the database
pool's connection ages (plumbing/database.py), which Peewee keeps in real time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

#: A clock: called, it says what time it is now (aware, UTC). `Config.clock` is the
#: service's; what needs the time is handed it (or the `now` it read) by its caller.
Clock = Callable[[], datetime]


def wall() -> datetime:
    """The wall clock, aware (UTC): `Config.clock`'s default."""
    return datetime.now(UTC)


_clock: Clock = wall


def use(clock: Clock) -> None:
    """Make `clock` the process's clock (an entry point, once its configuration is built)."""
    global _clock
    _clock = clock


def now() -> datetime:
    """The process's clock, aware (UTC)."""
    return _clock()


def utc_now() -> datetime:
    """Naive UTC, the storage convention of every DateTimeField here."""
    return as_utc(now())


def as_utc(value: datetime) -> datetime:
    """Aware or naive (taken as UTC) -> naive UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def iso_utc(value: datetime | None) -> str | None:
    if value is None:
        return None
    return as_utc(value).isoformat(timespec="milliseconds") + "Z"
