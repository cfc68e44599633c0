"""Patients (one per person in an organization) and their records in each clinic: status,
note, tags and external ids."""

from __future__ import annotations

import uuid
from typing import Any

import peewee as pw

from models.base import BaseModel
from models.clinics import Clinic, Organization, Tag
from plumbing.clock import utc_now
from plumbing.row_cache import REQUESTS_CHANNEL, Watched


class Patient(BaseModel):
    organization_id: uuid.UUID
    merged_into_id: uuid.UUID | None

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    organization = pw.ForeignKeyField(Organization, backref="patients", on_delete="CASCADE")
    first_name = pw.CharField(max_length=200, default="")
    last_name = pw.CharField(max_length=200, default="")
    phone = pw.CharField(max_length=20, null=True, index=True)  # E.164
    email = pw.CharField(max_length=320, null=True)
    birth_date = pw.DateField(null=True)
    merged_into = pw.ForeignKeyField("self", null=True, backref="merged", on_delete="SET NULL")
    created_at = pw.DateTimeField(default=utc_now)
    # Every change's time and its place among the changes (models/base.py `place_changes`).
    updated_at = pw.DateTimeField(null=True)
    change_position = pw.BigIntegerField(null=True, unique=True)

    class Meta:
        # A number changed or a merge changes who has an open request (has-active-request's
        # memory, models/requests.py `OpenCallers`); a new patient has no request yet.
        row_cache = Watched(
            columns=frozenset({"phone", "merged_into", "organization"}), inserts=False, channel=REQUESTS_CHANNEL
        )
        indexes = ((("organization", "phone"), False),)

    # The service's own patients are stored under fixed English markers: an existing
    # deployment's rows hold them and the API returns them as stored (docs/integrators say so).
    # They are codes, not words for people: whoever shows one to a person shows the reader's
    # words for it instead (`marker`; the console's are console/patient_words.py).
    #: The patient a request kept for its signed documents belongs to once its own patient
    #: was erased (privacy/erasure.py): one per organization, holding no personal data.
    ERASED_NAME = "Erased patient"
    #: The patient of a withheld number (one per clinic, patients/callers.py): the retention
    #: knows such a patient by it (privacy/retention.py).
    UNKNOWN_CALLER = "Unknown caller"
    #: `marker`'s codes.
    MARKER_ERASED = "erased-patient"
    MARKER_UNKNOWN_CALLER = "unknown-caller"

    @property
    def marker(self) -> str | None:
        """Which of the service's own patients this is (`MARKER_ERASED`,
        `MARKER_UNKNOWN_CALLER`), None for a person. Known by the stored marker with no first
        name and no number: a person someone named "Unknown caller" has a number or a first
        name, or was imported so."""
        if self.first_name or self.phone:
            return None
        return {self.ERASED_NAME: self.MARKER_ERASED, self.UNKNOWN_CALLER: self.MARKER_UNKNOWN_CALLER}.get(
            self.last_name
        )

    @property
    def person_name(self) -> str:
        """The name as stored, "" for one of the service's own patients (`marker`)."""
        return "" if self.marker else f"{self.first_name} {self.last_name}".strip()

    @staticmethod
    def erased_id(organization_id: uuid.UUID) -> uuid.UUID:
        return uuid.uuid5(organization_id, "erased-patient")

    @classmethod
    def ids_with_phone(cls, organization_id: uuid.UUID, phone: str) -> list[uuid.UUID]:
        query = cls.select(cls.id).where((cls.organization == organization_id) & (cls.phone == phone))
        return [p.id for p in query]

    @classmethod
    def merge_links(cls, ids: list[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID]:
        """Which patient each merged one was merged into, for `ids` and every patient
        their merge chains lead to: one query per step along the chains."""
        links: dict[uuid.UUID, uuid.UUID] = {}
        seen, frontier = set(ids), set(ids)
        while frontier:
            query = cls.select(cls.id, cls.merged_into).where(
                cls.id.in_(list(frontier)) & cls.merged_into.is_null(False)
            )
            step = {p.id: p.merged_into_id for p in query if p.merged_into_id is not None}
            links.update(step)
            frontier = set(step.values()) - seen
            seen |= frontier
        return links

    @classmethod
    def with_survivors(cls, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        """`ids` plus the patients they were merged into, following merge chains."""
        return list(set(ids) | set(cls.merge_links(ids).values()))

    def survivor_id(self) -> uuid.UUID:
        """The id at the end of this patient's merge chain (its own when not merged; on
        a cycle, the last patient before the chain comes back)."""
        if self.merged_into_id is None:
            return self.id
        links = Patient.merge_links([self.merged_into_id])
        seen, current = {self.id}, self.merged_into_id
        while (after := links.get(current)) is not None and after not in seen:
            seen.add(current)
            current = after
        return current


class PatientRecord(BaseModel):
    """A patient's record in one clinic: status, note, tags and external ids live here."""

    patient_id: uuid.UUID
    clinic_id: uuid.UUID

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    patient = pw.ForeignKeyField(Patient, backref="records", on_delete="CASCADE")
    clinic = pw.ForeignKeyField(Clinic, backref="patient_records", on_delete="CASCADE")
    status = pw.CharField(max_length=32, default="ACTIVE")
    note = pw.TextField(default="")
    created_at = pw.DateTimeField(default=utc_now)

    class Meta:
        indexes = ((("patient", "clinic"), True), (("clinic",), False))

    #: The note on a record a call made (patients/callers.py): the retention knows such a
    #: record by it (privacy/retention.py). A marker like `Patient.UNKNOWN_CALLER`: stored and
    #: answered by the API as it is, shown to people in their words (`note_marker`).
    FROM_A_CALL = "Created from a phone call."
    #: `note_marker`'s code.
    MARKER_FROM_A_CALL = "from-a-call"

    @property
    def note_marker(self) -> str | None:
        """`MARKER_FROM_A_CALL` when the note is the service's own, None for a note someone wrote."""
        return self.MARKER_FROM_A_CALL if self.note == self.FROM_A_CALL else None


class PatientRecordTag(BaseModel):
    id: Any  # the AutoField: a column in queries, an int on a row
    record_id: uuid.UUID
    tag_id: uuid.UUID

    record = pw.ForeignKeyField(PatientRecord, backref="record_tags", on_delete="CASCADE")
    tag = pw.ForeignKeyField(Tag, on_delete="CASCADE")

    class Meta:
        indexes = ((("record", "tag"), True),)


class ExternalId(BaseModel):
    """An external identifier registered in one clinic for a patient."""

    id: Any  # the AutoField: a column in queries, an int on a row
    clinic_id: uuid.UUID
    patient_id: uuid.UUID

    clinic = pw.ForeignKeyField(Clinic, on_delete="CASCADE")
    patient = pw.ForeignKeyField(Patient, backref="external_ids", on_delete="CASCADE")
    source = pw.CharField(max_length=100, default="")
    value = pw.CharField(max_length=200)

    class Meta:
        indexes = ((("clinic", "source", "value"), True), (("clinic", "value"), False))
