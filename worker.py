"""Worker factory: `create_worker(config)` builds what a worker process holds, as
`create_app(config)` does for a web process, and `Worker.run` runs it.

Built here, once, and handed on: the database binding, the job context (configuration and
clock, metrics recorder, the jobs' Redis client, the transcribers, what wakes the relay:
jobs/context.py), the worker class that hands every job that context, and the queues.
Started by `run`, not by building: the models' warm-up, the relay thread that queues stored
calls, the purge thread, and the playback worker (a child process serving the
`recordings` queue alone, so re-fetching a doctor's expired link never waits behind a
transcription). Nothing here reads the environment: `manage.py worker` builds the
configuration and calls this.

Jobs run in this process (a `SimpleWorker`): whisper.cpp's OpenMP threads do not survive
a fork, so a forked work horse would hang on the warmed model.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rq import Queue

from config import Config
from jobs import companions, outbox, queueing, relay, rq_worker, stopping, storage_purge, webhooks
from jobs.context import JobContext
from jobs.metrics import JobMetrics
from migrations import pending
from plumbing import clock, logs
from plumbing.database import UNREACHABLE, bind_database, db
from plumbing.wakeup import Flag
from voicemail.recordings import never_refetched_warnings

log = logging.getLogger("worker")


@dataclass
class Worker:
    """A worker process's parts, built by `create_worker`; `run` starts them."""

    config: Config
    context: JobContext
    worker_class: type[rq_worker.ClinicWorker]
    queues: list[Queue]
    #: The playback worker: a child serving `recordings` and `outbox`, with no model and no
    #: relay (`manage.py worker --playback`, which its parent starts).
    playback: bool
    warm_up: bool
    parent_pid: int | None

    def run(self) -> int:
        """Work until asked to stop (SIGTERM, SIGINT); the process's exit code."""
        config = self.config
        if self.playback:
            if self.parent_pid:
                companions.die_with_parent(self.parent_pid, told=stopping.stopping)
            db.close()
            return rq_worker.run(
                self.worker_class,
                self.queues,
                with_scheduler=False,
                logging_level=config.log_level.upper(),
                who="webhook worker" if self.queues[0].name == queueing.WEBHOOKS else "playback worker",
                stop_seconds=config.worker_stop_seconds,
            )
        if not wait_for_schema(log):
            return 0  # asked to stop while waiting
        names = [q.name for q in self.queues]
        children = [companions.PlaybackWorker().start()] if queueing.RECORDINGS in names else []
        # The webhooks' own workers: an endpoint that never answers holds one of them at most.
        children += [
            companions.PlaybackWorker(companions.webhook_worker_argv()).start() for _ in range(config.webhook_workers)
        ]
        stop_by: list[float] = []  # when the grace of a stop request ends (time.monotonic())

        def on_stop() -> None:
            stop_by.append(time.monotonic() + config.worker_stop_seconds)
            for child in children:
                child.stop_soon()

        with db.connection_context():
            for warning in never_refetched_warnings(config):
                log.warning(warning)
        try:
            if self.warm_up:
                self._warm_up()
            db.close()
            connection = self.queues[0].connection
            # Hands stored calls to the queue (the web only commits them); re-queues, at once
            # and then periodically, the pending calls left without a live job (jobs/relay.py).
            relay.start(Queue(queueing.CALLS, connection=connection), config, self.context.relay)
            # Queues what the outbox holds (e-mails, the events that make them), gives back what
            # lost its job, writes the keys' expiry notices and the gauges (jobs/outbox.py).
            if not config.mail_enabled:
                log.warning("SMTP_URL is not set: no e-mail is sent (notices and set-password links)")
            outbox.start(Queue(queueing.OUTBOX, connection=connection), config)
            # Queues each endpoint's due webhooks, one job per endpoint (jobs/webhooks.py).
            webhooks.start(Queue(queueing.WEBHOOKS, connection=connection), config)
            # Deletes uploads never registered once their link expired (and a grace), at once
            # and then every UPLOAD_PURGE_EVERY_SECONDS; safe in every worker. Each round also
            # runs the retention: what the clinics keep only as long as they set.
            storage_purge.start(config, self.context.recorder, connection=connection)
            # Heartbeats during jobs and short TTLs: a killed worker's job is re-run quickly
            # (jobs/rq_worker.py). This worker takes plays too (first) when it is idle: the
            # playback worker may be restarting.
            return rq_worker.run(
                self.worker_class,
                self.queues,
                with_scheduler=True,
                logging_level=config.log_level.upper(),
                stop_seconds=config.worker_stop_seconds,
                on_stop=on_stop,
            )
        finally:
            for child in children:
                # Within what is left of the grace (a second kept for this process's own exit).
                child.stop(max(1.0, stop_by[0] - time.monotonic() - 1) if stop_by else 130.0)

    def _warm_up(self) -> None:
        config = self.config
        for model in dict.fromkeys([config.whisper_model, config.whisper_model_en]):
            if model and Path(model).is_file():
                self.context.transcriber(model).warm_up()
                log.info("warmed up %s with %s", config.transcriber, model)
            elif model:
                log.warning("whisper model %s not found (python manage.py model build)", model)


def create_worker(
    config: Config,
    queues: Sequence[str] = queueing.QUEUES,
    *,
    playback: bool = False,
    warm_up: bool = True,
    parent_pid: int | None = None,
) -> Worker:
    """A worker on `queues` ("recordings" first: a doctor waits on a link re-fetch,
    nobody waits on a transcription), or the playback worker (`playback`: the
    `recordings` queue alone)."""
    logs.setup(config.log_level, config.log_format)
    clock.use(config.clock)  # what asks for "now" without being handed the clock reads this one
    bind_database(config.database_url, pooled=False)
    context = JobContext.build(config)
    # Each job's duration and outcome counted (jobs/metrics.py); each job's end wakes the
    # relay, which queues that clinic's next call at once (jobs/relay.py); each job is
    # handed the context (jobs/rq_worker.py).
    worker_class = type(
        "ClinicWorker",
        (JobMetrics, relay.WakesRelay, rq_worker.ClinicWorker),
        {"recorder": context.recorder, "relay_wake_up": context.relay, "job_context": context},
    )
    connection = queueing.redis_client(config.redis_url, "worker")
    # The playback worker serves the plays and the outbox's e-mails: neither a doctor's
    # expired link nor an urgent message's e-mail waits behind a transcription.
    names = [queueing.RECORDINGS, queueing.OUTBOX] if playback else list(queues)
    if playback and list(queues) == [queueing.WEBHOOKS]:
        names = [queueing.WEBHOOKS]  # a webhook worker (jobs/companions.py)
    return Worker(
        config,
        context,
        worker_class,
        [Queue(name, connection=connection) for name in names],
        playback,
        warm_up and not playback,
        parent_pid,
    )


def wait_for_schema(log: logging.Logger, every: float = 2.0) -> bool:
    """Wait until the database answers with every migration of this release (True), or
    until SIGTERM/SIGINT (False). A worker started before the release step (a compose
    file, a VM starting everything at once) says once what it waits for, "run manage.py
    migrate", instead of dying with a traceback at its first query."""
    stopping_flag = Flag()  # raised by the handlers below: no lock (plumbing/wakeup.py says why)
    previous = {sig: signal.signal(sig, lambda *_: stopping_flag.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    said = ""  # the state last logged: one line per state, not one per try
    try:
        while not stopping_flag.is_set():
            try:
                missing = pending(db.obj)
            except UNREACHABLE as exc:
                state, line = (
                    "unreachable",
                    f"worker waiting for the database ({type(exc).__name__}); trying every {every:.0f} s",
                )
            else:
                if not missing:
                    if said:
                        log.warning("database ready: the worker starts")
                    return True
                shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
                state, line = (
                    "behind",
                    (
                        f"database schema lacks {len(missing)} migration(s) of this release ({shown}): "
                        "run manage.py migrate; the worker waits for it"
                    ),
                )
            if state != said:
                log.warning(line)
                said = state
            stopping_flag.wait(every)
        return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stopping_flag.close()
        db.close()
