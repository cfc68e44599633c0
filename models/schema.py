"""The migration log, and every model in the order their tables are created."""

from __future__ import annotations

import peewee as pw

from models.audit import AuditEvent, ReadEvent
from models.base import BaseModel
from models.calls import Call, RefusedHandoff
from models.change_events import ChangeEvent, WebhookEndpoint
from models.clinics import (
    Calendar,
    Clinic,
    OfficeHours,
    Organization,
    RequestType,
    RequestTypeDefaultTag,
    Tag,
    Vacation,
)
from models.idempotency import IdempotencyKey
from models.objects import PendingObjectDeletion
from models.outbox import Outbox
from models.patients import ExternalId, Patient, PatientRecord, PatientRecordTag
from models.requests import MedicalRecord, PatientRequest, PatientRequestTag, Reservation, UploadLink
from models.staff import StaffMembership, StaffPasswordLink, StaffRecoveryCode, StaffSession, StaffUser
from models.tokens import ApiToken, ApiTokenClinic
from plumbing.clock import utc_now


class SchemaMigration(BaseModel):
    version = pw.IntegerField(primary_key=True)
    name = pw.CharField(max_length=200)
    applied_at = pw.DateTimeField(default=utc_now)


MODELS: list[type[BaseModel]] = [
    Organization,
    Clinic,
    Calendar,
    OfficeHours,
    Vacation,
    Tag,
    Patient,
    PatientRecord,
    PatientRecordTag,
    ExternalId,
    RequestType,
    RequestTypeDefaultTag,
    ApiToken,
    ApiTokenClinic,
    Call,
    RefusedHandoff,
    PatientRequest,
    PatientRequestTag,
    Reservation,
    UploadLink,
    MedicalRecord,
    AuditEvent,
    IdempotencyKey,
    StaffUser,
    StaffMembership,
    StaffSession,
    StaffPasswordLink,
    StaffRecoveryCode,
    PendingObjectDeletion,
    Outbox,
    ChangeEvent,
    WebhookEndpoint,
    ReadEvent,
]
