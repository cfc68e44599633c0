"""Playing a call's recording from a request, the web side of the re-fetch job: what the
detail shows, and a play answered with a 302 to a live link, 410 when the recording is gone,
or 503 + Retry-After while a re-fetch (`jobs/refetch.py`) has not brought a fresh link within
`PLATFORM_PLAY_WAIT_SECONDS`. The re-fetch is enqueued under a stable job id per call
(`refetch.ensure_refetch`) and waited for, bounded. The resources (the API's play route and
the console's player) use it; nothing below them does.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry

from config import Config
from jobs import queueing
from jobs.refetch import ensure_refetch, job_id
from models import Call, Clinic
from plumbing import clock
from plumbing.clock import iso_utc
from plumbing.database import release_connection
from voicemail import platform, recordings

log = logging.getLogger(__name__)
_POLL = 0.05
_SCHEDULER_LAG = 1.5  # seconds RQ's scheduler may take to re-queue a due retry, plus the run


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
            if platform.credentials_of(clinic, self.config.secret_keys) is None:
                recordings.remember_gone(call.id, "no_credentials", now)
                return recordings.LinkState("unavailable", reason="no_credentials")
        return state

    def states(self, calls: Iterable[Call], now: datetime) -> dict[uuid.UUID, recordings.PlayState]:
        """What a page says about each call's recording, judged as `play` would judge it, but
        from the stored calls and the re-fetch jobs' state alone: nothing is asked of the
        platform, nothing is enqueued and nothing is written (an inbox page of expired links
        must not start a re-fetch per row). One query per clinic for its marker words and
        credentials, one Redis round trip for the jobs of the expired links."""
        clinics: dict[uuid.UUID, tuple[list[str], bool]] = {}
        links: dict[uuid.UUID, tuple[recordings.LinkState, bool]] = {}
        for call in calls:
            if call.clinic_id not in clinics:
                clinic = Clinic.get_by_id(call.clinic_id)
                creds = platform.credentials_of(clinic, self.config.secret_keys) is not None
                clinics[call.clinic_id] = (recordings.clinic_marker_words(clinic, self.config), creds)
            markers, creds = clinics[call.clinic_id]
            links[call.id] = (recordings.link_state(call, now, self.config, markers), creds)
        failing = self._failing_refetches(
            [call_id for call_id, (state, creds) in links.items() if state.state == "expired" and creds]
        )
        return {
            call_id: recordings.play_state(state, creds, call_id in failing)
            for call_id, (state, creds) in links.items()
        }

    def _failing_refetches(self, call_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        """The calls whose re-fetch job failed for now: waiting for its retry (a transient
        failure: the platform unreachable or answering 5xx) or failed after its last one.
        Redis unreachable: none known (the page offers the player; a play tells)."""
        if not call_ids:
            return set()
        try:
            jobs = Job.fetch_many([job_id(c) for c in call_ids], connection=self.queue.connection)
        except redis.RedisError as exc:
            log.warning("re-fetch jobs not read (Redis: %s)", type(exc).__name__)
            return set()
        failing = {JobStatus.SCHEDULED, JobStatus.FAILED}
        return {c for c, job in zip(call_ids, jobs) if job is not None and job.get_status(refresh=False) in failing}

    def describe(self, call: Call, now: datetime) -> dict[str, object]:
        """The call as the request detail carries it. An expired link starts its re-fetch
        (not waited for), so a play right after is answered from the fresh link."""
        state = self._resolve(call, now)
        if state.state == "expired":
            release_connection()  # as in `play`: the call's lock may be waited for
            try:
                ensure_refetch(self.queue, call.id, now, self.config)
            except redis.RedisError as exc:
                log.warning("call %s: re-fetch not queued (Redis: %s)", call.id, type(exc).__name__)
        return {
            "callSid": call.call_sid,
            "callFrom": call.call_from,
            "callbackNumber": call.callback_number,
            "unconfirmedCallbackNumber": call.heard_number,
            "callbackNumberAt": call.callback_number_at,
            "callTo": call.call_to,
            "status": call.status,
            "receivedAt": iso_utc(call.received_at),
            "transcript": call.transcript,
            "correctedTranscript": call.corrected_transcript,
            "transcriptCorrectedAt": iso_utc(call.corrected_at),
            "transcriptStatus": call.transcript_status,
            "transcriptIssue": call.transcript_issue,
            "language": call.transcript_language,
            # `language` is the name the detail documents; `transcriptLanguage` was shown first.
            "transcriptLanguage": call.transcript_language,
            "extra": call.extra,
            "recording": state.describe(),
        }

    def play(self, call: Call, now: datetime) -> PlayAnswer:
        state = self._resolve(call, now)
        if state.state == "available":
            return PlayAnswer("link", url=state.url)
        if state.state == "unavailable":
            return PlayAnswer("gone", reason=state.reason)
        release_connection()  # ensure_refetch may wait for the call's lock (plays of one call share a job)
        try:
            job = ensure_refetch(self.queue, call.id, now, self.config)
        except redis.RedisError as exc:
            log.warning("call %s: re-fetch not queued (Redis: %s)", call.id, type(exc).__name__)
            return PlayAnswer("later", retry_after=5)
        return self._await(job, call.id, now)

    def _await(self, job: Job, call_id: uuid.UUID, now: datetime) -> PlayAnswer:
        # Seconds of waiting on the job: no pooled connection is held meanwhile (the
        # re-read of the call below takes one again).
        release_connection()
        deadline = time.monotonic() + self.config.platform_play_wait_seconds
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
            if status not in queueing.LIVE_STATES:  # failed after its last retry, stopped, canceled
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
            at = at.replace(tzinfo=UTC)
        return max(0.0, (at - clock.wall()).total_seconds())  # RQ schedules by the real time

    def _retry_after(self, job: Job | None) -> int:
        due = self._scheduled_in(job) if job is not None else None
        if due is not None:
            return max(1, math.ceil(due + _SCHEDULER_LAG))
        delays = self.config.platform_retry_intervals
        return max(1, delays[0] if delays else 5)
