"""The clock tests and benchmarks hand to the service (`Config(clock=...)`) and move."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.context import JobContext

#: Where the tests' wall clock starts: a Wednesday, 10:00 UTC.
WEDNESDAY = datetime(2026, 11, 18, 10, 0, tzinfo=UTC)


class Clock:
    """A clock moved instead of slept on. `clock()` answers `now`: by default a settable
    aware datetime (`set()`), or any value moved by hand (`Clock(1000.0)`: seconds, for
    a monotonic clock, `clock.now += 59`). `Clock(now=None)` follows the real UTC time
    instead, shifted by `offset`."""

    def __init__(self, now: Any = WEDNESDAY) -> None:
        self.now = now
        self.offset = timedelta(0)

    def __call__(self) -> Any:
        if self.now is None:
            return datetime.now(UTC) + self.offset
        return self.now

    def set(self, value: datetime) -> None:
        assert value.tzinfo is not None, "tests use aware datetimes"
        self.now = value


def claimed_now() -> datetime:
    """A `Call.queued_at` for a call a test finishes by hand (`jobs.calls._finish_voicemail`
    with a transcript of its own): the session's RQ worker, once a test started it, relays
    every pending call it sees unclaimed and re-queues claimed ones only a minute after
    their claim by the real clock it reads. Claimed now, the call is the test's."""
    return datetime.now(UTC).replace(tzinfo=None)


@functools.cache
def job_context() -> JobContext:
    """The context the ingest job is handed (`@takes_context`), for a test that finishes a
    call by hand: the session's database and Redis, and the clock the service installed
    (the session's `Config.clock`, which the test moves)."""
    from config import Config
    from jobs.context import JobContext
    from plumbing import clock
    from tests.conftest import PG_URL, REDIS_URL
    from tests.support import SECRET_KEY

    return JobContext.build(Config(database_url=PG_URL, redis_url=REDIS_URL, secret_key=SECRET_KEY, clock=clock.now))
