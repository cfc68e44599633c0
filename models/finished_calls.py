"""How a finished call becomes a request: the outcome recorded on the call, the patient the
caller is, and the request the outcome makes, in one transaction, once.

The ingest job (`jobs/calls.py`) decides the outcome and what was heard; everything it
writes goes through `finish`.
"""

from __future__ import annotations

import uuid

from models.calls import Call
from models.clinics import Clinic
from models.outbox import Outbox
from models.patients import Patient, PatientRecord
from models.requests import PatientRequest, Triage
from plumbing.clock import utc_now
from plumbing.database import db, is_postgresql
from plumbing.phones import to_e164

#: The patient of a withheld number (one per clinic), and the note on a record a call made:
#: the retention knows such a patient by them (privacy/retention.py).
UNKNOWN_CALLER_NAME = "Unknown caller"
CALL_RECORD_NOTE = "Created from a phone call."

# The request a call's outcome makes: kind and title ("no_recording" and "opted_out" make none).
REQUEST_OF_OUTCOME = {
    "voice_message": ("voice_message", "Voice message from {number}"),
    "missed_call": ("missed_call", "Missed call from {number}"),
    "recording_unavailable": ("voice_message", "Voice message from {number} (recording could not be fetched)"),
}


def finish(
    call: Call,
    outcome: str,
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
        _request_from_call(call, outcome, triage)
        Call.update(
            state="done",
            outcome=outcome,
            processed_at=utc_now(),
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


def _request_from_call(call: Call, outcome: str, triage: Triage | None) -> None:
    """The request `outcome` makes of the call, for the patient the caller is; nothing
    when the call already has one (the unique `call_id`) or the outcome makes none. A
    request flagged "may be urgent" is told to whoever its clinic has asked (the outbox's
    `request.urgent`, in this transaction: notices/urgent.py decides who and when)."""
    if outcome not in REQUEST_OF_OUTCOME:
        return
    kind, title = REQUEST_OF_OUTCOME[outcome]
    clinic = Clinic.get_by_id(call.clinic_id)
    patient = patient_for_caller(clinic, call.call_from)
    request_id, now = uuid.uuid4(), utc_now()
    PatientRequest.insert(
        id=request_id,
        clinic=clinic,
        patient=patient,
        kind=kind,
        call=call.id,
        created_at=now,
        title=title.format(number=patient.phone or call.call_from.strip() or "a withheld number")[:300],
        **(triage.columns() if triage is not None else {}),
    ).on_conflict_ignore().execute()
    if triage is not None and triage.urgent and PatientRequest.select().where(PatientRequest.id == request_id).exists():
        Outbox.add("request.urgent", {"request": str(request_id)}, now, clinic_id=clinic.id)


def patient_for_caller(clinic: Clinic, raw_number: str) -> Patient:
    """The patient a call from `raw_number` belongs to in `clinic`, created if none.

    Call inside a transaction. Several patients may share a number (a family line):
    merged patients count as their survivor; among this clinic's patients with the
    number, the one with the most recent open request here wins, then the most
    recently created record. With patient sharing on, a single organization patient
    with the number gets a record here instead of a duplicate. A number that cannot
    be parsed (withheld, "anonymous") goes to the clinic's one "Unknown caller".
    """
    phone = to_e164(raw_number, clinic.country)
    if phone is None:
        anonymous = uuid.uuid5(clinic.id, "unknown-caller")
        patient = Patient.get_or_none(Patient.id == anonymous) or Patient.create(
            id=anonymous, organization=clinic.organization_id, last_name=UNKNOWN_CALLER_NAME
        )
        PatientRecord.insert(patient=patient, clinic=clinic).on_conflict_ignore().execute()
        return patient
    if is_postgresql():
        # Serialize first calls from one new number, so they share one new patient.
        db.execute_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{clinic.organization_id}:{phone}",))
    survivors = Patient.with_survivors(Patient.ids_with_phone(clinic.organization_id, phone))
    live = [
        p for p in Patient.select().where(Patient.id.in_(survivors or [uuid.UUID(int=0)])) if p.merged_into_id is None
    ]
    here = PatientRecord.select(PatientRecord.patient).where(
        (PatientRecord.clinic == clinic) & PatientRecord.patient.in_([p.id for p in live] or [uuid.UUID(int=0)])
    )
    local = {r.patient_id for r in here}
    if local:
        open_here = (
            PatientRequest.select(PatientRequest.patient)
            .where(
                (PatientRequest.clinic == clinic)
                & PatientRequest.patient.in_(list(local))
                & PatientRequest.done_at.is_null()
            )
            .order_by(PatientRequest.created_at.desc())
            .first()
        )
        if open_here is not None:
            return Patient.get_by_id(open_here.patient_id)
        newest = (
            PatientRecord.select()
            .where((PatientRecord.clinic == clinic) & PatientRecord.patient.in_(list(local)))
            .order_by(PatientRecord.created_at.desc())
            .first()
        )
        return Patient.get_by_id(newest.patient_id)
    if len(live) == 1 and clinic.organization.patient_sharing:
        PatientRecord.insert(patient=live[0], clinic=clinic).on_conflict_ignore().execute()
        return live[0]
    patient = Patient.create(organization=clinic.organization_id, phone=phone)
    PatientRecord.create(patient=patient, clinic=clinic, note=CALL_RECORD_NOTE)
    return patient
