"""What wakes this process's relay (jobs/relay.py) out of its wait: a job's end, and an
ingest handed back on an infrastructure error.

A pipe, so that the relay's one `poll` watches it together with its LISTEN connection.
It is opened on first use, not at import: importing the jobs starts nothing (the web
process imports them to enqueue, and never waits on this).
"""

from __future__ import annotations

import contextlib
import os
import threading


class WakeUp:
    """A wake-up a thread can `poll` on (`fileno`): `set` from any thread, `clear` by the
    waiter. One set while the waiter is busy stays pending, so none is lost."""

    def __init__(self) -> None:
        self._fds: tuple[int, int] | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def _pipe(self) -> tuple[int, int]:
        # Per process: a forked child (RQ's scheduler) must not read its parent's wake-ups.
        with self._lock:
            if self._fds is None or self._pid != os.getpid():
                read, write = os.pipe()
                os.set_blocking(read, False)
                os.set_blocking(write, False)
                self._fds, self._pid = (read, write), os.getpid()
            return self._fds

    def fileno(self) -> int:
        return self._pipe()[0]

    def set(self) -> None:
        with contextlib.suppress(BlockingIOError):  # the pipe is full: wake-ups are pending anyway
            os.write(self._pipe()[1], b"\0")

    def clear(self) -> None:
        try:
            while os.read(self._pipe()[0], 4096):
                pass
        except BlockingIOError:
            pass


WAKE_UP = WakeUp()
_deferred = threading.Event()


def job_ended() -> None:
    """Wake this process's relay: a call may have left flight, so its clinic's next one
    can be queued (the fair share). Cheap, and harmless in a process without a relay."""
    WAKE_UP.set()


def ingest_deferred() -> None:
    """An ingest gave its call back on an infrastructure error (the database or Redis
    unreachable): the relay queues it again as soon as both answer, rather than at its
    next periodic sweep."""
    _deferred.set()
    WAKE_UP.set()


def take_deferred() -> bool:
    """Whether an ingest was handed back since the last call (and forget it)."""
    if _deferred.is_set():
        _deferred.clear()
        return True
    return False
