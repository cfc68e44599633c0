"""Deletion by time: what each clinic keeps, for as long as it says, and nothing longer.

One round (`run`) deletes, for every clinic that set its retention (docs/data-protection.md
gives the defaults and their reasons):

- resolved requests made from calls, `retention_call_requests_days` after they were
  resolved, with their calls (transcripts, numbers, recording links), tags, reservations
  and upload links; a request holding a signed document stays while the document does;
- calls that made no request, `retention_calls_days` after they were received;
- a patient a call created, once the retention took its last request and nothing else was
  ever recorded about them (no name, e-mail, birth date, tag, external id or note);
- signed documents, `retention_documents_days` after they were registered (None: kept);
- the client address of audit events, `retention_audit_details_days` after them (what
  happened, to what and by whom stay);
- resolved requests made through the API, `retention_api_requests_days` after they were
  resolved (a request holding a signed document stays while the document does);
- the read trail's rows, `retention_reads_days` after they were written (None: the default,
  `Clinic.READS_DEFAULT_DAYS`: every clinic's trail goes in time, set or not);

and for the whole deployment: console sessions past their lifetime, set-password links
used or expired, recovery codes used, staff accounts disabled longer than
`RETENTION_DISABLED_STAFF_DAYS`, and the audit addresses of events of no clinic.

Every deletion runs in bounded batches, one transaction each, taking rows with FOR UPDATE
SKIP LOCKED on PostgreSQL: rounds in several workers at once take disjoint rows, a crash
loses at most the batch it was in (rolled back whole, done again next round), and no batch
holds locks long enough to slow the requests the routing checks read. Objects in storage
go through `privacy.object_deletion` (listed in the batch's transaction, deleted after it).
Nothing here logs personal data: counts only.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import peewee as pw

from models import (
    Actor,
    AuditEvent,
    Call,
    Clinic,
    ExternalId,
    MedicalRecord,
    Patient,
    PatientRecord,
    PatientRecordTag,
    PatientRequest,
    StaffPasswordLink,
    StaffRecoveryCode,
    StaffSession,
    StaffUser,
    UploadLink,
)
from plumbing.clock import as_utc
from plumbing.database import db, is_postgresql
from privacy import object_deletion, read_trail
from storage import Storage

log = logging.getLogger(__name__)
BATCH = 500
Q = TypeVar("Q", bound="pw.ModelSelect[Any]")
#: Who the retention's audit events name: the service's own background work.
WORKER = Actor("operator", "worker")


@dataclasses.dataclass
class Deleted:
    """What one round deleted (or, for audit events, redacted), per kind."""

    call_requests: int = 0
    calls: int = 0
    patients: int = 0
    documents: int = 0
    audit_addresses: int = 0
    api_requests: int = 0
    reads: int = 0
    staff_sessions: int = 0
    password_links: int = 0
    recovery_codes: int = 0
    staff_users: int = 0
    objects: int = 0

    def counts(self) -> dict[str, int]:
        """The non-zero counts, by kind (the audit event's details, the metric's labels)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v}

    def of_patients(self) -> bool:
        """Whether anything of patients went (the clinic's audit trail says so; an old
        event's address removed, which happens every round, is only counted)."""
        return bool(self.call_requests or self.calls or self.patients or self.documents or self.api_requests)

    def add(self, other: Deleted) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@dataclasses.dataclass(frozen=True)
class Lifetimes:
    """The deployment's own periods (from `Config`): console sessions, and the audit
    addresses of events that belong to no clinic."""

    session_idle: timedelta
    session_absolute: timedelta
    session_pending: timedelta
    audit_details_without_clinic: timedelta
    # A staff account this long disabled is deleted (None: kept).
    disabled_staff: timedelta | None = None


def run(storage: Storage, now: datetime, lifetimes: Lifetimes, batch: int = BATCH) -> dict[uuid.UUID | None, Deleted]:
    """One round over every clinic and the deployment's own rows; returns what it deleted,
    per clinic (None: the deployment's). Each clinic with deletions gets one audit event
    of counts (`retention.delete`) when it lost requests, calls, patients or documents.
    Needs a database connection (the caller's)."""
    now = as_utc(now)
    done: dict[uuid.UUID | None, Deleted] = {}
    left = drain(storage)  # what an earlier round or an interrupted erasure left listed
    for clinic in Clinic.select().order_by(Clinic.slug):
        deleted = clinic_round(clinic, now, batch)
        if deleted.of_patients():
            with db.atomic():
                AuditEvent.record(WORKER, clinic, "retention.delete", None, deleted.counts(), at=now)
        if deleted.counts():
            done[clinic.id] = deleted
    deployment = deployment_round(now, lifetimes, batch)
    deployment.objects = left + drain(storage)
    if deployment.counts():
        done[None] = deployment
    return done


def drain(storage: Storage) -> int:
    """The listed objects deleted; with the storage failing, they stay listed for the next
    round, and the rows' deletions go on meanwhile (their objects queue up)."""
    try:
        return object_deletion.drain(storage)
    except Exception as exc:
        log.warning("retention: stored files not deleted this round (%s); they stay listed", type(exc).__name__)
        return 0


def clinic_round(clinic: Clinic, now: datetime, batch: int = BATCH) -> Deleted:
    deleted = Deleted()
    if clinic.retention_call_requests_days is not None:
        cutoff = now - timedelta(days=clinic.retention_call_requests_days)
        deleted.add(_in_batches(lambda: _call_requests(clinic, cutoff, now, batch), batch))
    if clinic.retention_calls_days is not None:
        cutoff = now - timedelta(days=clinic.retention_calls_days)
        deleted.add(_in_batches(lambda: _calls_without_request(clinic, cutoff, batch), batch))
    if clinic.retention_documents_days is not None:
        cutoff = now - timedelta(days=clinic.retention_documents_days)
        deleted.add(_in_batches(lambda: _documents(clinic, cutoff, now, batch), batch))
    if clinic.retention_audit_details_days is not None:
        cutoff = now - timedelta(days=clinic.retention_audit_details_days)
        deleted.add(_in_batches(lambda: _audit_addresses(clinic.id, cutoff, now, batch), batch))
    if clinic.retention_api_requests_days is not None:
        cutoff = now - timedelta(days=clinic.retention_api_requests_days)
        deleted.add(_in_batches(lambda: _api_requests(clinic, cutoff, now, batch), batch))
    deleted.add(_in_batches(lambda: _reads(clinic, now, batch), batch))
    return deleted


def deployment_round(now: datetime, lifetimes: Lifetimes, batch: int = BATCH) -> Deleted:
    deleted = Deleted()
    with db.atomic():
        deleted.staff_sessions = (
            StaffSession.delete()
            .where(
                (StaffSession.last_seen_at < now - lifetimes.session_idle)
                | (StaffSession.created_at < now - lifetimes.session_absolute)
                | (StaffSession.pending.is_null(False) & (StaffSession.created_at < now - lifetimes.session_pending))
            )
            .execute()
        )
        deleted.password_links = (
            StaffPasswordLink.delete()
            .where(StaffPasswordLink.used_at.is_null(False) | (StaffPasswordLink.expires_at <= now))
            .execute()
        )
        deleted.recovery_codes = StaffRecoveryCode.delete().where(StaffRecoveryCode.used_at.is_null(False)).execute()
        if lifetimes.disabled_staff is not None:
            # Memberships, sessions, links and codes go with the account (foreign keys' cascade).
            deleted.staff_users = (
                StaffUser.delete()
                .where(StaffUser.disabled_at.is_null(False) & (StaffUser.disabled_at < now - lifetimes.disabled_staff))
                .execute()
            )
    cutoff = now - lifetimes.audit_details_without_clinic
    deleted.add(_in_batches(lambda: _audit_addresses(None, cutoff, now, batch), batch))
    return deleted


def _in_batches(one: Callable[[], tuple[Deleted, int]], batch: int) -> Deleted:
    """Run `one` (a batch in its own transaction, returning what it deleted and how many
    rows it took) until a batch takes fewer than `batch` rows."""
    total = Deleted()
    while True:
        deleted, taken = one()
        total.add(deleted)
        if taken < batch:
            return total


def _locked(query: Q, *of: type[pw.Model]) -> Q:
    """The query's rows locked for this transaction, skipping those another worker's round
    holds (PostgreSQL; SQLite has one writer at a time anyway)."""
    if is_postgresql():
        return query.for_update(of=of or None, skip_locked=True)
    return query


def _resolved_before(clinic: Clinic, cutoff: datetime, batch: int, *, made_by_call: bool) -> list[PatientRequest]:
    """Up to `batch` of the clinic's requests resolved before `cutoff` and holding no signed
    document, made by a call or not, oldest first, locked for this transaction."""
    documents = MedicalRecord.select(MedicalRecord.id).where(MedicalRecord.request == PatientRequest.id)
    return list(
        _locked(
            PatientRequest.select(PatientRequest.id, PatientRequest.call, PatientRequest.patient)
            .where(
                (PatientRequest.clinic == clinic.id)
                & PatientRequest.call.is_null(not made_by_call)
                & PatientRequest.done_at.is_null(False)
                & (PatientRequest.done_at < cutoff)
                & ~pw.fn.EXISTS(documents)
            )
            .order_by(PatientRequest.done_at)
            .limit(batch)
        )
    )


def _call_requests(clinic: Clinic, cutoff: datetime, now: datetime, batch: int) -> tuple[Deleted, int]:
    with db.atomic():
        rows = _resolved_before(clinic, cutoff, batch, made_by_call=True)
        if not rows:
            return Deleted(), 0
        deleted = delete_requests([r.id for r in rows], now)
        deleted.calls += Call.delete().where(Call.id.in_([r.call_id for r in rows])).execute()
        deleted.patients += forget_patients_made_by_calls({r.patient_id for r in rows})
    return deleted, len(rows)


def delete_requests(request_ids: list[uuid.UUID], now: datetime) -> Deleted:
    """Delete these requests (their tags, reservations and upload links go with them, by the
    foreign keys' cascade) and list their uploads' objects for deletion. Inside the caller's
    transaction; their calls and signed documents are the caller's to handle first."""
    uploads = UploadLink.select(UploadLink.file_hash).where(UploadLink.request.in_(request_ids))
    object_deletion.queue([u.file_hash for u in uploads], now)
    return Deleted(call_requests=PatientRequest.delete().where(PatientRequest.id.in_(request_ids)).execute())


def forget_patients_made_by_calls(patient_ids: set[uuid.UUID]) -> int:
    """Delete those of `patient_ids` that only a call ever made: no request left anywhere,
    and nothing recorded about them but their number (no name but the unknown caller's, no
    e-mail, birth date, external id, tag or note of anyone's). A patient someone imported,
    named, tagged or merged with another stays. Inside the caller's transaction."""
    if not patient_ids:
        return 0
    ids = list(patient_ids)
    candidates = Patient.select(Patient.id).where(
        Patient.id.in_(ids)
        & Patient.merged_into.is_null()
        & (Patient.first_name == "")
        & ((Patient.last_name == "") | ((Patient.last_name == Patient.UNKNOWN_CALLER) & Patient.phone.is_null()))
        & Patient.email.is_null()
        & Patient.birth_date.is_null()
    )
    busy: set[uuid.UUID] = set()
    busy |= {r.patient_id for r in PatientRequest.select(PatientRequest.patient).where(PatientRequest.patient.in_(ids))}
    busy |= {e.patient_id for e in ExternalId.select(ExternalId.patient).where(ExternalId.patient.in_(ids))}
    busy |= {
        p.merged_into_id
        for p in Patient.select(Patient.merged_into).where(Patient.merged_into.in_(ids))
        if p.merged_into_id is not None
    }
    busy |= {
        r.patient_id
        for r in PatientRecord.select(PatientRecord.patient).where(
            PatientRecord.patient.in_(ids) & (PatientRecord.note.not_in(["", PatientRecord.FROM_A_CALL]))
        )
    }
    busy |= {
        r.patient_id
        for r in PatientRecord.select(PatientRecord.patient)
        .join(PatientRecordTag)
        .where(PatientRecord.patient.in_(ids))
    }
    gone = [p.id for p in candidates if p.id not in busy]
    return Patient.delete().where(Patient.id.in_(gone)).execute() if gone else 0


def _calls_without_request(clinic: Clinic, cutoff: datetime, batch: int) -> tuple[Deleted, int]:
    requested = PatientRequest.select(PatientRequest.id).where(PatientRequest.call == Call.id)
    with db.atomic():
        rows = list(
            _locked(
                Call.select(Call.id)
                .where(
                    (Call.clinic == clinic.id)
                    & (Call.state == "done")
                    & (Call.received_at < cutoff)
                    & ~pw.fn.EXISTS(requested)
                )
                .order_by(Call.received_at)
                .limit(batch)
            )
        )
        if not rows:
            return Deleted(), 0
        return Deleted(calls=Call.delete().where(Call.id.in_([r.id for r in rows])).execute()), len(rows)


def _documents(clinic: Clinic, cutoff: datetime, now: datetime, batch: int) -> tuple[Deleted, int]:
    with db.atomic():
        rows = list(
            _locked(
                MedicalRecord.select(MedicalRecord.id, MedicalRecord.file_hash, MedicalRecord.object_key)
                .join(PatientRequest)
                .where((PatientRequest.clinic == clinic.id) & (MedicalRecord.created_at < cutoff))
                .order_by(MedicalRecord.created_at)
                .limit(batch),
                MedicalRecord,
            )
        )
        if not rows:
            return Deleted(), 0
        object_deletion.queue([key for r in rows for key in (r.object_key, r.file_hash)], now)
        gone = MedicalRecord.delete().where(MedicalRecord.id.in_([r.id for r in rows])).execute()
        return Deleted(documents=gone), len(rows)


def _api_requests(clinic: Clinic, cutoff: datetime, now: datetime, batch: int) -> tuple[Deleted, int]:
    with db.atomic():
        rows = _resolved_before(clinic, cutoff, batch, made_by_call=False)
        if not rows:
            return Deleted(), 0
        gone = delete_requests([r.id for r in rows], now)
        return Deleted(api_requests=gone.call_requests), len(rows)


def _reads(clinic: Clinic, now: datetime, batch: int) -> tuple[Deleted, int]:
    with db.atomic():
        gone = read_trail.expire(clinic, now, batch)
    return Deleted(reads=gone), gone


def _audit_addresses(clinic_id: uuid.UUID | None, cutoff: datetime, now: datetime, batch: int) -> tuple[Deleted, int]:
    with db.atomic():
        redacted = AuditEvent.forget_addresses(clinic_id, cutoff, now, batch)
    return Deleted(audit_addresses=redacted), redacted


def settings_of(clinic: Clinic) -> dict[str, Any]:
    """The clinic's retention as the onboarding file and the console name it."""
    return {
        "resolvedCallRequestsDays": clinic.retention_call_requests_days,
        "callsWithoutRequestDays": clinic.retention_calls_days,
        "auditDetailsDays": clinic.retention_audit_details_days,
        "signedDocumentsDays": clinic.retention_documents_days,
        "resolvedApiRequestsDays": clinic.retention_api_requests_days,
        "readTrailDays": clinic.retention_reads_days,
    }
