"""Delivering the outbox (models/outbox.py): what must reach someone, written in the
transaction of its cause, handed to RQ by every worker's relay thread and delivered once.

- The relay (`OutboxRelay`, a thread of every worker, like the call relay) claims the due
  rows (`Outbox.claim_due`: atomic per row, so two relays never queue one row twice) and
  queues `deliver(id)` under the stable job id `outbox-<id>`, with RQ's `Retry` after each
  of MAIL_RETRY_DELAYS. While the database or Redis is away it tries again every two
  seconds at most and keeps its claims undone. Nothing is queued on a request's path: a
  request only writes its row.
- The sweep (every `SWEEP_EVERY` seconds) gives back to the relay the rows whose job is no
  longer live (`jobs.queueing.is_live`): at once when the job vanished (a worker killed, a
  Redis restart), `LATER` from now when its retries were spent (the server is down for
  long); a row still failing `GIVE_UP` after it was written is failed for good, counted and
  logged. It also writes the keys' expiry notices due (notices/key_notices.py) and the gauges.
- `deliver` hands a row to its topic's handler: an event (`EVENTS`: a flagged request, a
  key expiring or refused) becomes its e-mails in the transaction that marks it done; an
  e-mail (`mail`) is written and sent (notices/mail.py), then marked done. A transient
  failure raises (RQ retries it); the row keeps its attempts and the last error's word.

Another kind of delivery (a webhook) adds its topic's handler to `EVENTS` or a deliverer
beside `mail`, and rides the same relay, jobs, retries and sweep.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import peewee as pw
import psycopg2
import redis
from rq import Queue
from rq.job import Job

from config import Config
from jobs import queueing
from jobs.context import JobContext, takes_context
from models import Outbox
from notices import key_notices, urgent, webhook_notices
from notices import mail as notices_mail
from plumbing import metrics
from plumbing.clock import as_utc
from plumbing.database import db
from plumbing.smtp import MailError

log = logging.getLogger(__name__)

QUEUE = queueing.OUTBOX
JOB_TIMEOUT = 120
#: How often the sweep looks for rows without a live job, and a grace before it asks.
SWEEP_EVERY = 30.0
SWEEP_GRACE = timedelta(minutes=1)
#: After RQ's retries are spent, the next try this much later, until `GIVE_UP`.
LATER = timedelta(minutes=10)
GIVE_UP = timedelta(days=2)
#: The relay looks for due rows this often (a due row waits at most this long).
POLL_EVERY = 1.0
RETRY_FIRST, RETRY_CAP = 0.5, 2.0
OUTAGE_LOG_EVERY = 30.0

#: Event topics: what each becomes, in the transaction that marks it done.
EVENTS: dict[str, Callable[[Outbox, Config, datetime], str]] = {
    "request.urgent": urgent.fan_out,
    "key.expiring": key_notices.fan_out,
    "key.refused": key_notices.fan_out,
    "webhook.disabled": webhook_notices.fan_out,
}


def job_id(row_id: int) -> str:
    return f"outbox-{row_id}"


def enqueue(queue: Queue, row_id: int, config: Config) -> bool:
    """Queue the row's delivery unless a live job for it exists (a spent one is replaced)."""
    return queueing.enqueue_once(
        queue,
        deliver,
        row_id,
        job_id=job_id(row_id),
        replace=lambda job: True,
        job_timeout=JOB_TIMEOUT,
        retry=queueing.retry(config.mail_retry_intervals),
        result_ttl=3600,
        failure_ttl=86400,
    )[1]


@takes_context
def deliver(row_id: int, *, context: JobContext) -> str:
    """Deliver one outbox row; a short word for what came of it ("noop": done already)."""
    config = context.config
    now = as_utc(config.clock())
    with db.connection_context():
        row = Outbox.get_or_none(Outbox.id == row_id)
        if row is None or row.state != "pending":
            return "noop"
        event = EVENTS.get(row.topic)
        if event is not None:
            with db.atomic():
                outcome = event(row, config, now)
                Outbox.finish(row.id, now, outcome)
            log.info("outbox %d (%s): %s", row.id, row.topic, outcome)
            return outcome
        if row.topic != "mail":
            Outbox.finish(row.id, now, "unknown_topic", state="failed")
            log.warning("outbox %d: no handler for its topic %r", row.id, row.topic)
            return "failed"
        template = str(row.data.get("template", "other"))
        try:
            outcome = notices_mail.deliver(row, context.mail, now)
        except MailError as error:
            return _failed(row, template, error, now, context.recorder)
        Outbox.finish(row.id, now, outcome)
        context.recorder.count(metrics.MAIL, (template, outcome))
        log.info("outbox %d: e-mail %s %s", row.id, template, outcome)  # never the address
        return outcome


def _failed(row: Outbox, template: str, error: MailError, now: datetime, recorder: metrics.Recorder) -> str:
    Outbox.update(attempts=Outbox.attempts + 1, outcome=error.word[:40]).where(Outbox.id == row.id).execute()
    if error.transient and now - as_utc(row.created_at) < GIVE_UP:
        recorder.count(metrics.MAIL, (template, "retried"))
        log.warning("outbox %d: e-mail %s not sent (%s); it will be tried again", row.id, template, error.word)
        raise error
    Outbox.finish(row.id, now, error.word, state="failed")
    recorder.count(metrics.MAIL, (template, "failed"))
    log.warning("outbox %d: e-mail %s failed for good (%s)", row.id, template, error.word)
    return "failed"


def sweep(queue: Queue, now: datetime, *, grace: timedelta = SWEEP_GRACE) -> int:
    """Give back to the relay the rows queued over `grace` ago whose job is not live:
    due now when the job vanished, `LATER` when its retries were spent. Returns how many."""
    now = as_utc(now)
    with db.connection_context():
        queued = Outbox.queued_before(now - grace)
    jobs = Job.fetch_many([job_id(i) for i in queued], connection=queue.connection)
    vanished: list[int] = []
    spent: list[int] = []
    for row_id, job in zip(queued, jobs):
        if job is not None and queueing.is_live(job, refresh=False):
            continue
        (spent if job is not None and job.get_status(refresh=False) == "failed" else vanished).append(row_id)
    with db.connection_context():
        given = Outbox.later(vanished, now) + Outbox.later(spent, now + LATER)
    if vanished:
        log.warning("outbox: %d row(s) without a job queued again", len(vanished))
    return given


def gauges(now: datetime) -> dict[str, float]:
    """The gauges the sweep writes (plumbing/metrics.py `GAUGES`)."""
    oldest = Outbox.select(pw.fn.MIN(Outbox.created_at)).where(Outbox.state == "pending").scalar()
    return {
        "api_keys_expiring_soon": key_notices.expiring_count(now),
        "outbox_pending": Outbox.pending_count(),
        "outbox_oldest_pending_seconds": max(0.0, (as_utc(now) - as_utc(oldest)).total_seconds()) if oldest else 0.0,
    }


class OutboxRelay:
    def __init__(self, queue: Queue, config: Config, *, poll_every: float = POLL_EVERY) -> None:
        self.queue = queue
        self.config = config
        self.poll_every = poll_every

    def relay_due(self) -> int:
        """Queue every due row not queued yet; how many were queued."""
        queued = 0
        while True:
            with db.connection_context():
                ids = Outbox.claim_due(self.config.clock())
            for i, row_id in enumerate(ids):
                try:
                    queued += enqueue(self.queue, row_id, self.config)
                except redis.RedisError:
                    with db.connection_context():
                        Outbox.unclaim(ids[i:])  # stays in the outbox for the next round
                    raise
            if len(ids) < 100:
                return queued

    def round(self) -> None:
        """The sweep's round: rows without a job, the keys' expiry notices, the gauges."""
        now = self.config.clock()
        sweep(self.queue, now)
        with db.connection_context():
            given = key_notices.expiring(now)
            values = gauges(now)
        if given:
            log.info("outbox: %d key expiry notice(s) written", given)
        metrics.set_gauges(self.queue.connection, values)

    def run(self, stop: threading.Event) -> None:
        """Relay until `stop` is set; survives database and Redis outages."""
        next_sweep = 0.0
        backoff = RETRY_FIRST
        failing_since: float | None = None
        logged_at = 0.0
        while not stop.is_set():
            try:
                self.relay_due()
                if time.monotonic() >= next_sweep:
                    self.round()
                    next_sweep = time.monotonic() + SWEEP_EVERY
                if failing_since is not None:
                    log.info(
                        "outbox relay: database and Redis answer again after %.1f s", time.monotonic() - failing_since
                    )
                    failing_since = None
                backoff = RETRY_FIRST
                stop.wait(self.poll_every)
            except (pw.DatabaseError, pw.InterfaceError, psycopg2.Error, redis.RedisError, OSError) as exc:
                now = time.monotonic()
                if failing_since is None or now - logged_at >= OUTAGE_LOG_EVERY:
                    log.warning("outbox relay: %s; retrying every %.0f s at most", type(exc).__name__, RETRY_CAP)
                    logged_at = now
                if failing_since is None:
                    failing_since = now
                next_sweep = 0.0
                stop.wait(backoff)
                backoff = min(backoff * 2, RETRY_CAP)


def start(queue: Queue, config: Config, **options: Any) -> tuple[threading.Thread, threading.Event]:
    """Run an outbox relay in a daemon thread of this process; set the event to stop it."""
    stop = threading.Event()
    relay = OutboxRelay(queue, config, **options)
    thread = threading.Thread(target=relay.run, args=(stop,), name="outbox-relay", daemon=True)
    thread.start()
    return thread, stop
