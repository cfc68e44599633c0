"""The service's one clock and its conventions: times are stored as naive UTC.

`Config.clock` is the clock (the wall clock, `wall`, unless a test hands in another). The
entry points install it here once they have built their configuration (`use`: `create_app`,
the worker's start, `manage.py`), so that everything that asks for "now" without being
handed the clock (a model's default, an audit event's time) reads the same one: a test
that moves it moves the whole service. `now()` is that clock, aware; `utc_now()` the naive
UTC value every DateTimeField stores; `as_utc` and `iso_utc` convert to them. Nothing else
in the service reads the wall clock (tests/test_layers.py holds it), but for the expiry of
presigned storage URLs (storage/), which the bucket checks by its own real clock, and RQ's
schedule (jobs/playback.py), which is kept in real time.
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


_clock: Callable[[], datetime] = wall


def use(clock: Callable[[], datetime]) -> None:
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
