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
import tempfile
import time
import uuid
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

import redis
from rq import Queue, Retry
from rq.job import Job, JobStatus

import transcription
from config import Config
from models import Call, Clinic, Patient, PatientRequest, bind_database, db, utc_now
from safe_fetch import FetchError, UnsafeURL, download_audio, redact_url

log = logging.getLogger(__name__)
QUEUE = "calls"


@lru_cache(maxsize=1)
def runtime() -> Config:
    """The worker's configuration; binds the database once per process."""
    config = Config.from_env()
    bind_database(config.database_url, pooled=False)
    return config


def job_id(call_id: uuid.UUID | str) -> str:
    return f"ingest-call-{call_id}"


def enqueue_ingest(queue: Queue, call_id: uuid.UUID | str, config: Config) -> bool:
    """Queue the ingest job under a stable id. False (logged) when Redis is unreachable:
    the call is already committed and `requeue` or a starting worker picks it up."""
    delays = config.retry_delays
    try:
        queue.enqueue(
            ingest_call, str(call_id), job_id=job_id(call_id), job_timeout=config.job_timeout,
            retry=Retry(max=len(delays), interval=delays) if delays else None,
            result_ttl=3600, failure_ttl=7 * 86400,
        )
        return True
    except redis.RedisError as exc:
        log.warning("call %s kept, not queued (Redis: %s); run `manage.py requeue`", call_id, type(exc).__name__)
        return False


def ensure_queued(queue: Queue, call_id: uuid.UUID | str, config: Config, *, known_new: bool = False) -> bool:
    """Queue the call's ingest unless a job for it exists (a retried hand-off of a call
    whose first enqueue found Redis down gets queued now). Never raises for Redis."""
    try:
        if not known_new and Job.exists(job_id(call_id), queue.connection):
            return False
    except redis.RedisError:
        return False
    return enqueue_ingest(queue, call_id, config)


def requeue_pending(queue: Queue, config: Config) -> int:
    """Queue every pending call that has no live job. Returns how many were queued."""
    live = {JobStatus.QUEUED, JobStatus.STARTED, JobStatus.SCHEDULED, JobStatus.DEFERRED}
    queued = 0
    with db.connection_context():
        pending = [c.id for c in Call.select(Call.id).where(Call.state == "pending")]
    for call_id in pending:
        job = Job.fetch(job_id(call_id), connection=queue.connection) if Job.exists(job_id(call_id), queue.connection) else None
        if job is not None and job.get_status(refresh=True) in live:
            continue
        if job is not None:
            job.delete()
        queued += enqueue_ingest(queue, call_id, config)
    return queued


def ingest_call(call_id: str) -> str:
    config = runtime()
    with db.connection_context():
        call = Call.get_or_none(Call.id == uuid.UUID(call_id))
        if call is None or call.state == "done":
            return "noop"
        Call.update(attempts=Call.attempts + 1).where(Call.id == call.id).execute()
        attempts = call.attempts + 1
        clinic = call.clinic
    if not call.recording_url:
        return _finish(call, "no_recording")
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
            transcript = _transcribe(config, str(audio), clinic.language)
            log.info("call %s: downloaded in %.2f s, transcribed %.1f s of audio in %.2f s (%s)", call.id,
                     fetched - started, transcript.duration, transcript.elapsed, transcript.model)
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
        log.warning("call %s: recording not transcribable: %s", call.id, exc)
        return _finish(call, "missed_call", intelligibility="undecodable")

    intelligible, reason = transcription.is_intelligible(transcript)
    signals = json.dumps({k: v for k, v in asdict(transcript).items() if k not in ("text", "segments")}, default=str)
    if intelligible:
        return _finish(call, "voice_message", transcript=transcript.text, language=transcript.language,
                       signals=signals, intelligibility="ok")
    outcome = "missed_call" if clinic.missed_call_requests else "opted_out"
    return _finish(call, outcome, signals=signals, intelligibility=reason)


def _transcribe(config: Config, path: str, language: str | None) -> transcription.Transcript:
    model = config.whisper_model_for(language)
    engine = transcription.get_transcriber(config.transcriber, model, config.whisper_threads, config.whisper_vad)
    return engine.transcribe(path, language)


_TITLES = {
    "voice_message": "Voice message from {number}",
    "missed_call": "Missed call from {number}",
    "recording_unavailable": "Voice message from {number} (recording could not be fetched)",
}
_KINDS = {"voice_message": "voice_message", "missed_call": "missed_call", "recording_unavailable": "voice_message"}


def _finish(call: Call, outcome: str, *, transcript: str | None = None, language: str | None = None,
            signals: str | None = None, intelligibility: str | None = None, fetch_error: str | None = None) -> str:
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
            fetch_error=fetch_error,
        ).where((Call.id == call.id) & (Call.state == "pending")).execute()
    return outcome
