"""Re-fetching expired recording links from the switchboard platform (RQ), and the
web side of it: enqueue under a stable job id per call, wait for it, bounded.

`refetch_recording(call_id, as_of)` is idempotent: it re-reads the call and does nothing
when the call already has a link with time left or is known to be gone, so concurrent
plays of one call cost one platform round trip. A deleted recording (404/410) or missing
credentials are remembered on the call; a transient failure (timeout, connection error,
5xx) raises so RQ retries it after `PBX_RETRY_DELAYS`; any other refusal is logged and
the job ends without changing the call (the next play tries again).
"""
from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache

import redis
from rq import Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry

import recordings
from config import Config
from jobs.calls import runtime
from models import Call, Clinic, as_utc, db, iso_utc, utc_now
from safe_fetch import FetchError, UnsafeURL

log = logging.getLogger(__name__)
QUEUE = "recordings"
JOB_TIMEOUT = 120
_LIVE = {JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED, JobStatus.CREATED}
_POLL = 0.05
_SCHEDULER_LAG = 1.5  # seconds RQ's scheduler may take to re-queue a due retry, plus the run


def job_id(call_id: uuid.UUID | str) -> str:
    return f"refetch-recording-{call_id}"


@lru_cache(maxsize=1)
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10)


# --- the job -------------------------------------------------------------------------------

def refetch_recording(call_id: str, as_of: str | None = None) -> str:
    """Get a fresh link for the call's recording. `as_of` is the requester's time (ISO);
    the job never reasons with an earlier time than its own clock."""
    config = runtime()
    now = utc_now()
    if as_of:
        now = max(now, as_utc(datetime.fromisoformat(as_of)))
    with db.connection_context():
        call = Call.get_or_none(Call.id == uuid.UUID(call_id))
        if call is None:
            return "noop"
        state = recordings.link_state(call, now, config)
        if state.state != "expired":
            return "noop"  # a link with time left, or known to be gone
        creds = recordings.credentials_of(Clinic.get_by_id(call.clinic_id), config.secret_key)
    reference = recordings.recording_reference(call)
    if creds is None or reference is None:
        reason = "no_credentials" if creds is None else "no_reference"
        with db.connection_context():
            recordings.remember_gone(call.id, reason, now)
        log.info("call %s: recording unavailable (%s)", call.id, reason)
        return "unavailable"
    client = recordings.PlatformClient(config, _redis(config.redis_url))
    try:
        fresh = client.fresh_link(creds, reference, now)
    except recordings.RecordingGone as exc:
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
    except (recordings.PlatformError, UnsafeURL) as exc:
        if isinstance(exc, recordings.PlatformError) and exc.transient:
            raise
        log.warning("call %s: recording link not re-fetched: %s", call.id, exc)
        return "failed"
    with db.connection_context():
        Call.update(recording_link=fresh.url, recording_link_expires_at=fresh.expires_at,
                    recording_checked_at=as_utc(now)).where(Call.id == call.id).execute()
    log.info("call %s: fresh recording link stored (expires %s)", call.id, fresh.expires_at.isoformat())
    return "fresh"


# --- web side ------------------------------------------------------------------------------

def ensure_refetch(queue: Queue, call_id: uuid.UUID | str, as_of: datetime, config: Config) -> Job:
    """The live re-fetch job of the call, enqueued unless one is queued, running or
    waiting for a retry. Concurrent callers share one job (a lock around the check)."""
    jid = job_id(call_id)
    conn = queue.connection
    with conn.lock(f"lock:{jid}", timeout=10, blocking_timeout=5):
        try:
            job = Job.fetch(jid, connection=conn)
        except NoSuchJobError:
            job = None
        if job is not None:
            if job.get_status(refresh=False) in _LIVE:
                return job
            job.delete()
        delays = config.pbx_retry_intervals
        return queue.enqueue(
            refetch_recording, str(call_id), as_utc(as_of).isoformat(), job_id=jid, job_timeout=JOB_TIMEOUT,
            retry=Retry(max=len(delays), interval=delays) if delays else None,
            result_ttl=300, failure_ttl=86400,
        )


@dataclass(frozen=True)
class PlayAnswer:
    """`link` (302 to url), `gone` (410, reason) or `later` (503, retry_after seconds)."""

    kind: str
    url: str | None = None
    reason: str | None = None
    retry_after: int = 0


class RecordingPlayer:
    """What the detail shows and what a play answers, for requests made from calls."""

    def __init__(self, config: Config, queue: Queue) -> None:
        self.config = config
        self.queue = queue

    def _resolve(self, call: Call, now: datetime) -> recordings.LinkState:
        """The link state; an expired link of a clinic without credentials is gone (remembered)."""
        state = recordings.link_state(call, now, self.config)
        if state.state == "expired":
            clinic = Clinic.get_by_id(call.clinic_id)
            if recordings.credentials_of(clinic, self.config.secret_key) is None:
                recordings.remember_gone(call.id, "no_credentials", now)
                return recordings.LinkState("unavailable", reason="no_credentials")
        return state

    def describe(self, call: Call, now: datetime) -> dict[str, object]:
        """The call as the request detail carries it. An expired link starts its re-fetch
        (not waited for), so a play right after is answered from the fresh link."""
        state = self._resolve(call, now)
        if state.state == "expired":
            try:
                ensure_refetch(self.queue, call.id, now, self.config)
            except redis.RedisError as exc:
                log.warning("call %s: re-fetch not queued (Redis: %s)", call.id, type(exc).__name__)
        return {
            "callSid": call.call_sid, "callFrom": call.call_from, "callbackNumber": call.callback_number,
            "callTo": call.call_to, "status": call.status, "receivedAt": iso_utc(call.received_at),
            "transcript": call.transcript, "transcriptStatus": call.transcript_status,
            "transcriptIssue": call.transcript_issue, "language": call.transcript_language,
            # `language` is the name the detail documents; `transcriptLanguage` was shown first.
            "transcriptLanguage": call.transcript_language,
            "extra": call.extra, "recording": state.describe(),
        }

    def play(self, call: Call, now: datetime) -> PlayAnswer:
        state = self._resolve(call, now)
        if state.state == "available":
            return PlayAnswer("link", url=state.url)
        if state.state == "unavailable":
            return PlayAnswer("gone", reason=state.reason)
        try:
            job = ensure_refetch(self.queue, call.id, now, self.config)
        except redis.RedisError as exc:
            log.warning("call %s: re-fetch not queued (Redis: %s)", call.id, type(exc).__name__)
            return PlayAnswer("later", retry_after=5)
        return self._await(job, call.id, now)

    def _await(self, job: Job, call_id: uuid.UUID, now: datetime) -> PlayAnswer:
        deadline = time.monotonic() + self.config.pbx_play_wait_seconds
        while True:
            try:
                status = job.get_status(refresh=True)
            except (NoSuchJobError, redis.RedisError):
                status = None
            if status in (JobStatus.FINISHED, None):
                call = Call.get_by_id(call_id)
                state = self._resolve(call, now)
                if state.state == "available":
                    return PlayAnswer("link", url=state.url)
                if state.state == "unavailable":
                    return PlayAnswer("gone", reason=state.reason)
                return PlayAnswer("later", retry_after=self._retry_after(None))
            if status == JobStatus.SCHEDULED:  # a transient failure; RQ retries it later
                due = self._scheduled_in(job)
                if due is None or due + _SCHEDULER_LAG >= deadline - time.monotonic():
                    return PlayAnswer("later", retry_after=self._retry_after(job))
            if status not in _LIVE:  # failed after its last retry, stopped, canceled
                return PlayAnswer("later", retry_after=self._retry_after(None))
            if time.monotonic() >= deadline:
                return PlayAnswer("later", retry_after=2)
            time.sleep(_POLL)

    def _scheduled_in(self, job: Job) -> float | None:
        """Seconds until RQ's scheduler re-queues the job (its retry), if known."""
        try:
            at = ScheduledJobRegistry(queue=self.queue).get_scheduled_time(job)
        except (NoSuchJobError, redis.RedisError, ValueError, TypeError):
            return None
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)
        return max(0.0, (at - datetime.now(timezone.utc)).total_seconds())

    def _retry_after(self, job: Job | None) -> int:
        due = self._scheduled_in(job) if job is not None else None
        if due is not None:
            return max(1, math.ceil(due + _SCHEDULER_LAG))
        delays = self.config.pbx_retry_intervals
        return max(1, delays[0] if delays else 5)
