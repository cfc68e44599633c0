"""The storage purge every worker runs, so that storage does not only grow.

Each round deletes the uploads never registered whose link expired over
`UPLOAD_PURGE_GRACE_SECONDS` ago (`documents.uploads.purge_expired_uploads`, both
backends) and, on the local backend, the temporary `.upload-*.part` files a killed
process left behind, as old (`LocalStorage.purge_stale_uploads`); and the other stale
rows: refused hand-offs past `REFUSED_HANDOFF_RETENTION_DAYS`, the answers stored for
an Idempotency-Key past `IDEMPOTENCY_KEY_HOURS`, and the outbox's rows a week after they
were delivered.

Each round also runs the retention (privacy/retention.py): what every clinic keeps only
for as long as it set, the deployment's expired console sessions and links, and the
objects an erasure left listed. Its counts go to the `retention_deleted_total` metric.

A thread of every worker process, like the call relay (jobs/relay.py): a starting worker
purges at once, then every `UPLOAD_PURGE_EVERY_SECONDS`. Workers purging at the same time
take disjoint rows (FOR UPDATE SKIP LOCKED), so running it in every worker needs no
election and goes on while any one worker lives. `python manage.py storage purge` runs
one round by hand. Logs carry counts only, never keys or URLs.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import timedelta

import redis

from config import Config
from documents import attachments, uploads
from models import ChangeEvent, IdempotencyKey, Outbox
from plumbing import metrics
from plumbing.database import db
from privacy import retention
from staff import sessions
from storage import LocalStorage, Storage, make_storage
from switchboard import refusals

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Purged:
    uploads: int  # unregistered uploads removed (object and issued-link row)
    partial_files: int  # temporary files of interrupted local uploads removed
    refused_handoffs: int = 0  # records of refused hand-offs past their retention
    idempotency_keys: int = 0  # stored answers of Idempotency-Keys past their time
    outbox: int = 0  # outbox rows delivered (or failed) over `Outbox.KEEP_DAYS` ago


def purge_storage(storage: Storage, config: Config) -> Purged:
    """One round; needs a database connection (the caller's)."""
    lifetime = attachments.UPLOAD_URL_SECONDS
    grace = config.upload_purge_grace_seconds
    now = config.clock()
    purged = uploads.purge_expired_uploads(storage, now, lifetime=lifetime, grace=grace)
    # A `.part` file younger than that may belong to an upload still streaming.
    partial = storage.purge_stale_uploads(lifetime + grace) if isinstance(storage, LocalStorage) else 0
    refused = refusals.purge(now, config.refused_handoff_retention_days)
    keys = IdempotencyKey.purge(now)
    delivered = Outbox.purge(now) + ChangeEvent.purge(now)
    return Purged(
        uploads=purged, partial_files=partial, refused_handoffs=refused, idempotency_keys=keys, outbox=delivered
    )


def lifetimes(config: Config) -> retention.Lifetimes:
    """The deployment's own periods the retention applies."""
    session = sessions.Lifetime.of(config.console_session_idle_hours, config.console_session_max_hours)
    return retention.Lifetimes(
        session_idle=session.idle,
        session_absolute=session.absolute,
        session_pending=sessions.PENDING_LIFETIME,
        audit_details_without_clinic=timedelta(days=config.retention_audit_details_days),
        disabled_staff=timedelta(days=config.retention_disabled_staff_days),
    )


def retain(storage: Storage, config: Config, recorder: metrics.Recorder) -> retention.Deleted:
    """One retention round (`privacy.retention.run`), counted in `recorder`'s metric;
    returns the totals. Needs a database connection (the caller's)."""
    total = retention.Deleted()
    for deleted in retention.run(storage, config.clock(), lifetimes(config)).values():
        total.add(deleted)
    for kind, count in total.counts().items():
        recorder.count(metrics.RETENTION_DELETED, (kind,), count)
    return total


def run(
    storage: Storage | None,
    config: Config,
    stop: threading.Event,
    recorder: metrics.Recorder,
    connection: redis.Redis | None = None,
) -> None:
    """Purge until `stop` is set, once every `config.upload_purge_every_seconds`; with no
    `storage`, the configured one, built here: a storage misconfigured for the worker is
    then a warning each round, and the worker goes on with its calls."""
    while not stop.is_set():
        try:
            if storage is None:
                storage = make_storage(config)
            with db.connection_context():
                purged = purge_storage(storage, config)
            if purged.uploads or purged.partial_files:
                log.info(
                    "storage purge removed %d unregistered upload(s) and %d interrupted upload file(s)",
                    purged.uploads,
                    purged.partial_files,
                )
            if purged.refused_handoffs:
                log.info("purge removed %d refused hand-off record(s) past their retention", purged.refused_handoffs)
            if purged.idempotency_keys:
                log.info("purge removed %d idempotency key(s) past their time", purged.idempotency_keys)
            if purged.outbox:
                log.info("purge removed %d delivered outbox row(s)", purged.outbox)
            with db.connection_context():
                deleted = retain(storage, config, recorder)
            if deleted.counts():
                log.info(
                    "retention deleted %s",
                    ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in deleted.counts().items()),
                )
            if connection is not None:
                recorder.flush(connection)
        except Exception as exc:
            # Whatever fails (database, bucket, disk), the thread must outlive it: the next
            # round retries, and a batch that failed was rolled back whole.
            log.warning(
                "storage purge failed (%s); next round in %.0f s", type(exc).__name__, config.upload_purge_every_seconds
            )
        stop.wait(config.upload_purge_every_seconds)


def start(
    config: Config,
    recorder: metrics.Recorder,
    storage: Storage | None = None,
    connection: redis.Redis | None = None,
) -> tuple[threading.Thread, threading.Event]:
    """Run the purge in a daemon thread of this process (counted in `recorder`, flushed to
    Redis through `connection` after each round); set the event to stop it."""
    stop = threading.Event()
    thread = threading.Thread(
        target=run, args=(storage, config, stop, recorder, connection), name="storage-purge", daemon=True
    )
    thread.start()
    return thread, stop
