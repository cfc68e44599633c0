"""Call hand-off jobs: download the voicemail safely, transcribe it, create the request.

`ingest_call(call_id)` is idempotent: it re-reads the call, does nothing for a call that
is already done, and relies on the unique `patient_request.call_id` for "at most one
request a call". A transient download failure raises so RQ retries it with backoff;
after the last attempt the call still becomes a request, marked that the recording
could not be fetched, with the reason kept on the call.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from rq import Queue
from rq.job import Job, JobStatus
from rq.worker import Worker
from rq.registry import StartedJobRegistry

from plumbing import metrics
from voicemail import spoken_numbers
from voicemail import transcription
from config import Config
from jobs import leases, queueing
from jobs.runtime import runtime
from plumbing.clock import utc_now
from plumbing.database import db
from models import Call, Clinic, Patient, PatientRequest
from safe_fetch import FetchError, UnsafeURL, download_audio, redact_url

log = logging.getLogger(__name__)
QUEUE = queueing.CALLS


def job_id(call_id: uuid.UUID | str) -> str:
    return f"ingest-call-{call_id}"


def _ingest_options(config: Config) -> dict[str, Any]:
    return dict(job_timeout=config.job_timeout, retry=queueing.retry(config.retry_delays),
                result_ttl=3600, failure_ttl=7 * 86400)


def enqueue_ingest(queue: Queue, call_id: uuid.UUID | str, config: Config) -> None:
    """Queue the ingest job under its stable id, replacing a dead one. Raises `redis.RedisError`."""
    queue.enqueue(ingest_call, str(call_id), job_id=job_id(call_id), **_ingest_options(config))


def ensure_queued(queue: Queue, call_id: uuid.UUID | str, config: Config) -> bool:
    """Queue the call's ingest unless a job for it exists; whether it was queued.
    Raises `redis.RedisError` (the relay keeps the call in its outbox then)."""
    return queueing.enqueue_once(queue, ingest_call, str(call_id), job_id=job_id(call_id),
                                 **_ingest_options(config)) is not None


def job_is_live(job: Job, *, refresh: bool = True) -> bool:
    """Whether the job will still run or finish by itself: waiting (queued, scheduled,
    deferred), or STARTED by a worker that is alive.

    A worker killed with SIGKILL leaves its job STARTED and its worker key in Redis. Such
    a job is dead when the worker key has expired (`jobs.worker.ClinicWorker` beats during
    jobs and lets it expire `HEARTBEAT_TTL` = 70 s after its last beat) or, at once, when
    the worker ran on this host and its process is gone. `refresh=False` trusts the
    status the job was just fetched with.
    """
    status = job.get_status(refresh=refresh)
    if status not in queueing.LIVE_STATES:
        return False
    if status != JobStatus.STARTED:
        return True
    if not job.worker_name:
        return False
    hostname, pid = job.connection.hmget(Worker.redis_worker_namespace_prefix + job.worker_name, "hostname", "pid")
    if hostname is None:
        return False  # the worker stopped beating long enough for its key to expire
    if hostname.decode() == socket.gethostname() and pid and not _process_alive(int(pid)):
        return False
    return True


def _process_alive(pid: int) -> bool:
    """A process with this pid exists here and is not a zombie (a killed worker its
    parent has not reaped yet is dead all the same)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by another user
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: existence is all we can tell
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def forget_job(job: Job) -> None:
    """Delete a dead job and every StartedJobRegistry entry of it (`Job.delete` leaves
    those whose execution record expired), so RQ's abandoned-job cleanup never acts
    later on the fresh job that reuses the id."""
    job.delete()
    registry = StartedJobRegistry(job.origin or QUEUE, connection=job.connection)
    stale = [entry for entry in job.connection.zrange(registry.key, 0, -1)
             if entry.decode().split(":", 1)[0] == job.id]
    if stale:
        job.connection.zrem(registry.key, *stale)


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
    orphans = {call_id: job for call_id, job in zip(pending, jobs)
               if job is None or not job_is_live(job, refresh=False)}
    for call_id in leases.held(orphans):
        del orphans[call_id]
    if orphans:
        with db.connection_context():
            still = {c.id for c in Call.select(Call.id).where(Call.id.in_(list(orphans)) & (Call.state == "pending"))}
        orphans = {call_id: job for call_id, job in orphans.items() if call_id in still}
    for call_id, job in orphans.items():
        if job is not None:
            log.warning("call %s: its job is %s with no live worker; queued again", call_id, job.get_status(refresh=False))
            forget_job(job)
        enqueue_ingest(queue, call_id, config)
    if orphans:
        with db.connection_context():
            Call.update(queued_at=utc_now()).where(Call.id.in_(list(orphans)) & (Call.state == "pending")).execute()
    return len(orphans)


def ingest_call(call_id: str) -> str:
    """Turn the stored call into its request (see the module's docstring), holding the
    call's lease throughout: another live job on the same call (a duplicate queued while
    Redis had forgotten this one) leaves it alone."""
    config = runtime()
    with leases.hold(call_id) as mine:
        if not mine:
            log.info("call %s: another job is working on it", call_id)
            return "busy"
        return _ingest(config, call_id)


def _ingest(config: Config, call_id: str) -> str:
    # whisper.cpp is stopped from inside (its abort callback) this long before RQ's own
    # timeout, which cannot interrupt C code: the job always ends, and ends with a request.
    deadline = time.monotonic() + config.job_timeout - min(JOB_TIMEOUT_MARGIN, config.job_timeout / 5)
    with db.connection_context():
        call = Call.get_or_none(Call.id == uuid.UUID(call_id))
        if call is None or call.state == "done":
            return "noop"
        Call.update(attempts=Call.attempts + 1).where(Call.id == call.id).execute()
        attempts = call.attempts + 1
        clinic = call.clinic
    if not call.recording_url:
        return _finish(call, "no_recording")
    if attempts > config.ingest_max_attempts:
        # Earlier attempts died mid-job (a worker killed or crashed while transcribing):
        # no more tries, but the caller's message still reaches the clinic, to be listened to.
        log.warning("call %s: %d attempts, giving up on the transcript", call.id, attempts - 1)
        return _finish_voicemail(call, clinic, transcription.failed(0.0, None, "attempts_exhausted"))
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="call-") as tmp:
            audio = Path(tmp) / "recording"
            download_audio(
                call.recording_url, audio, max_bytes=config.recording_max_bytes,
                timeout=config.recording_fetch_timeout, allow_loopback=config.unsafe_allow_loopback_fetch,
                ca_certs=config.fetch_ca_bundle or None,
            )
            fetched = time.perf_counter()
            transcript = _transcribe(config, str(audio), clinic, deadline)
    except (UnsafeURL, FetchError) as exc:
        reason = str(exc)
        if getattr(exc, "transient", False) and attempts <= len(config.retry_delays):
            with db.connection_context():
                Call.update(fetch_error=reason).where(Call.id == call.id).execute()
            log.info("call %s: transient failure fetching %s, will retry", call.id, redact_url(call.recording_url))
            raise
        log.warning("call %s: recording not fetched: %s", call.id, reason)
        return _finish(call, "recording_unavailable", fetch_error=reason)
    except transcription.TranscriptionError as exc:
        # Audio that sniffed as MP3/WAV but does not decode, or a model that cannot take
        # the clinic's language: in doubt, a voice message the clinic listens to.
        log.warning("call %s: recording not transcribable: %s", call.id, exc)
        issue = "undecodable" if isinstance(exc, transcription.AudioDecodeError) else "engine_error"
        return _finish_voicemail(call, clinic, transcription.failed(0.0, None, issue))
    metrics.observe_transcription(transcript.model, transcript.duration, transcript.elapsed)
    log.info("call %s: downloaded in %.2f s, transcribed %.1f s of audio in %.2f s (%s, %s, %s)", call.id,
             fetched - started, transcript.duration, transcript.elapsed, transcript.model, transcript.language,
             transcript.status or transcript.message_reason)
    return _finish_voicemail(call, clinic, transcript)


JOB_TIMEOUT_MARGIN = 20  # seconds (at most a fifth of the limit) left after whisper.cpp stops


def _transcribe(config: Config, path: str, clinic: Clinic, deadline: float) -> transcription.Transcript:
    """The clinic's languages to detect among, its own language first (or its one
    language, or any when it has neither)."""
    languages = clinic.caller_languages
    model = config.whisper_model_for(languages[0] if len(languages) == 1 else None)
    engine = transcription.get_transcriber(config.transcriber, model, config.whisper_threads, config.whisper_vad)
    return engine.transcribe(path, languages, deadline=deadline)


def _finish_voicemail(call: Call, clinic: Clinic, t: transcription.Transcript) -> str:
    signals = json.dumps(t.signals(), default=str)
    if not t.message:
        outcome = "missed_call" if clinic.missed_call_requests else "opted_out"
        return _finish(call, outcome, signals=signals, intelligibility=t.message_reason)
    return _finish(
        call, "voice_message", transcript=t.text, language=t.language, signals=signals, intelligibility="speech",
        status=t.status, issue=t.issue, callback=spoken_numbers.find_callback_number(t.text, clinic.country),
    )


_TITLES = {
    "voice_message": "Voice message from {number}",
    "missed_call": "Missed call from {number}",
    "recording_unavailable": "Voice message from {number} (recording could not be fetched)",
}
_KINDS = {"voice_message": "voice_message", "missed_call": "missed_call", "recording_unavailable": "voice_message"}


def _finish(call: Call, outcome: str, *, transcript: str | None = None, language: str | None = None,
            signals: str | None = None, intelligibility: str | None = None, fetch_error: str | None = None,
            status: str | None = None, issue: str | None = None, callback: str | None = None) -> str:
    """Record the outcome and create the request, once, in one transaction."""
    with db.connection_context(), db.atomic():
        clinic = Clinic.get_by_id(call.clinic_id)
        if outcome in _KINDS:
            patient = Patient.for_caller(clinic, call.call_from)
            title = _TITLES[outcome].format(number=patient.phone or call.call_from)
            PatientRequest.insert(
                clinic=clinic, patient=patient, kind=_KINDS[outcome], title=title[:300], call=call.id,
            ).on_conflict_ignore().execute()
        Call.update(
            state="done", outcome=outcome, processed_at=utc_now(), transcript=transcript,
            transcript_language=language, transcript_signals=signals, intelligibility=intelligibility,
            fetch_error=fetch_error, transcript_status=status, transcript_issue=issue, callback_number=callback,
        ).where((Call.id == call.id) & (Call.state == "pending")).execute()
    return outcome
