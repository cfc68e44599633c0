"""The RQ worker `worker.create_worker` runs: jobs in-process, with heartbeats during jobs.

Jobs run in the worker's own process (`SimpleWorker`): whisper.cpp's OpenMP threads do not
survive a fork. A stock `SimpleWorker` sends no heartbeat while a job runs, so it registers
each job as STARTED for `job_timeout + 60` seconds (660 s for an ingest) and keeps its own
worker key alive as long. Killed mid-job (SIGKILL, OOM, a lost host), its job would look
alive for 11 minutes and nothing would run it again.

`ClinicWorker` beats every `HEARTBEAT_INTERVAL` seconds from a thread while a job runs,
like RQ's forking worker does for its work horse, so everything a dead worker leaves
behind expires quickly:

- worker key `rq:worker:<name>`: `HEARTBEAT_INTERVAL + 60` = 70 s after the last beat
  (RQ's own choice for the forking worker); `jobs.queueing.is_live` treats a STARTED job
  whose worker key is gone as dead, and, on the same host, at once when the worker's
  process no longer exists;
- the job's StartedJobRegistry entry: also 70 s, so RQ's abandoned-job cleanup (run by any
  worker every `MAINTENANCE_INTERVAL` = 30 s instead of 10 min) retries it (the ingest's
  `Retry`) or marks it failed, which `requeue_pending` then queues again;
- `WORKER_TTL` = 60 s: an idle worker's key lives 120 s and it wakes every 45 s
  (RQ: dequeue timeout = ttl - 15) to beat and run maintenance.

Recovery after a SIGKILL: a worker starting on the same host re-queues the call at once
(the relay's first sweep, `requeue_pending`: the dead pid); on another host within 70 s
of the kill, plus one maintenance or relay sweep (30 s). The ingest is idempotent and
the request is unique per call, so a job that runs twice still gives one request.

Starting while Redis is down: RQ's worker talks to Redis in its constructor and exits at
once when it cannot; `run` waits for Redis with backoff first (and again when Redis goes
away during the worker's own start), so a deploy during an outage is not a crash loop.

The scheduler RQ forks ends with the worker, even one killed with SIGKILL
(`ClinicScheduler`, jobs/companions.py).

Redis outages: RQ handles a Redis error only inside its blocking dequeue and quits on
one anywhere else in its loop (the beat after a job, the suspension check, maintenance,
the job's bookkeeping). This worker skips those steps and waits for Redis with backoff
instead, so it is still there when Redis returns (tests/test_faults.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from rq import SimpleWorker, worker_registration
from rq.exceptions import StopRequested
from rq.job import Job
from rq.queue import Queue
from rq.scheduler import ForkProcess, RQScheduler
from rq.scheduler import run as run_scheduler
from rq.worker import WorkerStatus

from config import Config
from jobs import stopping as stop_state
from jobs.companions import die_with_parent
from jobs.context import ContextJob, JobContext
from plumbing.metrics import BEAT_SCRIPT, WORKER_BEAT_SECONDS, WORKERS_ALIVE_KEY
from plumbing.wakeup import Flag, wait_any

HEARTBEAT_INTERVAL = 10
HEARTBEAT_TTL = HEARTBEAT_INTERVAL + 60
MAINTENANCE_INTERVAL = 30
WORKER_TTL = 60


log = logging.getLogger(__name__)


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class ClinicScheduler(RQScheduler):
    """RQ's scheduler process, tied to the worker that forks it: SIGTERM when the worker
    dies (the stock one, orphaned by a SIGKILL, kept running and holding the scheduler
    locks, so no other worker's scheduler could take over).

    The fork copies the worker's signal handlers; until the scheduler installs its own, a
    SIGTERM (the worker's `stop_scheduler` as it stops, or the parent-death signal) would
    run the worker's copy in the scheduler and be lost, and the worker would wait for the
    scheduler forever in `stop_scheduler`. So SIGTERM and SIGINT are blocked across the
    fork and unblocked in the scheduler once its handlers are in place: one sent meanwhile
    waits, then stops it."""

    def start(self) -> Any:  # the scheduler's process (RQ's ForkProcess)
        self._status = self.Status.STARTED
        self._connection = None  # a Redis connection must not cross the fork (as RQ's start)
        parent = os.getpid()

        def tied_run(scheduler: RQScheduler) -> None:
            scheduler._install_signal_handlers()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            die_with_parent(parent)
            run_scheduler(scheduler)

        process = ForkProcess(target=tied_run, args=(self,), name="Scheduler")
        self._process = process  # type: ignore[assignment]  # RQ declares it None until started
        # Blocked in this thread only (the one that forks); a signal for the worker meanwhile
        # is taken by another thread and its handler runs once they are unblocked here.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return process


class Presence:
    """A worker's beat from a thread of its own, idle or busy: every `WORKER_BEAT_SECONDS`
    it puts the worker in the set `clinic_workers` counts (plumbing/metrics.py), and puts
    RQ's own registration back when Redis lost it (a restart without persistence: RQ
    registers a worker only as it starts, and its beats do not register it again), so the
    count and `rq:workers` are right within seconds of Redis's return."""

    def __init__(self, worker: SimpleWorker) -> None:
        self.worker = worker
        pool = worker.connection.connection_pool
        # Its own connections, with timeouts (the worker's own block on its dequeue), and
        # the worker's connection class (TLS included).
        self.client = redis.Redis(
            connection_pool=type(pool)(
                connection_class=pool.connection_class,
                **{**pool.connection_kwargs, "socket_connect_timeout": 2, "socket_timeout": 5},
            )
        )
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"presence-{worker.name}", daemon=True)

    def start(self) -> Presence:
        self.beat()
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stopping.wait(WORKER_BEAT_SECONDS):
            self.beat()

    def beat(self) -> None:
        worker = self.worker
        try:
            registered = self.client.eval(
                BEAT_SCRIPT, 2, WORKERS_ALIVE_KEY, worker_registration.REDIS_WORKER_KEYS, worker.name, worker.key
            )
            if not registered and not self.stopping.is_set():
                self._register_again()
        except redis.RedisError as exc:  # Redis away: the next beat tries again
            log.debug("worker %s: beat skipped (%s)", worker.name, type(exc).__name__)

    def _register_again(self) -> None:
        worker = self.worker
        with self.client.pipeline() as pipe:
            pipe.delete(worker.key)  # what a beat since the loss left: a hash of one field
            pipe.hset(worker.key, mapping={**worker.serialize(), "state": str(worker.get_state())})
            worker_registration.register(worker, pipe)
            pipe.expire(worker.key, worker.worker_ttl + 60)
            pipe.execute()
        log.info("worker %s: registered again (Redis had lost its registration)", worker.name)

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=WORKER_BEAT_SECONDS + 5)
        with contextlib.suppress(redis.RedisError):  # else it ages out of the count
            self.client.zrem(WORKERS_ALIVE_KEY, self.worker.name)
        self.client.close()


class ClinicWorker(SimpleWorker):
    """`SimpleWorker` with heartbeats during jobs, the short timings above and a beat that
    keeps it counted whatever Redis lost (`Presence`); it hands its jobs its `job_context`
    (jobs/context.py: `ContextJob`), which `worker.create_worker` gives it."""

    job_class = ContextJob
    job_context: JobContext | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("worker_ttl", WORKER_TTL)
        kwargs.setdefault("maintenance_interval", MAINTENANCE_INTERVAL)
        kwargs.setdefault("job_monitoring_interval", HEARTBEAT_INTERVAL)
        super().__init__(*args, **kwargs)
        self._presence: Presence | None = None

    def register_birth(self) -> None:
        super().register_birth()
        self._presence = Presence(self).start()

    def register_death(self) -> None:
        self.stop_presence()
        super().register_death()

    def stop_presence(self) -> None:
        """No more beats: the worker stops (or its start failed and another is made)."""
        if self._presence is not None:
            self._presence.stop()
            self._presence = None

    # RQ's work loop talks to Redis outside its Redis-outage handling (which covers only
    # the dequeue): the suspension check, maintenance, the beat after each job. A Redis
    # restart there makes a stock worker quit. These steps are skipped instead; the
    # dequeue that follows waits for Redis with backoff, and the relay re-queues.

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        if pipeline is not None:  # pipelined beats fail at execute(), in the caller
            return super().heartbeat(timeout, pipeline)
        try:
            super().heartbeat(timeout)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.log.warning("Worker %s: heartbeat skipped, Redis unreachable (%s)", self.name, type(exc).__name__)

    #: Whether the main thread is in the wait for a job (the dequeue below), the one place
    #: where the stop signal's handler may raise.
    _waiting = False
    #: Called on a stop request, before RQ's own handling (`run` sets it: the grace starts).
    on_stop: Callable[[], None] | None = None

    def request_stop(self, signum: int, frame: Any) -> None:
        # RQ's handler raises StopRequested when the worker is not busy, to break out of the
        # blocking dequeue. Raised anywhere else, it lands in whatever the main thread runs
        # at that instant: a finalizer the garbage collector runs (redis-py's
        # `ConnectionPool.__del__`, seen at Ctrl-C during start-up) prints it as "Exception
        # ignored" with a traceback and drops it. Outside the wait, the flag alone stops the
        # loop, which checks it before each dequeue; the dequeue checks it on entry.
        # RQ's warm shutdown also talks to Redis; with Redis gone its error would surface in
        # whatever the worker was doing and the stop would be lost.
        self._stop_requested = True
        if self.on_stop is not None:
            self.on_stop()
        try:
            super().request_stop(signum, frame)
        except StopRequested:
            if self._waiting:
                raise
        except (redis.ConnectionError, redis.TimeoutError):
            if self._waiting:
                raise StopRequested() from None

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        self._waiting = True  # before the check: a signal either sees it or is seen by it
        try:
            if self._stop_requested:
                raise StopRequested()
            wait = 1.0
            while True:
                try:
                    return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    if self._stop_requested:
                        raise StopRequested() from None
                    # (RQ sets the worker's state before its own retry loop.) A stop request
                    # interrupts this wait like it interrupts a blocking dequeue.
                    self.log.warning(
                        "Worker %s: Redis unreachable (%s); retrying in %.0f s", self.name, type(exc).__name__, wait
                    )
                    time.sleep(wait)
                    wait = min(wait * 2, 30.0)
        finally:
            self._waiting = False

    def check_for_suspension(self, burst: bool) -> None:
        try:
            super().check_for_suspension(burst)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.log.warning(
                "Worker %s: suspension check skipped, Redis unreachable (%s)", self.name, type(exc).__name__
            )

    def run_maintenance_tasks(self) -> None:
        if self._stop_requested:
            return  # RQ's maintenance starts the scheduler again if it died: nothing starts while stopping
        try:
            super().run_maintenance_tasks()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.log.warning("Worker %s: maintenance skipped, Redis unreachable (%s)", self.name, type(exc).__name__)

    def _start_scheduler(
        self,
        burst: bool = False,
        logging_level: str | None = "INFO",
        date_format: str = "%H:%M:%S",
        log_format: str = "%(asctime)s %(message)s",
    ) -> None:
        # RQ's own, with `ClinicScheduler` (RQ names its scheduler class here, not as an attribute).
        self.scheduler = ClinicScheduler(
            self.queues,
            connection=self.connection,
            logging_level=logging_level if logging_level is not None else self.log.level,
            date_format=date_format,
            log_format=log_format,
            serializer=self.serializer,
        )
        self.scheduler.acquire_locks()
        if not self.scheduler.acquired_locks:
            return
        if burst:
            try:
                self.scheduler.register_birth()
                self.scheduler.enqueue_scheduled_jobs()
            finally:
                self.scheduler.release_locks()
                self.scheduler.register_death()
        else:
            self.scheduler.start()

    def perform_job(self, job: Job, queue: Queue) -> bool:
        if isinstance(job, ContextJob):
            job.context = self.job_context
        return super().perform_job(job, queue)

    def get_heartbeat_ttl(self, job: Job) -> int:
        # Registry entry and execution record live this long past each beat (the stock
        # SimpleWorker: the whole job timeout, since it cannot beat during a job).
        return HEARTBEAT_TTL

    def execute_job(self, job: Job, queue: Queue) -> None:
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.job_monitoring_interval):
                try:
                    self.maintain_heartbeats(job)
                except Exception:  # Redis away for a moment: the next beat tries again
                    self.log.warning("Worker %s: heartbeat for job %s failed", self.name, job.id, exc_info=True)

        beater = threading.Thread(target=beat, name=f"heartbeat-{job.id}", daemon=True)
        try:
            self.prepare_execution(job)
            beater.start()
            try:
                self.perform_job(job, queue)
            finally:
                stop.set()
                if beater.is_alive():
                    beater.join(timeout=self.job_monitoring_interval)
            self.set_state(WorkerStatus.IDLE)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Redis went away while RQ recorded the job's start or end. RQ would let the
            # worker quit; stay up instead: the dequeue loop waits for Redis with backoff,
            # and the relay re-queues the call if the job's work was not done.
            self.log.warning(
                "Worker %s: Redis unreachable around job %s (%s); carrying on", self.name, job.id, type(exc).__name__
            )


def wait_for_redis(
    connection: redis.Redis,
    stopping: Flag,
    *,
    who: str = "worker",
    first_wait: float = 1.0,
    longest_wait: float = 30.0,
) -> bool:
    """Block until Redis answers a PING (True) or `stopping` is set (False), logging the
    wait (host and port only: the URL may carry a password)."""
    kwargs = connection.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"  # or a unix socket
    wait = first_wait
    while not stopping.is_set():
        try:
            connection.ping()
            return True
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("%s waiting for Redis at %s (%s); next try in %.0f s", who, where, type(exc).__name__, wait)
        stopping.wait(wait)
        wait = min(wait * 2, longest_wait)
    return False


def run(
    worker_class: type[SimpleWorker],
    queues: Sequence[Queue],
    *,
    with_scheduler: bool,
    logging_level: str,
    who: str = "worker",
    stop_seconds: float = Config.worker_stop_seconds,
    on_stop: Callable[[], None] | None = None,
) -> int:
    """Run a worker on `queues` until it is asked to stop, waiting for Redis before it
    starts and whenever Redis goes away during its start (RQ's constructor and bootstrap
    talk to Redis and raise; only its dequeue waits). SIGTERM or SIGINT while waiting
    stops it; once working, RQ's own handlers do (a warm shutdown).

    RQ installs its handlers only after its start (registering the worker, subscribing,
    starting the scheduler): a stop asked in between is kept for its loop, which then ends
    before taking a job. (Lost, it left the worker running until SIGKILL: bin/run's Ctrl-C
    right after the worker registered took its whole 30 s stop timeout.)

    The first stop request starts the grace, `stop_seconds` (WORKER_STOP_SECONDS): a job
    running then stops at its next checkpoint and hands itself back (jobs/calls.py),
    `on_stop` runs (the worker command stops its playback worker, and starts no child from
    then on), and should the process still be there at the grace's end, it exits there
    (`StopKeeper`): a platform's SIGKILL after its own grace never finds it mid-job."""
    connection = queues[0].connection
    keeper = StopKeeper(stop_seconds, who, on_stop)
    stopping = keeper.asked
    current: list[SimpleWorker] = []  # the worker being started, once constructed

    def stop_asked() -> None:
        # Called in a signal handler (ours, or RQ's through `on_stop`): it records the stop
        # and raises a flag, and nothing else. A lock, a log line or a thread started here
        # could wait for what the interrupted main thread holds; the keeper does the rest.
        stop_state.request_stop()
        keeper.asked.set()

    def stop_waiting(*_: object) -> None:
        stop_asked()
        for started in current:
            started._stop_requested = True  # RQ's loop checks it before each dequeue

    keeper.start()
    previous = {sig: signal.signal(sig, stop_waiting) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while wait_for_redis(connection, stopping, who=who):
            worker: SimpleWorker | None = None
            try:
                worker = worker_class(queues, connection=connection)
                if isinstance(worker, ClinicWorker):
                    worker.on_stop = stop_asked
                current[:] = [worker]
                if stopping.is_set():  # asked before `current` named it
                    return 0
                worker.work(with_scheduler=with_scheduler, logging_level=logging_level)
                return 0
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("Redis went away while the %s started (%s); waiting for it", who, type(exc).__name__)
                if isinstance(worker, ClinicWorker):
                    worker.stop_presence()
                if stopping.is_set() or (worker is not None and worker._stop_requested):
                    return 0
                for sig in previous:  # RQ's handlers were installed by work(): ours again
                    signal.signal(sig, stop_waiting)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        keeper.finish()  # stopped in time (or never asked to)
        stop_state.forget_stop()


class StopKeeper:
    """Does, in a thread of its own, what a stop request asks beyond recording it: the
    "asked to stop" line, `on_stop`, and the end of the process when the stop's grace is
    spent and it is still there (a download or a step without a checkpoint outlasted it).
    The job it was running is found by the relays' sweep (its process is gone) and queued
    again; the children end with the process (jobs/companions.py). The signal handler only
    raises `asked` (`Flag`: no lock), so a stop can land at any instant of the main thread."""

    def __init__(self, grace: float, who: str, on_stop: Callable[[], None] | None = None) -> None:
        self.grace, self.who, self.on_stop = grace, who, on_stop
        self.asked = Flag()
        self._finished = Flag()
        self._thread = threading.Thread(target=self._keep, name="stop-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _keep(self) -> None:
        if wait_any([self.asked, self._finished]) is self._finished:
            return
        log.info("%s asked to stop: gone within %.0f s (WORKER_STOP_SECONDS)", self.who, self.grace)
        if self.on_stop is not None:
            self.on_stop()
        # A little before the grace's end, counted from the signal: the platform's SIGKILL
        # comes at its end.
        asked_at = stop_state.stop_asked_at()
        spent = 0.0 if asked_at is None else time.monotonic() - asked_at
        if self._finished.wait(max(0.0, self.grace - 0.5 - spent)):
            return
        log.warning("%s still busy at the end of its %.0f s stop grace: exiting now", self.who, self.grace)
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        os._exit(1)

    def finish(self) -> None:
        """The worker has stopped (or never was asked to): the keeper ends, the grace no
        longer counts, and the flags' pipes are closed (by the thread that restored the
        signal handlers, so no handler raises `asked` any more)."""
        self._finished.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.asked.close()
        self._finished.close()
