"""What a job is handed besides its primary keys: its worker's context, built once by the
worker's start (`worker.create_worker`) and given to every job that asks for it.

RQ stores a job's arguments (primary keys only) and calls its function with them. A job
function marked `@takes_context` is also handed `context=`, the worker's `JobContext`
(its configuration and clock, metrics recorder, Redis client, transcribers, what wakes its
relay): the job's counterpart of a web request's `req.context`. Nothing is read from the
environment or from a module's global; a job run without a worker's context fails loudly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from rq.job import Job

from config import Config
from jobs import queueing
from plumbing.metrics import Recorder
from plumbing.wakeup import WakeUp

if TYPE_CHECKING:
    from notices.mail import Sender
    from voicemail import transcription

F = TypeVar("F", bound=Callable[..., Any])


class RelayWakeUp:
    """What wakes this worker's relay (jobs/relay.py) out of its wait: a job's end (its
    clinic's next call may be queued: the fair share) and an ingest that gave its call
    back on an infrastructure error (queued again as soon as the database and Redis answer,
    not at the next periodic sweep). A pipe, watched in the relay's one `poll` beside its
    LISTEN connection."""

    def __init__(self) -> None:
        self.pipe = WakeUp()
        self._deferred = threading.Event()

    def job_ended(self) -> None:
        self.pipe.set()

    def ingest_deferred(self) -> None:
        self._deferred.set()
        self.pipe.set()

    def take_deferred(self) -> bool:
        """Whether an ingest was handed back since the last call (and forget it)."""
        if self._deferred.is_set():
            self._deferred.clear()
            return True
        return False

    def close(self) -> None:
        self.pipe.close()


@dataclass(frozen=True)
class JobContext:
    config: Config
    #: The worker's metrics buffer: the jobs count into it, the worker flushes it after each
    #: job (jobs/metrics.py) and the purge thread after each round.
    recorder: Recorder
    #: The jobs' own Redis client (the platform client's link cache); the worker's queues
    #: have theirs.
    redis: redis.Redis
    relay: RelayWakeUp

    def now(self) -> datetime:
        """The worker's clock (`Config.clock`), read now."""
        return self.config.clock()

    def transcriber(self, model: str) -> transcription.Transcriber:
        """The worker's transcriber of `model`, with the configured engine, threads and VAD:
        loaded and warmed by the worker's start; a model first asked for by a job is loaded
        then, once per process (transcription's registry holds the loaded models, and frees
        them before the process exits)."""
        # Imported here: the playback worker (which builds a context too) never transcribes
        # and need not load the engine's libraries.
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
        return cls(config, Recorder(), queueing.redis_client(config.redis_url, "job"), RelayWakeUp())


def takes_context(function: F) -> F:
    """Mark a job function that is handed its worker's context (`context=`)."""
    function.takes_context = True  # type: ignore[attr-defined]
    return function


class ContextJob(Job):
    """The job class of the service's workers: a function marked `@takes_context` is called
    with its worker's `context` besides the arguments RQ stored. The worker sets `context`
    before it performs the job (jobs/rq_worker.py)."""

    context: JobContext | None = None

    def _execute(self) -> Any:
        if not getattr(self.func, "takes_context", False):
            return super()._execute()
        if self.context is None:
            raise RuntimeError(f"job {self.id} was taken by a worker without a job context (worker.create_worker)")
        return self.func(*self.args, context=self.context, **self.kwargs)
