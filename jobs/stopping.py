"""Whether this worker process was asked to stop (the platform's SIGTERM), and when: a
long job stops at its next checkpoint and hands itself back in time, and the stop's
grace (WORKER_STOP_SECONDS) counts from the signal.

Process state, written by a signal handler: no lock is waited for here (`request_stop`
says why)."""

from __future__ import annotations

import threading
import time

_stop_asked: float | None = None  # time.monotonic() of the first stop request
#: Held from the first stop request on: taken without waiting, so that exactly one caller
#: records the stop. No lock is waited for here: a signal handler calls this, and a second
#: signal can interrupt the first call on the same thread (a platform's SIGTERM to every
#: process and the parent's own, a moment apart); waiting there on a lock the interrupted
#: call holds hung the process for good, its stop never recorded, its watchdog never started.
_stop_latch = threading.Lock()


def request_stop() -> bool:
    """The process is asked to stop (a signal handler calls this). The first call records
    when (True); later ones change nothing (False), a call nested in a signal handler
    during the first included."""
    global _stop_asked
    if not _stop_latch.acquire(blocking=False):
        return False
    _stop_asked = time.monotonic()
    return True


def stop_asked_at() -> float | None:
    """`time.monotonic()` of the first stop request, where the stop's grace starts (None:
    no stop asked)."""
    return _stop_asked


def stopping() -> bool:
    """Whether this process was asked to stop: a job stops at its next checkpoint (a
    transcription's abort callback) and gives its work back. At once, not at the grace's
    end: a checkpoint may be seconds away (an encoder pass on a busy CPU), and what
    follows (handing the job back, the worker's and its children's exit) needs time too."""
    return _stop_asked is not None


def forget_stop() -> None:
    """No stop asked any more (the worker that was asked has stopped; a process running
    workers one after another, as the tests do, starts the next one afresh)."""
    global _stop_asked, _stop_latch
    _stop_asked = None
    _stop_latch = threading.Lock()
