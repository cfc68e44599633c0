"""The service's one clock and its conventions: times are stored as naive UTC.

`now()` is the aware wall clock (`Config.clock`, replaceable in tests); `utc_now()` the
naive UTC value every DateTimeField stores; `as_utc` and `iso_utc` convert to them.
"""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    """The wall clock, aware (UTC)."""
    return datetime.now(UTC)


def utc_now() -> datetime:
    """Naive UTC, the storage convention of every DateTimeField here."""
    return now().replace(tzinfo=None)


def as_utc(value: datetime) -> datetime:
    """Aware or naive (taken as UTC) -> naive UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def iso_utc(value: datetime | None) -> str | None:
    if value is None:
        return None
    return as_utc(value).isoformat(timespec="milliseconds") + "Z"
