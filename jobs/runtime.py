"""What a job needs from its process, built once by the worker's start (`start`): the
worker's configuration, its metrics recorder, a Redis client, its transcribers, the
database bound; and
whether the process is stopping, so that a long job stops at a checkpoint in time.

RQ calls a job with its arguments only (primary keys); the job reads this context once, at
its top, and hands what it needs onward as arguments: the job's counterpart of a web
request's `req.context`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import redis

from config import Config
from jobs import queueing
from plumbing.database import bind_database, db
from plumbing.metrics import Recorder

if TYPE_CHECKING:
    from notices.mail import Sender
    from voicemail import transcription


@dataclass(frozen=True)
class JobContext:
    config: Config
    #: The worker's metrics buffer: the jobs count into it, the worker flushes it after each
    #: job (jobs/metrics.py) and the purge thread after each round.
    recorder: Recorder
    #: The jobs' own Redis client (the platform client's link cache); the worker's queues
    #: have theirs.
    redis: redis.Redis

    def transcriber(self, model: str) -> transcription.Transcriber:
        """The worker's transcriber of `model`, with the configured engine, threads and VAD:
        loaded and warmed by the worker's start; a model first asked for by a job is loaded
        then, once per process (transcription's registry holds the loaded models, and frees
        them before the process exits)."""
        # Imported here: the playback worker and the web (which read this module) never
        # transcribe, and need not load the engine's libraries.
        from voicemail import transcription

        c = self.config
        return transcription.get_transcriber(c.transcriber, model, c.whisper_threads, c.whisper_vad)

    @cached_property
    def mail(self) -> Sender:
        """The e-mails' templates and settings, loaded once per process, when first needed."""
        from notices.mail import Sender

        return Sender.build(self.config)

    @classmethod
    def build(cls, config: Config) -> JobContext:
        return cls(config, Recorder(), queueing.redis_client(config.redis_url, "job"))


_context: JobContext | None = None
_lock = threading.Lock()


def start(context: JobContext) -> None:
    """Give this process's jobs the context the worker's start built (the environment is
    read once per process)."""
    global _context
    with _lock:
        _context = context


def forget() -> None:
    """No context any more (a test that ran jobs in its own process ends)."""
    global _context
    with _lock:
        _context = None


def context() -> JobContext:
    """The context the worker's start gave (one built from the environment when no worker
    started: a job run by hand); binds the database unless the process has (manage.py
    does, before the relay starts). Rebinding would swap `db.obj` under the relay thread
    while it is inside `db.connection_context()`, whose exit then fails (IndexError)."""
    global _context
    with _lock:
        if _context is None:
            _context = JobContext.build(Config.from_env())
        if db.obj is None:
            bind_database(_context.config.database_url, pooled=False)
        return _context


# --- stopping: the platform's SIGTERM, and the grace it leaves (WORKER_STOP_SECONDS) ---------

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
