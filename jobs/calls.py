"""The ingest job: download the voicemail safely, transcribe it, create the request.

`ingest_call(call_id)` is idempotent: it re-reads the call, does nothing for a call that
is already done, and relies on the unique `patient_request.call_id` for "at most one
request a call". A transient download failure raises so RQ retries it with backoff;
after the last attempt the call still becomes a request, marked that the recording
could not be fetched, with the reason kept on the call.

An infrastructure failure (the database or Redis unreachable) is not the recording's: the
job gives the call back ("deferred") instead of waiting out the download retries, and
this worker's relay queues it again as soon as both answer (jobs/relay.py), so the call
neither waits minutes after an outage nor holds its clinic's place in the fair share.

A worker asked to stop (the platform's SIGTERM) stops a transcription at its next
checkpoint (whisper.cpp's abort and encoder callbacks: a second or so apart) and hands the
job back: RQ queues it again at once for another worker (`HandBack`), what was transcribed
is dropped rather than delivered partial, and the attempt is not counted. The next run
transcribes the whole recording: the same transcript as an uninterrupted run. All within
the worker's grace, `WORKER_STOP_SECONDS`.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from rq import Retry

from jobs import leases, queueing, stopping
from jobs.context import JobContext, takes_context
from models import Call, Clinic, Triage
from plumbing.database import UNREACHABLE as DATABASE_UNREACHABLE
from plumbing.database import db
from safe_fetch import FetchError, UnsafeURL, download_audio, redact_url
from switchboard import finished_calls
from triage import clinic_words as triage
from voicemail import recordings, spoken_numbers, transcription

log = logging.getLogger(__name__)
QUEUE = queueing.CALLS


@takes_context
def ingest_call(call_id: str, *, context: JobContext) -> str | Retry:
    """Turn the stored call into its request (see the module's docstring), holding the
    call's lease throughout: another live job on the same call (a duplicate queued while
    Redis had forgotten this one) leaves it alone. Returns the outcome's word, or a
    `Retry` that hands the job back (the worker stopping)."""
    job = context
    try:
        with leases.hold(call_id) as mine:
            if not mine:
                log.info("call %s: another job is working on it", call_id)
                return "busy"
            return _ingest(job, call_id)
    except UNREACHABLE as exc:
        log.warning(
            "call %s: %s; the call goes back to the relay, queued again once the database and Redis answer",
            call_id,
            type(exc).__name__,
        )
        job.relay.ingest_deferred()
        return "deferred"
    except HandBack as stopped:
        log.info("call %s: the worker is stopping; job handed back %s", call_id, stopped)
        return Retry(max=HAND_BACKS, interval=0)


class HandBack(Exception):
    """The worker is stopping: give the job back before doing (more of) its work."""


#: A job is handed back at most this often (RQ counts the returned `Retry`s); past it, it
#: fails, and the relay's sweep queues the call again.
HAND_BACKS = 100


def _hand_back(call: Call, when: str) -> None:
    """The attempt this run counted is not one: nothing came of it."""
    with db.connection_context():
        Call.update(attempts=Call.attempts - 1).where((Call.id == call.id) & (Call.attempts > 0)).execute()
    raise HandBack(when)


#: The database or Redis unreachable (down, restarting, the connection dropped): the
#: infrastructure's failures, not the call's.
UNREACHABLE: tuple[type[BaseException], ...] = (*DATABASE_UNREACHABLE, redis.ConnectionError, redis.TimeoutError)


def _ingest(job: JobContext, call_id: str) -> str:
    config = job.config
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
        return _finish(job, call, "no_recording")
    if stopping.stopping():
        _hand_back(call, "before its download")
    if attempts > config.ingest_max_attempts:
        # Earlier attempts died mid-job (a worker killed or crashed while transcribing):
        # no more tries, but the caller's message still reaches the clinic, to be listened to.
        log.warning("call %s: %d attempts, giving up on the transcript", call.id, attempts - 1)
        return _finish_voicemail(job, call, clinic, transcription.failed(0.0, None, "attempts_exhausted"))
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
            if stopping.stopping():
                _hand_back(call, "after its download")
            transcript = _transcribe(job, str(audio), clinic, deadline)
            if transcript.aborted and stopping.stopping():
                _hand_back(call, f"{time.perf_counter() - fetched:.1f} s into its transcription")
    except (UnsafeURL, FetchError) as exc:
        reason = str(exc)
        if getattr(exc, "transient", False) and attempts <= len(config.retry_delays):
            with db.connection_context():
                Call.update(fetch_error=reason).where(Call.id == call.id).execute()
            log.info("call %s: transient failure fetching %s, will retry", call.id, redact_url(call.recording_url))
            raise
        log.warning("call %s: recording not fetched: %s", call.id, reason)
        return _finish(job, call, "recording_unavailable", fetch_error=reason)
    except transcription.TranscriptionError as exc:
        # Audio that sniffed as MP3/WAV but does not decode, or a model that cannot take
        # the clinic's language: in doubt, a voice message the clinic listens to.
        log.warning("call %s: recording not transcribable: %s", call.id, exc)
        issue = "undecodable" if isinstance(exc, transcription.AudioDecodeError) else "engine_error"
        return _finish_voicemail(job, call, clinic, transcription.failed(0.0, None, issue))
    job.recorder.transcription(transcript.model, transcript.duration, transcript.elapsed)
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
    return _finish_voicemail(job, call, clinic, transcript)


JOB_TIMEOUT_MARGIN = 20  # seconds (at most a fifth of the limit) left after whisper.cpp stops


def _transcribe(job: JobContext, path: str, clinic: Clinic, deadline: float) -> transcription.Transcript:
    """The clinic's languages to detect among, its own language first (or its one
    language, or any when it has neither)."""
    languages = clinic.caller_languages
    model = job.config.whisper_model_for(languages[0] if len(languages) == 1 else None)
    return job.transcriber(model).transcribe(
        path,
        languages,
        deadline=deadline,
        stop=stopping.stopping,
        max_seconds=job.config.recording_max_seconds,
        country=clinic.country,
    )


def _finish_voicemail(job: JobContext, call: Call, clinic: Clinic, t: transcription.Transcript) -> str:
    signals = json.dumps(t.signals(), default=str)
    if not t.message:
        outcome = "missed_call" if clinic.missed_call_requests else "opted_out"
        return _finish(job, call, outcome, signals=signals, intelligibility=t.message_reason)
    heard = t.heard_number
    callback, unconfirmed = spoken_numbers.callback_numbers(
        heard and heard.number, bool(heard and heard.confirmed), call.call_from, clinic.country
    )
    return _finish(
        job,
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


def _finish(job: JobContext, call: Call, outcome: str, **results: Any) -> str:
    """Record the outcome and create the request, once, in one transaction (`finished_calls.finish`)."""
    with db.connection_context():
        finished_calls.finish(call, outcome, job.now(), **results)
    return outcome
