"""Patient requests, with their tags, reservations, upload links and registered attachments."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import peewee as pw

from models.base import BaseModel
from models.calls import Call
from models.clinics import Calendar, Clinic, RequestType, Tag
from models.patients import Patient
from models.tokens import ApiToken
from plumbing.clock import utc_now
from plumbing.database import hot_prepared
from plumbing.row_cache import REQUESTS_CHANNEL, Watched


class PatientRequest(BaseModel):
    clinic_id: uuid.UUID
    patient_id: uuid.UUID
    request_type_id: uuid.UUID | None
    suggested_type_id: uuid.UUID | None
    created_by_id: uuid.UUID | None
    call_id: uuid.UUID | None

    KINDS = ("standard", "voice_message", "missed_call")

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    clinic = pw.ForeignKeyField(Clinic, backref="patient_requests", on_delete="CASCADE")
    patient = pw.ForeignKeyField(Patient, backref="requests", on_delete="CASCADE")
    request_type = pw.ForeignKeyField(RequestType, null=True, on_delete="SET NULL")
    kind = pw.CharField(max_length=20, default="standard")
    title = pw.CharField(max_length=300, default="")
    clinic_note = pw.TextField(default="")  # `userNote` of create
    user_note = pw.TextField(default="")  # `userNote` of PATCH
    created_at = pw.DateTimeField(default=utc_now)
    done_at = pw.DateTimeField(null=True)
    created_by = pw.ForeignKeyField(ApiToken, null=True, on_delete="SET NULL")
    # The call a voice message / missed call request came from: at most one request a call.
    call = pw.ForeignKeyField(Call, null=True, unique=True, backref="requests", on_delete="SET NULL")
    # What the transcript suggests (triage/): a request type of the clinic's (null: "other"),
    # and the character ranges of the call's transcript that suggested it, as JSON
    # [[start, end], ...]; null when the request was never read (not a voice message with a
    # transcript). `request_type` holds the type staff confirmed, at `type_confirmed_at`.
    suggested_type = pw.ForeignKeyField(RequestType, null=True, on_delete="SET NULL", column_name="suggested_type_id")
    suggested_type_spans = pw.TextField(null=True)
    type_confirmed_at = pw.DateTimeField(null=True)
    # May be urgent (a hint for a human, never a diagnosis): flagged until staff clear it; the
    # transcript's ranges that flagged it, as JSON, kept after the flag is cleared.
    urgent = pw.BooleanField(default=False)
    urgent_spans = pw.TextField(null=True)
    urgent_cleared_at = pw.DateTimeField(null=True)
    # Every change's time (of the request, its tags, reservations or attachments) and its
    # place among the changes (models/base.py `place_changes`).
    updated_at = pw.DateTimeField(null=True)
    change_position = pw.BigIntegerField(null=True, unique=True)

    class Meta:
        # A request made, resolved or moved changes what has-active-request answers from
        # memory (`OpenCallers`); its other columns do not.
        row_cache = Watched(columns=frozenset({"done_at", "patient", "clinic"}), channel=REQUESTS_CHANNEL)
        indexes = (
            (("clinic", "patient", "done_at"), False),
            (("clinic", "created_at"), False),
            # Search filtered by kind, newest first (a clinic's few voice messages among
            # many other requests are found without walking past the others).
            (("clinic", "kind", "created_at"), False),
        )

    @classmethod
    def open_for_caller(
        cls, clinic: Clinic, phone: str | None, patient_id: uuid.UUID | None, *, timeout: float | None = None
    ) -> bool:
        """Whether the clinic has an open request of the patients with `phone` in its
        organization or of `patient_id`, or of a patient either was merged into (along
        the whole chain), in one round trip, for
        `has-active-request`, which a switchboard asks on every call; ended by the server
        past `timeout` seconds when given."""
        return bool(
            hot_prepared(
                "open_for_caller",
                _OPEN_FOR_CALLER_SQL,
                (
                    Patient.organization.db_value(clinic.organization_id),
                    phone,
                    Patient.id.db_value(patient_id) if patient_id else None,
                    cls.clinic.db_value(clinic.id),
                ),
                statement_timeout=timeout,
            ).fetchone()[0]
        )

    @classmethod
    def open_callers(cls, clinic: Clinic, *, keep: int, timeout: float | None = None) -> OpenCallers | None:
        """Who has an open request of the clinic, as `open_for_caller` asks it: the phone
        numbers (in the clinic's organization) and the ids of the patients that have one or
        were merged into one that has (along the whole chain), in one round trip; None when
        there are more than `keep` such patients. Ended by the server past `timeout`
        seconds when given."""
        rows = hot_prepared(
            "open_callers",
            _OPEN_CALLERS_SQL,
            (cls.clinic.db_value(clinic.id), keep + 1),
            statement_timeout=timeout,
        ).fetchall()
        if len(rows) > keep:
            return None
        organization = str(clinic.organization_id)
        phones = frozenset(phone for _, phone, org in rows if phone and str(org) == organization)
        return OpenCallers(phones, frozenset(uuid.UUID(str(id_)) for id_, _, _ in rows))


@dataclass(frozen=True)
class OpenCallers:
    """A clinic's open requests by caller (`PatientRequest.open_callers`): what
    `has-active-request` answers from memory while no request or patient changed."""

    phones: frozenset[str]
    patient_ids: frozenset[uuid.UUID]

    def has(self, phone: str | None, patient_id: uuid.UUID | None) -> bool:
        """`PatientRequest.open_for_caller`'s answer."""
        return (phone is not None and phone in self.phones) or (
            patient_id is not None and patient_id in self.patient_ids
        )


@dataclass(frozen=True)
class Triage:
    """What a voice message's transcript suggests, as its request stores it (triage/ reads
    it): a request type's id or None ("other") with the transcript's character ranges that
    suggested it, and whether it may be urgent with the ranges that say so."""

    type_id: uuid.UUID | None
    type_spans: list[tuple[int, int]] = field(default_factory=list)
    urgent: bool = False
    urgent_spans: list[tuple[int, int]] = field(default_factory=list)

    def columns(self) -> dict[str, Any]:
        return {
            "suggested_type": self.type_id,
            "suggested_type_spans": json.dumps([list(s) for s in self.type_spans]),
            "urgent": self.urgent,
            "urgent_spans": json.dumps([list(s) for s in self.urgent_spans]),
        }


def spans_of(text: str | None) -> list[tuple[int, int]]:
    """Stored ranges (JSON) as pairs; [] for none."""
    return [(int(a), int(b)) for a, b in json.loads(text)] if text else []


def words_at(transcript: str, spans: list[tuple[int, int]]) -> list[str]:
    """The transcript's words in the ranges, each once, in their order (a range past the
    text's end is left out: it was read in another transcript)."""
    return list(dict.fromkeys(transcript[a:b] for a, b in sorted(spans) if b <= len(transcript)))


# The merge chains in SQL: UNION (not UNION ALL) drops ids already seen, so a cycle ends.
_OPEN_FOR_CALLER_SQL = """
WITH RECURSIVE chain(id) AS (
    SELECT "id" FROM "patient" WHERE "organization_id" = %s AND "phone" = %s
    UNION SELECT "id" FROM "patient" WHERE "id" = %s
    UNION SELECT p."merged_into_id" FROM "patient" p JOIN chain ON p."id" = chain."id"
          WHERE p."merged_into_id" IS NOT NULL
)
SELECT EXISTS (SELECT 1 FROM "patient_request" r WHERE r."clinic_id" = %s AND r."done_at" IS NULL
               AND r."patient_id" IN (SELECT "id" FROM chain))
"""

# The same chains walked backwards: from the patients with an open request of the clinic to
# every patient merged into one of them. A caller is among them exactly when the forward walk
# of `_OPEN_FOR_CALLER_SQL` from that caller meets an open request.
_OPEN_CALLERS_SQL = """
WITH RECURSIVE reach(id) AS (
    SELECT "patient_id" FROM "patient_request" WHERE "clinic_id" = %s AND "done_at" IS NULL
    UNION SELECT p."id" FROM "patient" p JOIN reach ON p."merged_into_id" = reach."id"
)
SELECT p."id", p."phone", p."organization_id" FROM "patient" p WHERE p."id" IN (SELECT "id" FROM reach) LIMIT %s
"""


class PatientRequestTag(BaseModel):
    id: Any  # the AutoField: a column in queries, an int on a row
    request_id: uuid.UUID
    tag_id: uuid.UUID

    request = pw.ForeignKeyField(PatientRequest, backref="request_tags", on_delete="CASCADE")
    tag = pw.ForeignKeyField(Tag, on_delete="CASCADE")

    class Meta:
        indexes = ((("request", "tag"), True),)


class Reservation(BaseModel):
    """A time slot booked by `timeSlotInput` on create (the request is closed at once)."""

    request_id: uuid.UUID
    calendar_id: uuid.UUID | None

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    request = pw.ForeignKeyField(PatientRequest, backref="reservations", on_delete="CASCADE")
    calendar = pw.ForeignKeyField(Calendar, null=True, on_delete="SET NULL")
    starts_at = pw.DateTimeField()  # UTC
    ends_at = pw.DateTimeField()  # UTC
    created_at = pw.DateTimeField(default=utc_now)


class UploadLink(BaseModel):
    """An upload link handed out for one request (table `upload_link`, resource
    `resources.patient_requests.UploadLink`): its `fileHash` is the object key the signing
    system PUTs to; registration accepts only keys issued here for the same request."""

    id: Any  # the AutoField: a column in queries, an int on a row
    request_id: uuid.UUID

    class Meta:
        table_name = "upload_link"

    request = pw.ForeignKeyField(PatientRequest, backref="upload_links", on_delete="CASCADE")
    file_hash = pw.CharField(max_length=512, unique=True)
    content_type = pw.CharField(max_length=200)
    # Indexed (migration "upload_link_created_at_index"): a clinic's open links are counted
    # over the last minutes of rows on every upload-link call, and the purge walks the
    # expired ones oldest first.
    created_at = pw.DateTimeField(default=utc_now, index=True)


class MedicalRecord(BaseModel):
    """A registered attachment: the stored object `file_hash` on a patient request."""

    request_id: uuid.UUID
    created_by_id: uuid.UUID | None

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    request = pw.ForeignKeyField(PatientRequest, backref="medical_records", on_delete="CASCADE")
    file_hash = pw.CharField(max_length=512, unique=True)  # one registration per object
    # The registered copy (storage.base.sealed_key), which no upload URL can write, and the
    # SHA-256 of its bytes. Null on records registered before copies were made (migration 9):
    # those are served from `file_hash`.
    object_key = pw.CharField(max_length=512, null=True)
    sha256 = pw.CharField(max_length=64, null=True)
    content_type = pw.CharField(max_length=100)
    description = pw.CharField(max_length=255)
    category_type = pw.CharField(max_length=30, null=True)
    visible_to_patient = pw.BooleanField(default=False)
    created_at = pw.DateTimeField(default=utc_now)
    created_by = pw.ForeignKeyField(ApiToken, null=True, on_delete="SET NULL")

    class Meta:
        indexes = ((("request", "created_at"), False),)

    @property
    def stored_key(self) -> str:
        """Where the registered bytes are."""
        return self.object_key or self.file_hash

    @classmethod
    def is_registered(cls, upload_key: str) -> bool:
        return cls.select().where(cls.file_hash == upload_key).exists()
