"""The patient a caller is: a call's number matched to the clinic's patients, or a new
patient made from it; a withheld number is the clinic's one unknown caller."""

from __future__ import annotations

import uuid
from datetime import datetime

from models import Clinic, Patient, PatientRecord, PatientRequest
from plumbing.clock import as_utc
from plumbing.database import db, is_postgresql
from plumbing.phones import to_e164


def patient_for_caller(clinic: Clinic, raw_number: str, now: datetime) -> Patient:
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
            id=anonymous, organization=clinic.organization_id, last_name=Patient.UNKNOWN_CALLER, created_at=as_utc(now)
        )
        PatientRecord.insert(patient=patient, clinic=clinic, created_at=as_utc(now)).on_conflict_ignore().execute()
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
        PatientRecord.insert(patient=live[0], clinic=clinic, created_at=as_utc(now)).on_conflict_ignore().execute()
        return live[0]
    patient = Patient.create(organization=clinic.organization_id, phone=phone, created_at=as_utc(now))
    PatientRecord.create(patient=patient, clinic=clinic, note=PatientRecord.FROM_A_CALL, created_at=as_utc(now))
    return patient
