"""How a finished call becomes a request: the outcome recorded on the call, the patient the
caller is, and the request the outcome makes, in one transaction, once.

The ingest job (`jobs/calls.py`) decides the outcome and what was heard; everything it
writes goes through `finish`. The call was stored by the hand-off (`switchboard/intake.py`);
this is where its life ends.
"""

from __future__ import annotations

from datetime import datetime

from models import Call, Clinic, Triage
from patient_requests import changes
from patients.callers import patient_for_caller
from plumbing.clock import as_utc
from plumbing.database import db

# The request a call's outcome makes: kind and title ("no_recording" and "opted_out" make none).
REQUEST_OF_OUTCOME = {
    "voice_message": ("voice_message", "Voice message from {number}"),
    "missed_call": ("missed_call", "Missed call from {number}"),
    "recording_unavailable": ("voice_message", "Voice message from {number} (recording could not be fetched)"),
}


def finish(
    call: Call,
    outcome: str,
    now: datetime,
    *,
    transcript: str | None = None,
    language: str | None = None,
    signals: str | None = None,
    intelligibility: str | None = None,
    fetch_error: str | None = None,
    status: str | None = None,
    issue: str | None = None,
    callback: str | None = None,
    heard_number: str | None = None,
    callback_number_at: float | None = None,
    triage: Triage | None = None,
) -> None:
    """Record what the ingest made of the call and create its request, in one
    transaction, once: a call already done is left as it is, and a call has at most one
    request (the unique `patient_request.call_id`). `triage`: what the transcript suggests
    (a request type, urgency), stored on the request."""
    with db.atomic():
        _request_from_call(call, outcome, triage, now)
        Call.update(
            state="done",
            outcome=outcome,
            processed_at=as_utc(now),
            transcript=transcript,
            transcript_language=language,
            transcript_signals=signals,
            intelligibility=intelligibility,
            fetch_error=fetch_error,
            transcript_status=status,
            transcript_issue=issue,
            callback_number=callback,
            heard_number=heard_number,
            callback_number_at=callback_number_at,
        ).where((Call.id == call.id) & (Call.state == "pending")).execute()


def _request_from_call(call: Call, outcome: str, triage: Triage | None, now: datetime) -> None:
    """The request `outcome` makes of the call, for the patient the caller is; nothing
    when the call already has one (the unique `call_id`) or the outcome makes none."""
    if outcome not in REQUEST_OF_OUTCOME:
        return
    kind, title = REQUEST_OF_OUTCOME[outcome]
    patient = patient_for_caller(Clinic.get_by_id(call.clinic_id), call.call_from, now)
    number = patient.phone or call.call_from.strip() or "a withheld number"
    changes.create_from_call(call, patient, kind, title.format(number=number), triage, now)
