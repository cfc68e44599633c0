"""Peewee models and the domain queries that live on them, one module per aggregate.

The modules import one way, each only the ones below it (pyproject.toml holds the order):

    schema                               the migration log, MODELS
    requests                             patient requests, attachments, upload links
    calls | idempotency                  handed-off calls; stored write answers
    audit                                the append-only trails (writes, reads)
    staff | tokens                       console users; API keys
    patients                             patients and their records per clinic
    change_events                        the event log for integrators, the clinics' webhook endpoints
    clinics | objects | outbox           organizations, clinics and their set-up; objects to delete;
                                         what the workers must tell someone
    base                                 the database proxy, storage conventions

`from models import X` names every public model and type, whichever module holds it.
"""

from models.audit import Actor, AppendOnly, AuditEvent, Origin, Reader, ReadEvent
from models.base import BaseModel
from models.calls import Call, CallSidConflict, RefusedHandoff
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
from models.requests import MedicalRecord, PatientRequest, PatientRequestTag, Reservation, Triage, UploadLink
from models.schema import MODELS, SchemaMigration
from models.staff import StaffMembership, StaffPasswordLink, StaffRecoveryCode, StaffSession, StaffUser
from models.tokens import ApiToken, ApiTokenClinic

__all__ = [
    "MODELS",
    "Actor",
    "ApiToken",
    "ApiTokenClinic",
    "AppendOnly",
    "AuditEvent",
    "BaseModel",
    "Calendar",
    "Call",
    "CallSidConflict",
    "ChangeEvent",
    "Clinic",
    "ExternalId",
    "IdempotencyKey",
    "MedicalRecord",
    "OfficeHours",
    "Organization",
    "Origin",
    "Outbox",
    "Patient",
    "PatientRecord",
    "PatientRecordTag",
    "PatientRequest",
    "PatientRequestTag",
    "PendingObjectDeletion",
    "ReadEvent",
    "Reader",
    "RefusedHandoff",
    "RequestType",
    "RequestTypeDefaultTag",
    "Reservation",
    "SchemaMigration",
    "StaffMembership",
    "StaffPasswordLink",
    "StaffRecoveryCode",
    "StaffSession",
    "StaffUser",
    "Tag",
    "Triage",
    "UploadLink",
    "Vacation",
    "WebhookEndpoint",
]
