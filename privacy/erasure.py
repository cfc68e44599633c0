"""A patient erased: everything the service holds about them goes, in one transaction.

A person may be several patient rows: the one others were merged into and every row whose
merge chain leads to it (`family`). Their erasure deletes, in every clinic of the
organization: the patients and their records (notes, tags, status), external ids, their
requests with tags, reservations and upload links, the calls those requests came from and
the calls from their numbers that made no request (transcripts, numbers, recording links),
and the answers stored for Idempotency-Keys that name any of them.

Signed documents are medical documentation: unless the erasure includes them, a request
holding one stays, moved to the organization's one "Erased patient" (no personal data), its
notes, tags, reservations and call gone and its title the request type's name; the
documents and their descriptions stay as registered. Included, they go with their objects.

All rows go in one transaction (nothing is half visible: a crash rolls it back whole and
the patient is still there to erase again); the objects in storage are listed in that
transaction and deleted after it (`privacy.object_deletion`). What remains is one `patient.erase`
audit event per clinic involved, with counts and the erased row's id, no personal data.
Erasing again finds nothing and changes nothing.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime

import peewee as pw

from models import (
    Actor,
    AuditEvent,
    Call,
    ChangeEvent,
    Clinic,
    ExternalId,
    IdempotencyKey,
    MedicalRecord,
    Organization,
    Patient,
    PatientRecord,
    PatientRequest,
    PatientRequestTag,
    RequestType,
    Reservation,
    UploadLink,
)
from plumbing.clock import as_utc
from plumbing.database import db, hot_sql, is_postgresql
from plumbing.errors import NotFound
from plumbing.phones import to_e164
from privacy import object_deletion
from privacy.retention import delete_requests, drain
from storage import Storage

#: The title of such a request when it has no request type to be named after.
KEPT_REQUEST_TITLE = "Signed documents"


@dataclasses.dataclass
class Plan:
    """What an erasure of one person deletes, read before it (the confirmation lists it)."""

    organization: Organization
    patients: list[Patient]  # the person: the merge survivor first, then the rows merged into it
    records: list[PatientRecord]
    requests: list[PatientRequest]
    documents: list[MedicalRecord]
    calls: list[Call]
    external_ids: int

    @property
    def patient(self) -> Patient:
        return self.patients[0]

    def clinic_ids(self) -> set[uuid.UUID]:
        return {r.clinic_id for r in self.records} | {r.clinic_id for r in self.requests}

    def requests_with_documents(self) -> set[uuid.UUID]:
        return {d.request_id for d in self.documents}


@dataclasses.dataclass(frozen=True)
class Erased:
    patients: int = 0
    records: int = 0
    requests: int = 0
    requests_kept: int = 0
    calls: int = 0
    documents: int = 0
    documents_kept: int = 0
    external_ids: int = 0
    stored_answers: int = 0
    objects: int = 0

    def counts(self) -> dict[str, int]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "objects"}


def family(patient: Patient) -> list[Patient]:
    """The person `patient` is: the survivor of its merge chain first, then every patient
    merged into it, directly or along a chain."""
    survivor = Patient.get_by_id(patient.survivor_id())
    found, frontier = [survivor], [survivor.id]
    seen = {survivor.id}
    while frontier:
        step = [p for p in Patient.select().where(Patient.merged_into.in_(frontier)) if p.id not in seen]
        seen |= {p.id for p in step}
        found += step
        frontier = [p.id for p in step]
    return found


def plan(patient_id: uuid.UUID, clinic: Clinic | None = None) -> Plan:
    """What erasing the patient would delete. With `clinic` (the console: an admin of that
    clinic), only a patient of its organization with a record or a request there; the CLI's
    operator names any. `NotFound` for no such patient (never was, or erased already)."""
    patient = Patient.get_or_none(Patient.id == patient_id)
    if patient is None or patient.id == Patient.erased_id(patient.organization_id):
        raise NotFound("Unknown patient.", code="PATIENT_NOT_FOUND")
    people = family(patient)
    ids = [p.id for p in people]
    if clinic is not None:
        here = (PatientRecord.patient.in_(ids)) & (PatientRecord.clinic == clinic.id)
        asked = (PatientRequest.patient.in_(ids)) & (PatientRequest.clinic == clinic.id)
        if patient.organization_id != clinic.organization_id or not (
            PatientRecord.select().where(here).exists() or PatientRequest.select().where(asked).exists()
        ):
            raise NotFound("Unknown patient.", code="PATIENT_NOT_FOUND")
    requests = list(PatientRequest.select().where(PatientRequest.patient.in_(ids)).order_by(PatientRequest.created_at))
    request_ids = [r.id for r in requests]
    documents = (
        list(MedicalRecord.select().where(MedicalRecord.request.in_(request_ids)).order_by(MedicalRecord.created_at))
        if request_ids
        else []
    )
    return Plan(
        organization=Organization.get_by_id(patient.organization_id),
        patients=people,
        records=list(PatientRecord.select().where(PatientRecord.patient.in_(ids))),
        requests=requests,
        documents=documents,
        calls=_calls(people, requests),
        external_ids=ExternalId.select().where(ExternalId.patient.in_(ids)).count(),
    )


def _calls(people: list[Patient], requests: list[PatientRequest]) -> list[Call]:
    """The calls the requests came from, and the calls from the person's numbers that made
    no request, in the organization's clinics."""
    made = [r.call_id for r in requests if r.call_id]
    calls = {c.id: c for c in Call.select().where(Call.id.in_(made))} if made else {}
    phones = {p.phone for p in people if p.phone}
    if phones:
        organization_id = people[0].organization_id
        requested = PatientRequest.select(PatientRequest.id).where(PatientRequest.call == Call.id)
        # The last six digits narrow the candidates in SQL; the number as the clinic would
        # store it (E.164 with its country) decides.
        like = None
        for phone in phones:
            term = Call.call_from.contains(phone[-6:])
            like = term if like is None else like | term
        candidates = (
            Call.select(Call, Clinic)
            .join(Clinic)
            .where((Clinic.organization == organization_id) & ~pw.fn.EXISTS(requested) & like)
        )
        for call in candidates:
            if to_e164(call.call_from, call.clinic.country) in phones:
                calls[call.id] = call
    return sorted(calls.values(), key=lambda c: c.received_at)


def erase(
    patient_id: uuid.UUID,
    actor: Actor,
    now: datetime,
    storage: Storage,
    *,
    include_documents: bool = False,
    clinic: Clinic | None = None,
) -> Erased:
    """Erase the person (see the module's docstring); `clinic` as for `plan`. Returns what
    went. `NotFound` when there is no such patient (an erasure run again: nothing to do,
    but the objects an interrupted one listed are deleted all the same)."""
    now = as_utc(now)
    try:
        with db.atomic():
            if is_postgresql():
                _take_turns(patient_id)
            erased = _erase(plan(patient_id, clinic), actor, now, include_documents)
    finally:
        # Should the storage fail, the files stay listed for the workers' next round.
        deleted_objects = drain(storage)
    return dataclasses.replace(erased, objects=deleted_objects)


def _take_turns(patient_id: uuid.UUID) -> None:
    """Two erasures of one person at once (a double click, the CLI beside the console) take
    turns, the second finding nothing; and a call from one of the person's numbers that
    finishes meanwhile waits (it takes the same lock to find its patient), then makes a new
    patient instead of a request the erasure would not have listed."""
    db.execute_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"erase:{patient_id}",))
    patient = Patient.get_or_none(Patient.id == patient_id)
    if patient is None:
        return
    for phone in sorted({person.phone for person in family(patient) if person.phone}):
        db.execute_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{patient.organization_id}:{phone}",))


def _erase(p: Plan, actor: Actor, now: datetime, include_documents: bool) -> Erased:
    ids = [person.id for person in p.patients]
    with_documents = p.requests_with_documents()
    kept = [] if include_documents else [r for r in p.requests if r.id in with_documents]
    kept_ids = {r.id for r in kept}
    gone = [r.id for r in p.requests if r.id not in kept_ids]
    answers = _forget_answers([*ids, *(r.id for r in p.requests)])
    calls = Call.delete().where(Call.id.in_([c.id for c in p.calls])).execute() if p.calls else 0
    documents = 0
    if include_documents and p.documents:
        object_deletion.queue([key for d in p.documents for key in (d.object_key, d.file_hash)], now)
        documents = MedicalRecord.delete().where(MedicalRecord.id.in_([d.id for d in p.documents])).execute()
    requests = delete_requests(gone, now).call_requests if gone else 0
    if kept:
        _keep_for_documents(p.organization, kept, now)
    external_ids = ExternalId.delete().where(ExternalId.patient.in_(ids)).execute()
    records = PatientRecord.delete().where(PatientRecord.patient.in_(ids)).execute()
    # Rows merged into others point at them: the links go first, then every row at once.
    Patient.update(merged_into=None).where(Patient.id.in_(ids)).execute()
    patients = Patient.delete().where(Patient.id.in_(ids)).execute()
    erased = Erased(
        patients=patients,
        records=records,
        requests=requests,
        requests_kept=len(kept),
        calls=calls,
        documents=documents,
        documents_kept=0 if include_documents else len(p.documents),
        external_ids=external_ids,
        stored_answers=answers,
    )
    for clinic_id in sorted(p.clinic_ids(), key=str):
        AuditEvent.record(actor, clinic_id, "patient.erase", ("patient", p.patient.id), erased.counts(), at=now)
        ChangeEvent.record(clinic_id, "patient.erased", {"patientId": str(p.patient.id)}, now)
    return erased


def _keep_for_documents(organization: Organization, kept: list[PatientRequest], now: datetime) -> None:
    """The requests holding signed documents stay, as the organization's erased patient's,
    with nothing of the person left on them but the documents."""
    placeholder = Patient.erased_id(organization.id)
    Patient.insert(
        id=placeholder, organization=organization.id, last_name=Patient.ERASED_NAME
    ).on_conflict_ignore().execute()
    ids = [r.id for r in kept]
    uploads = UploadLink.select(UploadLink.file_hash).where(
        UploadLink.request.in_(ids) & UploadLink.file_hash.not_in(MedicalRecord.select(MedicalRecord.file_hash))
    )
    object_deletion.queue([u.file_hash for u in uploads], now)
    UploadLink.delete().where(UploadLink.request.in_(ids)).execute()
    PatientRequestTag.delete().where(PatientRequestTag.request.in_(ids)).execute()
    Reservation.delete().where(Reservation.request.in_(ids)).execute()
    names = {t.id: t.name for t in RequestType.select().where(RequestType.id.in_([r.request_type_id for r in kept]))}
    for request in kept:
        PatientRequest.update(
            patient=placeholder,
            title=names.get(request.request_type_id, KEPT_REQUEST_TITLE)
            if request.request_type_id
            else KEPT_REQUEST_TITLE,
            clinic_note="",
            user_note="",
            call=None,
            done_at=request.done_at or now,
        ).where(PatientRequest.id == request.id).execute()


def _forget_answers(ids: list[uuid.UUID]) -> int:
    """Delete the answers stored for Idempotency-Keys that name any of `ids` (a patient's
    import answer carries the patient, a request's create its patient and request)."""
    if not ids:
        return 0
    if is_postgresql():
        found = "position(convert_to(%s, 'UTF8') in answer) > 0"
    else:
        found = "instr(answer, CAST(%s AS BLOB)) > 0"
    condition = " OR ".join([found] * len(ids))
    cursor = hot_sql(f'DELETE FROM "{IdempotencyKey._meta.table_name}" WHERE {condition}', [str(i) for i in ids])
    return cursor.rowcount
