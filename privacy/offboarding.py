"""A clinic's (or a whole organization's) data handed over and erased when its contract ends
(GDPR Art. 28(3)(g)): `manage.py offboard`. First one ZIP archive of everything the service
holds for the clinic (every row of every table that is the clinic's, as JSON, and the signed
documents' bytes), then the clinic erased everywhere: its rows in every table (the audit and
read trails, the event log and the webhook endpoints included), its stored objects, its staff
accounts and API keys that served no other clinic, and the patients no other clinic of the
organization knows. A patient another clinic still has keeps that clinic's record and
requests. What stays: the backups, until they age out (docs/data-protection.md, "Backups"),
and the operator's logs, which name ids only.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
import zipfile
from datetime import datetime
from typing import IO, Any

from models import (
    Actor,
    ApiToken,
    ApiTokenClinic,
    AuditEvent,
    Calendar,
    Call,
    ChangeEvent,
    Clinic,
    ExternalId,
    IdempotencyKey,
    MedicalRecord,
    OfficeHours,
    Organization,
    Outbox,
    Patient,
    PatientRecord,
    PatientRecordTag,
    PatientRequest,
    PatientRequestTag,
    ReadEvent,
    RefusedHandoff,
    RequestType,
    RequestTypeDefaultTag,
    Reservation,
    StaffMembership,
    StaffUser,
    Tag,
    UploadLink,
    Vacation,
    WebhookEndpoint,
)
from plumbing.clock import as_utc, iso_utc
from plumbing.database import db
from plumbing.errors import NotFound
from privacy import erasure, object_deletion
from storage import Storage

#: Columns never written to the archive: credentials, hashes of secrets.
SECRET_COLUMNS = {
    "password_hash",
    "totp_secret_encrypted",
    "totp_last_step",
    "secret_hash",
    "platform_password_encrypted",
    "recording_link",
    "secret_encrypted",
    "previous_secret_encrypted",
}


@dataclasses.dataclass
class Offboarded:
    """What went, per kind of row (and objects deleted from the storage)."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, kind: str, n: int) -> None:
        if n:
            self.counts[kind] = self.counts.get(kind, 0) + n


def _rows(query: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in SECRET_COLUMNS} for row in query.dicts()]


def _only_here(clinic: Clinic) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """(the people of the organization only this clinic knows, as the survivors of their merge
    chains, and the patients it shares with another clinic): known = a record or a request,
    of any patient of the person's merge chain, in a clinic."""
    others = Clinic.select(Clinic.id).where((Clinic.organization == clinic.organization_id) & (Clinic.id != clinic.id))
    here = {r.patient_id for r in PatientRecord.select(PatientRecord.patient).where(PatientRecord.clinic == clinic.id)}
    here |= {
        r.patient_id for r in PatientRequest.select(PatientRequest.patient).where(PatientRequest.clinic == clinic.id)
    }
    sole: set[uuid.UUID] = set()
    shared: set[uuid.UUID] = set()
    for patient in Patient.select().where(Patient.id.in_(list(here))):
        people = [p.id for p in erasure.family(patient)]
        elsewhere = (
            PatientRecord.select().where(PatientRecord.patient.in_(people) & PatientRecord.clinic.in_(others)).exists()
            or PatientRequest.select()
            .where(PatientRequest.patient.in_(people) & PatientRequest.clinic.in_(others))
            .exists()
        )
        if elsewhere:
            shared |= set(people)
        else:
            sole.add(people[0])  # the survivor: its erasure takes the whole chain
    return sorted(sole), sorted(shared)


def _tokens_only_here(clinic: Clinic) -> list[uuid.UUID]:
    bound = [t.token_id for t in ApiTokenClinic.select(ApiTokenClinic.token).where(ApiTokenClinic.clinic == clinic.id)]
    elsewhere = {
        t.token_id
        for t in ApiTokenClinic.select(ApiTokenClinic.token).where(
            ApiTokenClinic.token.in_(bound) & (ApiTokenClinic.clinic != clinic.id)
        )
    }
    return [t for t in bound if t not in elsewhere]


def _staff_only_here(clinic: Clinic) -> list[uuid.UUID]:
    members = [
        m.user_id for m in StaffMembership.select(StaffMembership.user).where(StaffMembership.clinic == clinic.id)
    ]
    elsewhere = {
        m.user_id
        for m in StaffMembership.select(StaffMembership.user).where(
            StaffMembership.user.in_(members) & (StaffMembership.clinic != clinic.id)
        )
    }
    return [u for u in members if u not in elsewhere]


def archive_data(clinic: Clinic) -> dict[str, list[dict[str, Any]]]:
    """Every row that is the clinic's, by table (credentials left out)."""
    requests = PatientRequest.select(PatientRequest.id).where(PatientRequest.clinic == clinic.id)
    records = PatientRecord.select(PatientRecord.id).where(PatientRecord.clinic == clinic.id)
    calendars = Calendar.select(Calendar.id).where(Calendar.clinic == clinic.id)
    types = RequestType.select(RequestType.id).where(RequestType.clinic == clinic.id)
    sole, shared = _only_here(clinic)
    tokens = [t.token_id for t in ApiTokenClinic.select(ApiTokenClinic.token).where(ApiTokenClinic.clinic == clinic.id)]
    members = StaffMembership.select(StaffMembership.user).where(StaffMembership.clinic == clinic.id)
    return {
        "clinic": _rows(Clinic.select().where(Clinic.id == clinic.id)),
        "office_hours": _rows(OfficeHours.select().where(OfficeHours.clinic == clinic.id)),
        "calendar": _rows(Calendar.select().where(Calendar.clinic == clinic.id)),
        "vacation": _rows(Vacation.select().where(Vacation.calendar.in_(calendars))),
        "tag": _rows(Tag.select().where(Tag.clinic == clinic.id)),
        "request_type": _rows(RequestType.select().where(RequestType.clinic == clinic.id)),
        "request_type_default_tag": _rows(
            RequestTypeDefaultTag.select().where(RequestTypeDefaultTag.request_type.in_(types))
        ),
        "patient": _rows(Patient.select().where(Patient.id.in_(sole + shared) | Patient.merged_into.in_(sole))),
        "patient_record": _rows(PatientRecord.select().where(PatientRecord.clinic == clinic.id)),
        "patient_record_tag": _rows(PatientRecordTag.select().where(PatientRecordTag.record.in_(records))),
        "external_id": _rows(ExternalId.select().where(ExternalId.clinic == clinic.id)),
        "patient_request": _rows(PatientRequest.select().where(PatientRequest.clinic == clinic.id)),
        "patient_request_tag": _rows(PatientRequestTag.select().where(PatientRequestTag.request.in_(requests))),
        "reservation": _rows(Reservation.select().where(Reservation.request.in_(requests))),
        "upload_link": _rows(UploadLink.select().where(UploadLink.request.in_(requests))),
        "medical_record": _rows(MedicalRecord.select().where(MedicalRecord.request.in_(requests))),
        "call": _rows(Call.select().where(Call.clinic == clinic.id)),
        "refused_handoff": _rows(RefusedHandoff.select().where(RefusedHandoff.clinic_id == clinic.id)),
        "api_token": _rows(ApiToken.select().where(ApiToken.id.in_(tokens))),
        "staff_user": _rows(StaffUser.select().where(StaffUser.id.in_(members))),
        "staff_membership": _rows(StaffMembership.select().where(StaffMembership.clinic == clinic.id)),
        "audit_event": _rows(AuditEvent.select().where(AuditEvent.clinic_id == clinic.id).order_by(AuditEvent.id)),
        "read_event": _rows(ReadEvent.select().where(ReadEvent.clinic_id == clinic.id).order_by(ReadEvent.id)),
        "change_event": _rows(ChangeEvent.select().where(ChangeEvent.clinic_id == clinic.id).order_by(ChangeEvent.seq)),
        "webhook_endpoint": _rows(WebhookEndpoint.select().where(WebhookEndpoint.clinic == clinic.id)),
    }


def write_archive(clinics: list[Clinic], target: IO[bytes], storage: Storage, now: datetime) -> int:
    """One ZIP of the clinics' data (`<slug>/data.json`) and their signed documents
    (`<slug>/documents/<request id>/<name>`), with a README; returns the documents written."""
    documents = 0
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "README.txt",
            "Data of the clinics named below, as the service held it at "
            f"{iso_utc(as_utc(now))} (UTC), before it was erased.\n"
            "Each <clinic>/data.json holds every row of the clinic, by table (the columns as in\n"
            "docs/data-protection.md; passwords, keys' secrets and platform credentials left out).\n"
            "Each <clinic>/documents/ holds the signed documents' bytes as registered.\n"
            "The recordings are kept by the switchboard platform, not by this service.\n\n"
            + "".join(f"- {c.slug}: {c.name}\n" for c in clinics),
        )
        for clinic in clinics:
            z.writestr(f"{clinic.slug}/data.json", json.dumps(archive_data(clinic), default=str, indent=1))
            records = MedicalRecord.select().join(PatientRequest).where(PatientRequest.clinic == clinic.id)
            for record in records:
                stream, _size = storage.open_for_read(record.stored_key)
                with stream:
                    z.writestr(f"{clinic.slug}/documents/{record.request_id}/{record.id}", stream.read())
                documents += 1
    return documents


def erase_clinic(clinic: Clinic, actor: Actor, now: datetime, storage: Storage) -> Offboarded:
    """Erase everything of the clinic (see the module's docstring); returns what went."""
    done = Offboarded()
    sole, _shared = _only_here(clinic)
    for patient_id in sole:  # with their merged rows, documents, idempotent answers, objects
        try:
            erased = erasure.erase(patient_id, actor, now, storage, include_documents=True, clinic=clinic)
        except NotFound:
            continue  # merged into one erased already
        done.add("patients", 1)
        done.add("requests", erased.requests)
        done.add("documents", erased.documents)
    tokens, staff = _tokens_only_here(clinic), _staff_only_here(clinic)
    with db.atomic():
        requests = [r.id for r in PatientRequest.select(PatientRequest.id).where(PatientRequest.clinic == clinic.id)]
        records = list(MedicalRecord.select().where(MedicalRecord.request.in_(requests)))
        object_deletion.queue([k for r in records for k in (r.object_key, r.file_hash) if k], now)
        uploads = UploadLink.select(UploadLink.file_hash).where(UploadLink.request.in_(requests))
        object_deletion.queue([u.file_hash for u in uploads], now)
        done.add("documents", MedicalRecord.delete().where(MedicalRecord.request.in_(requests)).execute())
        done.add("requests", PatientRequest.delete().where(PatientRequest.id.in_(requests)).execute())
        done.add("calls", Call.delete().where(Call.clinic == clinic.id).execute())
        # The outbox's rows of the clinic, its webhooks' deliveries among them; its event log
        # (the patients' erasures above wrote theirs into it) and its endpoints.
        done.add("outbox", Outbox.delete().where(Outbox.clinic_id == clinic.id).execute())
        done.add("change_events", ChangeEvent.delete().where(ChangeEvent.clinic_id == clinic.id).execute())
        done.add("webhook_endpoints", WebhookEndpoint.delete().where(WebhookEndpoint.clinic == clinic.id).execute())
        done.add("refused_handoffs", RefusedHandoff.delete().where(RefusedHandoff.clinic_id == clinic.id).execute())
        done.add("idempotency_keys", IdempotencyKey.delete().where(IdempotencyKey.token.in_(tokens)).execute())
        done.add("reads", ReadEvent.forget_clinic(clinic.id))
        done.add("audit_events", AuditEvent.forget_clinic(clinic.id, tokens))
        done.add("clinics", Clinic.delete().where(Clinic.id == clinic.id).execute())  # the rest cascades
        done.add("api_keys", ApiToken.delete().where(ApiToken.id.in_(tokens)).execute())
        done.add("staff_users", StaffUser.delete().where(StaffUser.id.in_(staff)).execute())
    done.add("objects", object_deletion.drain(storage))
    return done


def erase_organization(organization: Organization, actor: Actor, now: datetime, storage: Storage) -> Offboarded:
    """Every clinic of the organization, then its remaining patients and the organization."""
    done = Offboarded()
    for clinic in Clinic.select().where(Clinic.organization == organization.id).order_by(Clinic.slug):
        for kind, n in erase_clinic(clinic, actor, now, storage).counts.items():
            done.add(kind, n)
    for patient in Patient.select(Patient.id).where(Patient.organization == organization.id):
        try:
            erasure.erase(patient.id, actor, now, storage, include_documents=True)
            done.add("patients", 1)
        except NotFound:
            continue
    with db.atomic():
        done.add("patients", Patient.delete().where(Patient.organization == organization.id).execute())
        done.add("organizations", Organization.delete().where(Organization.id == organization.id).execute())
    done.add("objects", object_deletion.drain(storage))
    return done
