"""`worker` (the Procfile's worker process) and `requeue`, its sweep of pending calls on
demand."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from config import Config
from plumbing.database import db


def cmd_worker(config: Config, args: argparse.Namespace) -> int:
    """An RQ worker with the scheduler (retries with backoff are scheduled jobs), and a
    playback worker beside it.

    Before taking jobs it loads and warms the transcription model(s) once and starts
    the call relay, which queues stored calls and re-queues stranded ones. Jobs run in
    this process (a `SimpleWorker`): whisper.cpp's OpenMP threads do not survive a fork,
    so a forked work horse would hang on the parent's warmed model.
    The playback worker (a child process started first, without the model) serves the
    `recordings` queue and the `outbox`'s e-mails, so neither a doctor's expired link nor an
    urgent message's e-mail waits behind a transcription; it and RQ's scheduler end with
    this process (jobs/companions.py). The outbox relay queues what the outbox holds
    (jobs/outbox.py).
    """
    from rq import Queue

    from jobs import companions, metrics, outbox, queueing, relay, runtime, storage_purge, worker
    from plumbing import logs

    logs.setup(config.log_level, config.log_format)
    log = logging.getLogger("worker")
    # What the jobs need from this process, built once: the configuration, the metrics
    # recorder, their Redis client and transcriber (jobs/runtime.py), handed to them by
    # `runtime.start` below.
    job_context = runtime.JobContext.build(config)
    # Job metrics; and each job's end wakes the relay, which queues that clinic's next call.
    worker_class = metrics.with_job_metrics(relay.waking_relay(worker.ClinicWorker), job_context.recorder)
    connection = queueing.redis_client(config.redis_url, "worker")
    level = config.log_level.upper()
    if args.playback:
        if args.parent_pid:
            companions.die_with_parent(args.parent_pid, told=runtime.stopping)
        db.close()
        runtime.start(job_context)
        exit_at_once(
            worker.run(
                worker_class,
                [Queue(name, connection=connection) for name in (queueing.RECORDINGS, queueing.OUTBOX)],
                with_scheduler=False,
                logging_level=level,
                who="playback worker",
                stop_seconds=config.worker_stop_seconds,
            )
        )
    if not wait_for_schema(config, log):
        return 0  # asked to stop while waiting
    playback = companions.PlaybackWorker().start() if queueing.RECORDINGS in args.queues else None
    stop_by: list[float] = []  # when the grace of a stop request ends (time.monotonic())

    def on_stop() -> None:
        stop_by.append(time.monotonic() + config.worker_stop_seconds)
        if playback is not None:
            playback.stop_soon()

    from commands.deployment import never_refetched_warnings
    from voicemail.recordings import clinics_never_refetched

    with db.connection_context():
        for warning in never_refetched_warnings(config, clinics_never_refetched(config)):
            log.warning(warning)
    try:
        if not args.no_warm_up:
            for model in dict.fromkeys([config.whisper_model, config.whisper_model_en]):
                if model and Path(model).is_file():
                    job_context.transcriber(model).warm_up()
                    log.info("warmed up %s with %s", config.transcriber, model)
                elif model:
                    log.warning("whisper model %s not found (python manage.py model build)", model)
        db.close()
        runtime.start(job_context)  # the environment was read once, by the command
        # Hands stored calls to the queue (the web only commits them); re-queues, at once
        # and then periodically, the pending calls left without a live job (jobs/relay.py).
        relay.start(Queue(queueing.CALLS, connection=connection), config)
        # Queues what the outbox holds (e-mails, the events that make them), gives back what
        # lost its job, writes the keys' expiry notices and the gauges (jobs/outbox.py).
        if not config.mail_enabled:
            log.warning("SMTP_URL is not set: no e-mail is sent (notices and set-password links)")
        outbox.start(Queue(queueing.OUTBOX, connection=connection), config)
        # Deletes uploads never registered once their link expired (and a grace), at once
        # and then every UPLOAD_PURGE_EVERY_SECONDS; safe in every worker (jobs/storage_purge.py).
        # Each round also runs the retention: what the clinics keep only as long as they set.
        storage_purge.start(config, job_context.recorder, connection=connection)
        # This worker takes plays too (first) when it is idle: the playback worker may be
        # restarting. Heartbeats during jobs and short TTLs: a killed worker's job is re-run
        # quickly (jobs/worker.py). Job durations and outcomes go to the service's metrics
        # (jobs/metrics.py); RQ's own loggers follow LOG_LEVEL (RQ would pin them at INFO).
        queues = [Queue(name, connection=connection) for name in args.queues]
        code = worker.run(
            worker_class,
            queues,
            with_scheduler=True,
            logging_level=level,
            stop_seconds=config.worker_stop_seconds,
            on_stop=on_stop,
        )
    finally:
        if playback is not None:
            # Within what is left of the grace (a second kept for this process's own exit).
            playback.stop(max(1.0, stop_by[0] - time.monotonic() - 1) if stop_by else 130.0)
    exit_at_once(code)


def exit_at_once(code: int) -> NoReturn:
    """End the worker without the interpreter's finalization, which frees the spelling
    dictionaries object by object: seconds of a stop's grace. What must happen at exit
    still does: the exit handlers run (the models freed), the logs and output are flushed."""
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def wait_for_schema(config: Config, log: logging.Logger, every: float = 2.0) -> bool:
    """Wait until the database answers with every migration of this release (True), or
    until SIGTERM/SIGINT (False). A worker started before the release step (a compose
    file, a VM starting everything at once) says once what it waits for, "run manage.py
    migrate", instead of dying with a traceback at its first query."""
    import signal

    from migrations import pending
    from plumbing.database import UNREACHABLE
    from plumbing.signal_flag import Flag

    stopping = Flag()  # raised by the handlers below: no lock (plumbing/signal_flag.py says why)
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    said = ""  # the state last logged: one line per state, not one per try
    try:
        while not stopping.is_set():
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
            stopping.wait(every)
        return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stopping.close()
        db.close()


def _calls_queue(config: Config) -> Any:
    from rq import Queue

    from jobs import queueing

    return Queue(queueing.CALLS, connection=queueing.redis_client(config.redis_url, "worker"))


def cmd_requeue(config: Config, args: argparse.Namespace) -> int:
    """Queue every stored call that is not processed yet and has no live job."""
    from jobs.relay import requeue_pending

    print(f"re-queued {requeue_pending(_calls_queue(config), config)} pending call(s)", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from jobs.queueing import QUEUES

    worker = sub.add_parser("worker", help="run an RQ worker (with scheduler)")
    # "recordings" first: a doctor waits on a link re-fetch, nobody waits on a transcription.
    worker.add_argument("queues", nargs="*", default=list(QUEUES))
    worker.add_argument("--no-warm-up", action="store_true", help="skip loading the transcription model")
    # The playback worker the worker command starts itself (jobs/companions.py).
    worker.add_argument("--playback", action="store_true", help=argparse.SUPPRESS)
    worker.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    worker.set_defaults(func=cmd_worker, needs_db=False, needs_secret=True)
    sub.add_parser("requeue", help="queue stored calls that are not processed yet").set_defaults(
        func=cmd_requeue, needs_db=False
    )
