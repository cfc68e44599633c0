"""The relay: hands stored calls to RQ, so the web request never waits on Redis.

`recording-complete` only commits the call row; that row is the outbox (a call is
never lost between a commit and an enqueue that failed). This loop, a thread of every
worker process, claims pending calls that were not queued yet (`Call.claim_unqueued`,
atomic per row, so two relays never queue one call twice) and enqueues their ingest
under the stable job id. On PostgreSQL it sleeps on LISTEN for the trigger's NOTIFY
of a new call, so a call is queued within milliseconds; on SQLite, and as a safety net
for a lost notification, it polls. While Redis is down it keeps the claims undone; while
the database or Redis is unreachable it tries again every two seconds at most, and every
`sweep_every` seconds it re-queues pending calls whose job is gone (a worker killed
mid-job): `requeue_pending`. It sweeps at once, without the sweep's grace, when Redis
comes back as a new server (its run id changed: restarted, so empty without
persistence), on its first round after an outage, and when an ingest of this process gave
its call back on an infrastructure error (jobs/calls.py): a call is queued again within
seconds of the database's return.

Fair share: RQ's queue is first in, first out, so a burst of one clinic's calls
(after a phone outage, or an integration gone wrong) made every other clinic wait behind
all of it. The relay keeps at most `RELAY_PER_CLINIC` calls of a clinic in flight (queued
and not finished) and claims the clinics' calls in turn (`Call.claim_unqueued`); the rest
wait in the outbox. When a job ends, its worker wakes this process's relay (`WakesRelay`),
which queues that clinic's next call at once: every worker runs a relay, so the worker
that finished a call is enough to keep the queue fed.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import peewee as pw
import psycopg2
import redis
from rq import Queue
from rq.job import Job

from config import Config
from jobs import leases, queueing
from jobs.calls import ingest_call
from jobs.context import RelayWakeUp
from models import Call
from plumbing.clock import as_utc
from plumbing.database import db, is_postgresql
from plumbing.descriptors import readable
from plumbing.pg_listen import Listener, connector

log = logging.getLogger(__name__)


#: The relay's waits between tries while the database or Redis is unreachable: short, so
#: that it notices their return within seconds (a try is one connection attempt).
RETRY_FIRST = 0.5
RETRY_CAP = 2.0
#: While an outage lasts, the relay says so this often (its first failure is logged at once).
OUTAGE_LOG_EVERY = 30.0
#: At most one sweep this often for ingests that gave their call back.
DEFERRED_SWEEP_EVERY = 5.0


def job_id(call_id: uuid.UUID | str) -> str:
    return f"ingest-call-{call_id}"


def job_options(config: Config) -> dict[str, Any]:
    """How the ingest job is enqueued: its limit, retries and TTLs."""
    return dict(
        job_timeout=config.job_timeout,
        retry=queueing.retry(config.retry_delays),
        result_ttl=3600,
        failure_ttl=7 * 86400,
    )


def ensure_queued(queue: Queue, call_id: uuid.UUID | str, config: Config) -> bool:
    """Queue the call's ingest unless a job for it exists; whether it was queued.
    Raises `redis.RedisError` (the relay keeps the call in its outbox then)."""
    return queueing.enqueue_once(queue, ingest_call, str(call_id), job_id=job_id(call_id), **job_options(config))[1]


def requeue_pending(queue: Queue, config: Config, *, queued_before: datetime | None = None) -> int:
    """Queue every pending call that has no live job (all of them, or those the relay
    queued before `queued_before`, giving a fresh job time to start). Returns how many.

    Exact: a call is queued again only when RQ holds no live job for it, no live job
    holds its lease (jobs/leases.py: survives a Redis restart that emptied RQ's view),
    and it is still pending once both were looked at (a job that finished in between)."""
    # Only calls the relay claimed: the others are its to queue, in the fair share's turns
    # (a sweep queueing a whole backlog at a worker's start would undo them).
    query = Call.select(Call.id).where((Call.state == "pending") & Call.queued_at.is_null(False))
    if queued_before is not None:
        query = query.where(Call.queued_at < queued_before)
    with db.connection_context():
        pending = [c.id for c in query]
    # One round trip for all the jobs, not two a call: a backlog can be tens of thousands.
    jobs = Job.fetch_many([job_id(i) for i in pending], connection=queue.connection)
    orphans = {
        call_id: job for call_id, job in zip(pending, jobs) if job is None or not queueing.is_live(job, refresh=False)
    }
    for call_id in leases.held(orphans):
        del orphans[call_id]
    if orphans:
        with db.connection_context():
            still = {c.id for c in Call.select(Call.id).where(Call.id.in_(list(orphans)) & (Call.state == "pending"))}
        orphans = {call_id: job for call_id, job in orphans.items() if call_id in still}
    for call_id, job in orphans.items():
        if job is not None:
            log.warning(
                "call %s: its job is %s and the call is not done; queued again", call_id, job.get_status(refresh=False)
            )
            queueing.forget_job(job, queue)
        ensure_queued(queue, call_id, config)
    if orphans:
        with db.connection_context():
            Call.update(queued_at=as_utc(config.clock())).where(
                Call.id.in_(list(orphans)) & (Call.state == "pending")
            ).execute()
    return len(orphans)


class CallRelay:
    def __init__(
        self,
        queue: Queue,
        config: Config,
        wake: RelayWakeUp,
        *,
        poll_every: float | None = None,
        sweep_every: float = 30.0,
        batch: int = 200,
    ) -> None:
        self.queue = queue
        self.config = config
        self.wake = wake
        self.listening = is_postgresql()
        # With LISTEN the poll is only a safety net; SQLite has nothing else.
        self.poll_every = poll_every if poll_every is not None else (5.0 if self.listening else 0.5)
        self.sweep_every = sweep_every
        self.batch = batch
        self._listener: Listener | None = None
        self._redis_run_id: str | None = None
        self._deferred_sweep_at = 0.0

    def relay_new(self) -> int:
        """Queue every call stored but not queued yet. Returns how many were queued."""
        queued = 0
        while True:
            with db.connection_context():
                ids = Call.claim_unqueued(self.config.clock(), self.batch, self.config.relay_per_clinic)
            for i, call_id in enumerate(ids):
                try:
                    queued += ensure_queued(self.queue, call_id, self.config)
                except redis.RedisError:
                    with db.connection_context():
                        Call.unclaim(ids[i:])  # stays in the outbox for the next round
                    raise
            if len(ids) < self.batch:
                return queued

    def sweep(self, *, grace: timedelta = timedelta(minutes=1)) -> int:
        """Re-queue pending calls queued over `grace` ago whose job is no longer live."""
        return requeue_pending(self.queue, self.config, queued_before=as_utc(self.config.clock()) - grace)

    def run(self, stop: threading.Event) -> None:
        """Relay until `stop` is set; survives database and Redis outages.

        While either is unreachable it tries again every `RETRY_CAP` seconds at most, so it
        notices their return within seconds (it logs the outage's start, then every
        `OUTAGE_LOG_EVERY` seconds). Its first round after one sweeps without a grace:
        the ingests that failed meanwhile gave their calls back (jobs/calls.py), and the
        sweep queues them again at once, so none holds its clinic's place in the fair share
        while it waits (it used to wait out the download retry's delay, minutes).
        """
        next_sweep = 0.0  # a starting worker sweeps at once: calls stranded by a crash
        backoff = RETRY_FIRST
        failing_since: float | None = None
        logged_at = 0.0
        while not stop.is_set():
            try:
                if self.listening and self._listener is None:
                    self._listen()  # before relaying, so no NOTIFY falls in between
                self.relay_new()
                if self._redis_restarted():
                    next_sweep = 0.0  # its queue is gone: re-queue every pending call now
                if self.wake.take_deferred() and time.monotonic() >= self._deferred_sweep_at:
                    # An ingest gave its call back: queue it again now (bounded, in case
                    # the database answers the relay but keeps failing the job).
                    self._deferred_sweep_at = time.monotonic() + DEFERRED_SWEEP_EVERY
                    next_sweep = 0.0
                if time.monotonic() >= next_sweep:
                    swept = requeue_pending(self.queue, self.config) if next_sweep == 0.0 else self.sweep()
                    if swept:
                        log.info("relay re-queued %d pending call(s) without a live job", swept)
                    next_sweep = time.monotonic() + self.sweep_every
                if failing_since is not None:
                    log.info("relay: database and Redis answer again after %.1f s", time.monotonic() - failing_since)
                    failing_since = None
                backoff = RETRY_FIRST
                self._wait(stop, min(self.poll_every, max(0.0, next_sweep - time.monotonic())))
            except (pw.DatabaseError, pw.InterfaceError, psycopg2.Error, redis.RedisError, OSError, ValueError) as exc:
                # (ValueError: the LISTEN connection's descriptor once it is gone, numbered -1.)
                now = time.monotonic()
                if failing_since is None or now - logged_at >= OUTAGE_LOG_EVERY:
                    since = "" if failing_since is None else f" (failing for {now - failing_since:.0f} s)"
                    log.warning("relay: %s%s; retrying every %.0f s at most", type(exc).__name__, since, RETRY_CAP)
                    logged_at = now
                if failing_since is None:
                    failing_since = now
                self._close_listener()
                next_sweep = 0.0  # once back: re-queue what failed meanwhile, without a grace
                stop.wait(backoff)
                backoff = min(backoff * 2, RETRY_CAP)
        self._close_listener()

    def _redis_restarted(self) -> bool:
        """Whether Redis restarted since the last look (a new server run id): without
        persistence it lost every queued job."""
        run_id = self.queue.connection.info("server").get("run_id")
        restarted = self._redis_run_id is not None and run_id != self._redis_run_id
        self._redis_run_id = run_id
        return restarted

    def _listen(self) -> None:
        self._listener = Listener.open(connector(db.obj), Call.NEW_CALL_CHANNEL)

    def _wait(self, stop: threading.Event, timeout: float) -> None:
        """Until a new call is notified, a job of this process ends (`RelayWakeUp.job_ended`),
        `timeout` passes or `stop` is set."""
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            wake = self.wake.pipe
            watched: list[Any] = [wake] if self._listener is None else [wake, self._listener.conn]
            # Short slices so `stop` is honoured promptly; a wake-up returns at once.
            ready = readable(watched, min(left, 0.5))
            if wake in ready:
                wake.clear()
                return
            if ready and self._listener is not None and self._listener.wait(0, drain=False):
                return

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None


class WakesRelay:
    """RQ worker mixin (`class W(WakesRelay, SimpleWorker)`, with a `relay_wake_up`):
    every job's end, finished or failed, wakes the relay. Without it a clinic's next call
    would wait for the relay's poll, seconds on PostgreSQL, with the worker idle meanwhile."""

    relay_wake_up: RelayWakeUp

    def perform_job(self, job: Any, queue: Queue) -> bool:
        try:
            return super().perform_job(job, queue)  # type: ignore[misc]
        finally:
            self.relay_wake_up.job_ended()


def start(queue: Queue, config: Config, wake: RelayWakeUp, **options: Any) -> tuple[threading.Thread, threading.Event]:
    """Run a relay in a daemon thread of this process; set the event to stop it."""
    stop = threading.Event()
    thread = threading.Thread(
        target=CallRelay(queue, config, wake, **options).run, args=(stop,), name="call-relay", daemon=True
    )
    thread.start()
    return thread, stop
