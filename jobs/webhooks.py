"""Delivering webhooks through the outbox (models/outbox.py, models/change_events.py).

A change writes its event and one outbox row per endpoint that wants it (topic `webhook`,
`group_key` the endpoint's) in its own transaction. Then:

- The relay (`WebhookRelay`, a thread of every worker beside the outbox's) looks every
  WEBHOOK_POLL_SECONDS for endpoints with due rows that are not paused, and queues
  `deliver_endpoint(id)` under the stable job id `webhook-<endpoint>` on the `webhooks`
  queue: one job per endpoint at a time, however many relays ask.
- The `webhooks` queue has worker processes of its own (WEBHOOK_WORKERS per worker,
  jobs/companions.py), which nothing else uses: an endpoint that never answers holds one
  of them for the timeout and is then paused, while the other clinics' endpoints are served
  by the rest. E-mails, plays and transcriptions never wait behind a webhook.
- `deliver_endpoint` POSTs the endpoint's due rows oldest first (webhooks/delivery.py), each
  with its event's id, until none is due or its time share (`BUDGET`) is spent. A 2xx marks
  the row done (its outcome: the status and the time taken, never the body). A failure
  counts one try on the row and pauses the endpoint for the next of WEBHOOK_RETRY_DELAYS
  (the last repeated), so a receiver that is down is tried once per step, not once per
  event; when it answers again every row waiting is delivered, each with its original id. A
  row still undelivered when the whole schedule has passed since its event is failed for
  good. 410 disables the endpoint; so does failing for WEBHOOK_DISABLE_AFTER_DAYS (its
  clinic's administrators are told by e-mail).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import peewee as pw
import psycopg2
import redis
from rq import Queue

from config import Config
from jobs import queueing
from jobs.context import JobContext, takes_context
from models import ChangeEvent, Outbox, WebhookEndpoint
from models.change_events import TOPIC, group_key
from plumbing.clock import as_utc
from plumbing.database import db
from webhooks import delivery

log = logging.getLogger(__name__)

QUEUE = queueing.WEBHOOKS
JOB_TIMEOUT = 300
#: Seconds of deliveries one job makes before it gives its worker back (the relay queues
#: the endpoint again at once if more is due).
BUDGET = 20.0
RETRY_FIRST, RETRY_CAP = 0.5, 2.0


def job_id(endpoint_id: uuid.UUID | str) -> str:
    return f"webhook-{endpoint_id}"


def aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def due_endpoints(now: datetime) -> list[str]:
    """The endpoints with a row due at `now` and no pause in force (a disabled one too:
    its job fails what it holds)."""
    now = as_utc(now)
    keys = [
        row.group_key
        for row in Outbox.select(Outbox.group_key)
        .where((Outbox.topic == TOPIC) & (Outbox.state == "pending") & (Outbox.due_at <= now))
        .distinct()
    ]
    ids = [key.split(":", 1)[1] for key in keys if key]
    if not ids:
        return []
    paused = {
        str(e.id)
        for e in WebhookEndpoint.select(WebhookEndpoint.id).where(
            WebhookEndpoint.id.in_(ids) & WebhookEndpoint.disabled_at.is_null() & (WebhookEndpoint.paused_until > now)
        )
    }
    return [i for i in ids if i not in paused]


def enqueue(queue: Queue, endpoint_id: str) -> bool:
    """Queue the endpoint's job unless a live one exists."""
    return queueing.enqueue_once(
        queue,
        deliver_endpoint,
        endpoint_id,
        job_id=job_id(endpoint_id),
        replace=lambda job: True,
        job_timeout=JOB_TIMEOUT,
        result_ttl=0,
        failure_ttl=3600,
    )[1]


@takes_context
def deliver_endpoint(endpoint_id: str, *, context: JobContext) -> int:
    """Deliver the endpoint's due rows one after another; how many were delivered."""
    return deliver_due(endpoint_id, context.config)


def deliver_due(endpoint_id: str, config: Config, budget: float = BUDGET) -> int:
    started = time.monotonic()
    delivered = 0
    group = group_key(endpoint_id)
    with db.connection_context():
        while time.monotonic() - started < budget:
            now = aware(config.clock())
            endpoint = WebhookEndpoint.get_or_none(WebhookEndpoint.id == endpoint_id)
            if endpoint is None or endpoint.disabled_at is not None:
                given_up = _fail_pending(group, now, "disabled" if endpoint else "endpoint_removed")
                log.info("webhook endpoint %s: disabled, %d delivery(ies) dropped", endpoint_id, given_up)
                return delivered
            if endpoint.paused_until is not None and as_utc(endpoint.paused_until) > as_utc(now):
                return delivered
            row = (
                Outbox.select()
                .where((Outbox.group_key == group) & (Outbox.state == "pending") & (Outbox.due_at <= as_utc(now)))
                .order_by(Outbox.due_at, Outbox.id)
                .first()
            )
            if row is None:
                return delivered
            event = ChangeEvent.get_or_none(ChangeEvent.id == row.data.get("event"))
            if event is None:  # past the log's keeping
                Outbox.finish(row.id, now, "event_gone", state="failed")
                continue
            attempt = delivery.post(event, endpoint, config, now)
            done_at = aware(config.clock())
            if attempt.delivered:
                _delivered(row, endpoint, attempt, done_at)
                delivered += 1
                continue
            if attempt.gone:
                _disable(endpoint, "gone", done_at)
                Outbox.update(attempts=Outbox.attempts + 1).where(Outbox.id == row.id).execute()
                _fail_pending(group, done_at, "http_410")
                log.warning("webhook endpoint %s answered 410: disabled", endpoint_id)
                return delivered
            _failed(row, endpoint, attempt, done_at, config)
            return delivered
    return delivered


def _delivered(row: Outbox, endpoint: WebhookEndpoint, attempt: delivery.Attempt, now: datetime) -> None:
    with db.atomic():
        Outbox.update(attempts=Outbox.attempts + 1).where(Outbox.id == row.id).execute()
        Outbox.finish(row.id, now, f"{attempt.word} {round(attempt.seconds * 1000)} ms")
        if endpoint.failures or endpoint.paused_until is not None:
            WebhookEndpoint.update(failures=0, failing_since=None, paused_until=None).where(
                WebhookEndpoint.id == endpoint.id
            ).execute()
            endpoint.failures, endpoint.paused_until = 0, None
    log.info("webhook %d to endpoint %s: %s in %.0f ms", row.id, endpoint.id, attempt.word, attempt.seconds * 1000)


def schedule(config: Config) -> timedelta:
    """How long a row is tried: the whole of WEBHOOK_RETRY_DELAYS."""
    return timedelta(seconds=sum(config.webhook_retry_intervals))


def _failed(row: Outbox, endpoint: WebhookEndpoint, attempt: delivery.Attempt, now: datetime, config: Config) -> None:
    delays = config.webhook_retry_intervals
    failures = endpoint.failures + 1
    pause = timedelta(seconds=delays[min(failures, len(delays)) - 1])
    failing_since = as_utc(endpoint.failing_since) if endpoint.failing_since else as_utc(now)
    with db.atomic():
        Outbox.update(attempts=Outbox.attempts + 1, outcome=attempt.word[:40]).where(Outbox.id == row.id).execute()
        # Rows whose whole schedule has passed are failed for good (this one included).
        too_old = as_utc(now) - schedule(config)
        Outbox.update(state="failed", done_at=as_utc(now), outcome=attempt.word[:40]).where(
            (Outbox.group_key == row.group_key) & (Outbox.state == "pending") & (Outbox.created_at < too_old)
        ).execute()
        WebhookEndpoint.update(failures=failures, failing_since=failing_since, paused_until=as_utc(now) + pause).where(
            WebhookEndpoint.id == endpoint.id
        ).execute()
        if as_utc(now) - failing_since >= timedelta(days=config.webhook_disable_after_days):
            _disable(endpoint, "failing", now)
    log.warning(
        "webhook %d to endpoint %s: %s after %.0f ms; the endpoint is tried again in %s",
        row.id,
        endpoint.id,
        attempt.word,
        attempt.seconds * 1000,
        pause,
    )


def _disable(endpoint: WebhookEndpoint, reason: str, now: datetime) -> None:
    with db.atomic():
        changed = (
            WebhookEndpoint.update(disabled_at=as_utc(now), disabled_reason=reason, paused_until=None)
            .where((WebhookEndpoint.id == endpoint.id) & WebhookEndpoint.disabled_at.is_null())
            .execute()
        )
        if changed:
            Outbox.add(
                "webhook.disabled",
                {"endpoint": str(endpoint.id), "reason": reason},
                now,
                clinic_id=endpoint.clinic_id,
                dedup_key=f"webhook.disabled:{endpoint.id}:{as_utc(now).date()}",
            )


def _fail_pending(group: str, now: datetime, word: str) -> int:
    return (
        Outbox.update(state="failed", done_at=as_utc(now), outcome=word[:40])
        .where((Outbox.group_key == group) & (Outbox.state == "pending"))
        .execute()
    )


class WebhookRelay:
    def __init__(self, queue: Queue, config: Config) -> None:
        self.queue = queue
        self.config = config

    def relay_due(self) -> int:
        with db.connection_context():
            ChangeEvent.place()  # the event log's order (models/change_events.py)
            due = due_endpoints(self.config.clock())
        return sum(enqueue(self.queue, endpoint) for endpoint in due)

    def run(self, stop: threading.Event) -> None:
        backoff = RETRY_FIRST
        failing = False
        while not stop.is_set():
            try:
                self.relay_due()
                if failing:
                    log.info("webhook relay: database and Redis answer again")
                    failing = False
                backoff = RETRY_FIRST
                stop.wait(self.config.webhook_poll_seconds)
            except (pw.DatabaseError, pw.InterfaceError, psycopg2.Error, redis.RedisError, OSError) as exc:
                if not failing:
                    log.warning("webhook relay: %s; retrying every %.0f s at most", type(exc).__name__, RETRY_CAP)
                    failing = True
                stop.wait(backoff)
                backoff = min(backoff * 2, RETRY_CAP)


def start(queue: Queue, config: Config, **options: Any) -> tuple[threading.Thread, threading.Event]:
    """Run a webhook relay in a daemon thread of this process; set the event to stop it."""
    stop = threading.Event()
    relay = WebhookRelay(queue, config)
    thread = threading.Thread(target=relay.run, args=(stop,), name="webhook-relay", daemon=True)
    thread.start()
    return thread, stop
