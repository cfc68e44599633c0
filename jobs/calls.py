"""The ingest job: download the voicemail safely, transcribe it, create the request.

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
from pathlib import Path
from typing import Any

from config import Config
from jobs import leases, queueing
from jobs.runtime import job_config
from models import Call, Clinic, Triage, finished_calls
from plumbing import metrics
from plumbing.database import db
from safe_fetch import FetchError, UnsafeURL, download_audio, redact_url
from triage import inbox as triage
from voicemail import recordings, spoken_numbers, transcription

log = logging.getLogger(__name__)
QUEUE = queueing.CALLS


def ingest_call(call_id: str) -> str:
    """Turn the stored call into its request (see the module's docstring), holding the
    call's lease throughout: another live job on the same call (a duplicate queued while
    Redis had forgotten this one) leaves it alone."""
    config = job_config()
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
                call.recording_url,
                audio,
                max_bytes=config.recording_max_bytes,
                timeout=config.recording_fetch_timeout,
                allow_loopback=config.unsafe_allow_loopback_fetch,
                ca_certs=config.fetch_ca_bundle or None,
            )
            fetched = time.perf_counter()
            # The recording is bound to these bytes: a link re-fetched later from the
            # platform is served only if it yields them (voicemail/recordings.py).
            held = recordings.Fingerprint.of_file(audio)
            with db.connection_context():
                Call.update(recording_sha256=held.sha256, recording_bytes=held.size).where(Call.id == call.id).execute()
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
    log.info(
        "call %s: downloaded in %.2f s, transcribed %.1f s of audio in %.2f s (%s, %s, %s)",
        call.id,
        fetched - started,
        transcript.duration,
        transcript.elapsed,
        transcript.model,
        transcript.language,
        transcript.status or transcript.message_reason,
    )
    return _finish_voicemail(call, clinic, transcript)


JOB_TIMEOUT_MARGIN = 20  # seconds (at most a fifth of the limit) left after whisper.cpp stops


def _transcribe(config: Config, path: str, clinic: Clinic, deadline: float) -> transcription.Transcript:
    """The clinic's languages to detect among, its own language first (or its one
    language, or any when it has neither)."""
    languages = clinic.caller_languages
    model = config.whisper_model_for(languages[0] if len(languages) == 1 else None)
    engine = transcription.get_transcriber(config.transcriber, model, config.whisper_threads, config.whisper_vad)
    return engine.transcribe(
        path, languages, deadline=deadline, max_seconds=config.recording_max_seconds, country=clinic.country
    )


def _finish_voicemail(call: Call, clinic: Clinic, t: transcription.Transcript) -> str:
    signals = json.dumps(t.signals(), default=str)
    if not t.message:
        outcome = "missed_call" if clinic.missed_call_requests else "opted_out"
        return _finish(call, outcome, signals=signals, intelligibility=t.message_reason)
    heard = t.heard_number
    callback, unconfirmed = spoken_numbers.callback_numbers(
        heard and heard.number, bool(heard and heard.confirmed), call.call_from, clinic.country
    )
    return _finish(
        call,
        "voice_message",
        triage=_triage(clinic, t),
        transcript=t.text,
        language=t.language,
        signals=signals,
        intelligibility="speech",
        status=t.status,
        issue=t.issue,
        callback=callback,
        heard_number=unconfirmed,
        callback_number_at=heard.start if heard and heard.number else None,
    )


def _triage(clinic: Clinic, t: transcription.Transcript) -> Triage | None:
    """What the transcript suggests (a request type, urgency); a failure to read it never
    keeps the message from the inbox."""
    if not t.text:
        return None
    try:
        with db.connection_context():
            return triage.read_transcript(clinic.id, t.text, t.language)
    except Exception:
        log.exception("clinic %s: the transcript's request type and urgency were not read", clinic.id)
        return None


def _finish(call: Call, outcome: str, **results: Any) -> str:
    """Record the outcome and create the request, once, in one transaction (`finished_calls.finish`)."""
    with db.connection_context():
        finished_calls.finish(call, outcome, **results)
    return outcome
