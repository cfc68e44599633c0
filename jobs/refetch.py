"""Re-fetching an expired recording link from the platform (an RQ job).

`refetch_recording(call_id, as_of)` is idempotent: it re-reads the call and does nothing
when the call already has a link with time left or is known to be gone, so concurrent
plays of one call cost one platform round trip. A deleted recording (404/410) or missing
credentials are remembered on the call; a transient failure (timeout, connection error,
5xx) raises so RQ retries it after `PLATFORM_RETRY_DELAYS`; any other refusal is logged and
the job ends without changing the call (the next play tries again).

A fresh link is stored (and so served) only once what it yields hashes to the bytes the
hand-off delivered (`recordings.matches_handoff`): the `RecordingSid` the platform is asked
about is the switchboard's word, and a steered one must never hand a doctor another
recording. A mismatch makes the recording unavailable (`mismatch`), is audited in the
call's clinic, attributed to the token that handed the call off, and counted in /metrics.
`ensure_refetch` enqueues it once per call; the web side that waits for it is
`jobs/playback.py`.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from rq import Queue
from rq.job import Job

from config import Config
from jobs import queueing
from jobs.context import JobContext, takes_context
from models import Actor, ApiToken, AuditEvent, Call, Clinic
from plumbing import metrics
from plumbing.clock import as_utc
from plumbing.database import db
from safe_fetch import FetchError, UnsafeURL
from voicemail import platform, recordings

log = logging.getLogger(__name__)
QUEUE = queueing.RECORDINGS
JOB_TIMEOUT = 120


def job_id(call_id: uuid.UUID | str) -> str:
    return f"refetch-recording-{call_id}"


@takes_context
def refetch_recording(call_id: str, as_of: str | None = None, *, context: JobContext) -> str:
    """Get a fresh link for the call's recording. `as_of` is the requester's time (ISO);
    the job never reasons with an earlier time than its own clock."""
    job = context
    config = job.config
    now = as_utc(job.now())
    if as_of:
        now = max(now, as_utc(datetime.fromisoformat(as_of)))
    with db.connection_context():
        call = Call.get_or_none(Call.id == uuid.UUID(call_id))
        if call is None:
            return "noop"
        state = recordings.link_state(call, now, config)
        if state.state != "expired":
            return "noop"  # a link with time left, or known to be gone
        creds = platform.credentials_of(Clinic.get_by_id(call.clinic_id), config.secret_keys)
    reference, why_none = recordings.platform_reference(call)
    if creds is None or reference is None:
        reason = "no_credentials" if creds is None else why_none or "no_reference"
        with db.connection_context():
            recordings.remember_gone(call.id, reason, now)
        log.info("call %s: recording unavailable (%s)", call.id, reason)
        return "unavailable"
    client = platform.PlatformClient(config, job.redis)
    try:
        fresh = client.fresh_link(creds, reference, now)
    except platform.RecordingGone as exc:
        with db.connection_context():
            recordings.remember_gone(call.id, "deleted", now)
        log.info("call %s: the platform has deleted the recording (%s)", call.id, exc)
        return "unavailable"
    except FetchError as exc:
        if exc.transient:
            log.warning("call %s: platform unreachable for now, will retry: %s", call.id, exc.message)
            raise
        log.warning("call %s: recording link not re-fetched: %s", call.id, exc.message)
        return "failed"
    except (platform.PlatformError, UnsafeURL) as exc:
        if isinstance(exc, platform.PlatformError) and exc.transient:
            raise
        log.warning("call %s: recording link not re-fetched: %s", call.id, exc)
        return "failed"
    if call.recording_sha256 is not None:
        try:
            same, got = recordings.matches_handoff(fresh.url, call, config)
        except FetchError as exc:
            if exc.transient:
                log.warning("call %s: fresh link not checked for now, will retry: %s", call.id, exc.message)
                raise
            log.warning("call %s: fresh link not usable: %s", call.id, exc.message)
            return "failed"
        except UnsafeURL as exc:
            log.warning("call %s: fresh link not usable: %s", call.id, exc)
            return "failed"
        job.recorder.count(metrics.RECORDING_CHECKS, ("match" if same else "mismatch",))
        if not same:
            _mismatch(call, got, now)
            return "mismatch"
    with db.connection_context():
        Call.update(
            recording_link=fresh.url, recording_link_expires_at=fresh.expires_at, recording_checked_at=as_utc(now)
        ).where(Call.id == call.id).execute()
    log.info("call %s: fresh recording link stored (expires %s)", call.id, fresh.expires_at.isoformat())
    return "fresh"


def _mismatch(call: Call, got: recordings.Fingerprint, now: datetime) -> None:
    """The platform's link for the call's `RecordingSid` yields other bytes than the hand-off
    delivered: the recording is unavailable from now on, and the clinic's audit trail says
    which token's hand-off named it."""
    with db.connection_context(), db.atomic():
        recordings.remember_gone(call.id, "mismatch", now)
        token = ApiToken.get_or_none(ApiToken.id == call.received_by_id) if call.received_by_id else None
        actor = Actor.of(token) if token is not None else Actor("operator", "worker")
        AuditEvent.record(
            actor,
            call.clinic_id,
            "call.recording_mismatch",
            ("call", call.id),
            {
                "expectedBytes": call.recording_bytes,
                "receivedBytes": got.size,
                "expectedSha256": call.recording_sha256,
                "receivedSha256": got.sha256,
            },
            at=now,
        )
    log.warning(
        "call %s: the platform's link for its RecordingSid is another recording (%d bytes, not %d): "
        "served as unavailable",
        call.id,
        got.size,
        call.recording_bytes,
    )


def ensure_refetch(queue: Queue, call_id: uuid.UUID | str, as_of: datetime, config: Config) -> Job:
    """The live re-fetch job of the call, enqueued unless one is queued, running or
    waiting for a retry (`queueing.enqueue_once`: concurrent callers share one job)."""

    def still_expired(job: Job) -> bool:
        # The caller read the call before the lock was taken: the job may have saved a
        # fresh link since. Only a link still expired, read now, needs another fetch.
        return recordings.link_state(Call.get_by_id(call_id), as_of, config).state == "expired"

    job, _ = queueing.enqueue_once(
        queue,
        refetch_recording,
        str(call_id),
        as_utc(as_of).isoformat(),
        job_id=job_id(call_id),
        replace=still_expired,
        job_timeout=JOB_TIMEOUT,
        retry=queueing.retry(config.platform_retry_intervals),
        result_ttl=300,
        failure_ttl=86400,
    )
    return job
