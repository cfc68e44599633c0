"""Organizations and their clinics, with what a clinic sets up: calendars, office hours,
vacations, tags and request types."""

from __future__ import annotations

import json
import uuid
from typing import Any

import peewee as pw

from models.base import BaseModel
from plumbing.row_cache import Watched


class Organization(BaseModel):
    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    slug = pw.CharField(max_length=64, unique=True)
    name = pw.CharField(max_length=200)
    patient_sharing = pw.BooleanField(default=False)

    class Meta:
        # Its writes empty this process's row caches once committed (plumbing/row_cache.py):
        # patient sharing rides the cached clinic.
        row_cache = Watched()


class Clinic(BaseModel):
    # Set by peewee (foreign key ids, back-references) or by a query: declared for the type checker.
    organization_id: uuid.UUID
    calendars: pw.ModelSelect[Calendar]
    office_hours: pw.ModelSelect[OfficeHours]
    request_types: pw.ModelSelect[RequestType]
    tags: pw.ModelSelect[Tag]
    covered: bool  # ApiToken.authorize: whether the token is bound to this clinic

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    organization = pw.ForeignKeyField(Organization, backref="clinics", on_delete="CASCADE")
    slug = pw.CharField(max_length=64, unique=True)
    name = pw.CharField(max_length=200)
    timezone = pw.CharField(max_length=64)  # IANA name
    country = pw.CharField(max_length=2)  # ISO 3166-1 alpha-2; holidays and phone region
    subdivision = pw.CharField(max_length=16, null=True)  # holidays subdivision (state, ...)
    language = pw.CharField(max_length=8, null=True)  # transcription language; None = detect
    # JSON array of the ISO 639-1 codes the clinic's callers use, e.g. ["cs", "uk", "en"]:
    # the transcriber detects the language among these only. None = not set.
    languages = pw.TextField(null=True)
    missed_call_requests = pw.BooleanField(default=True)  # False = clinic opted out
    # The platform's API credentials (re-fetching recordings); password encrypted.
    platform_api_url = pw.CharField(max_length=500, null=True)
    platform_username = pw.CharField(max_length=200, null=True)
    platform_password_encrypted = pw.TextField(null=True)
    # The words a call's `Source` names this clinic's platform by (JSON list, lower case;
    # onboarding's switchboard `sourceMarkers`): only such calls get expired links re-fetched.
    platform_source_markers = pw.TextField(null=True)
    # Every staff user of the clinic must log in with a second factor (TOTP): one without it
    # is held at enrolment after the password (the clinic's admin decides, in the console).
    two_factor_required = pw.BooleanField(default=False)
    # How long what the clinic holds about callers and patients is kept, in days
    # (privacy/retention.py deletes it in the workers; docs/data-protection.md). None: kept,
    # as before these settings existed (a clinic onboarded since gets `RETENTION_DEFAULTS`).
    # Resolved requests made from calls, with their calls, this long after they were resolved:
    retention_call_requests_days = pw.IntegerField(null=True)
    # Calls that made no request (no recording, missed calls opted out), after they were received:
    retention_calls_days = pw.IntegerField(null=True)
    # Audit events lose their client address after this long (what and who stay):
    retention_audit_details_days = pw.IntegerField(null=True)
    # Signed documents (medical documentation) after they were registered; None: kept.
    retention_documents_days = pw.IntegerField(null=True)
    # The read trail's rows (models.audit.ReadEvent) after they were written; None: the
    # default, READS_DEFAULT_DAYS (never kept for ever: docs/data-protection.md says why).
    retention_reads_days = pw.IntegerField(null=True)
    # Resolved requests made through the API (not from a call), after they were resolved;
    # one holding a signed document stays while the document does. None: kept.
    retention_api_requests_days = pw.IntegerField(null=True)

    #: Two years: long enough to answer a breach found late (most are found months after
    #: they began) and a patient who asks who saw their record; short enough that the trail
    #: is not a second, longer-lived record of who was treated when.
    READS_DEFAULT_DAYS = 730

    #: What a clinic onboarded without a `retention` section gets (the reasons are in
    #: docs/data-protection.md); signed documents are kept unless the clinic says otherwise.
    RETENTION_DEFAULTS = {
        "retention_call_requests_days": 90,
        "retention_calls_days": 30,
        "retention_audit_details_days": 180,
        "retention_documents_days": None,
        "retention_api_requests_days": 365,
        "retention_reads_days": 730,
    }
    # The words that may mean a voice message is urgent, per language (JSON {"cs": [...], ...},
    # onboarding's `urgencyWords`); null: the shipped ones (triage/vocabulary.py).
    urgency_words = pw.TextField(null=True)
    # Who is told by e-mail of a voice message flagged "may be urgent" (notices/urgent.py):
    # the staff who opted in on their account page, and/or an on-call address; and when:
    # "closed" (outside office hours: in them the inbox shows it first) or "always".
    urgent_notice_staff = pw.BooleanField(default=True)
    urgent_notice_email = pw.CharField(max_length=254, null=True)
    urgent_notice_when = pw.CharField(max_length=8, default="closed")

    URGENT_NOTICE_WHEN = ("closed", "always")

    class Meta:
        row_cache = Watched()  # cached with the tokens and schedules (plumbing/row_cache.py)

    @classmethod
    def by_slug(cls, slug: str) -> Clinic:
        return cls.get(cls.slug == slug)

    @property
    def language_list(self) -> list[str]:
        """`languages` as a list; [] when not set."""
        return json.loads(self.languages) if self.languages else []

    @property
    def caller_languages(self) -> list[str]:
        """The languages to detect a caller's among: the clinic's own first, then the
        listed ones; [] when it has neither (any language)."""
        return list(dict.fromkeys(([self.language] if self.language else []) + self.language_list))


class Calendar(BaseModel):
    clinic_id: uuid.UUID
    vacations: pw.ModelSelect[Vacation]

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    clinic = pw.ForeignKeyField(Clinic, backref="calendars", on_delete="CASCADE")
    name = pw.CharField(max_length=200)
    ignore_holidays = pw.BooleanField(default=False)

    class Meta:
        indexes = ((("clinic", "name"), True),)
        row_cache = Watched()  # a routing schedule's part


class OfficeHours(BaseModel):
    id: Any  # the AutoField: a column in queries, an int on a row
    clinic_id: uuid.UUID

    WEEKS = ("every", "odd", "even")

    clinic = pw.ForeignKeyField(Clinic, backref="office_hours", on_delete="CASCADE")
    weekday = pw.SmallIntegerField()  # ISO: 1 = Monday ... 7 = Sunday
    opens = pw.TimeField()  # local wall-clock time in the clinic's timezone
    closes = pw.TimeField()  # <= opens means the interval runs past midnight
    weeks = pw.CharField(max_length=5, default="every")  # ISO week parity

    class Meta:
        row_cache = Watched()  # a routing schedule's part


class Vacation(BaseModel):
    calendar_id: uuid.UUID

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    calendar = pw.ForeignKeyField(Calendar, backref="vacations", on_delete="CASCADE")
    name = pw.CharField(max_length=200, default="")
    starts_at = pw.DateTimeField()  # UTC, inclusive
    ends_at = pw.DateTimeField()  # UTC, exclusive
    applies_to_switchboard = pw.BooleanField(default=True)

    class Meta:
        row_cache = Watched()  # a routing schedule's part


class Tag(BaseModel):
    clinic_id: uuid.UUID

    TYPES = ("patient", "patient_request")

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    clinic = pw.ForeignKeyField(Clinic, backref="tags", on_delete="CASCADE")
    type = pw.CharField(max_length=20)
    name = pw.CharField(max_length=200)
    color = pw.CharField(max_length=20, null=True)
    deleted_at = pw.DateTimeField(null=True)

    class Meta:
        indexes = ((("clinic", "type", "name"), True),)


class RequestType(BaseModel):
    clinic_id: uuid.UUID
    default_tags: pw.ModelSelect[RequestTypeDefaultTag]

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    clinic = pw.ForeignKeyField(Clinic, backref="request_types", on_delete="CASCADE")
    ecrf_id = pw.CharField(max_length=100)
    name = pw.CharField(max_length=200)
    description = pw.TextField(default="")
    requires_reservation = pw.BooleanField(default=False)
    requires_payment = pw.BooleanField(default=False)
    requires_signature = pw.BooleanField(default=False)
    reservation_length = pw.IntegerField(default=0)
    remind_days_before = pw.IntegerField(default=0)
    active = pw.BooleanField(default=True)
    # The words in a voice message's transcript that suggest this type (JSON: a shipped set
    # `preset` and the type's own `words` per language; onboarding's `transcriptWords`);
    # null: the type is never suggested.
    transcript_words = pw.TextField(null=True)

    class Meta:
        indexes = ((("clinic", "ecrf_id"), True),)

    #: The type's fields under the names the contract and the onboarding document give them
    #: (`patientRequestTypes/search` answers them; an onboarding file writes them), each
    #: with its column. One list, so the two cannot name a field differently.
    PUBLIC_FIELDS = {
        "ecrfId": "ecrf_id",
        "name": "name",
        "description": "description",
        "requiresReservation": "requires_reservation",
        "requiresPayment": "requires_payment",
        "requiresSignature": "requires_signature",
        "reservationLength": "reservation_length",
        "remindDaysBefore": "remind_days_before",
    }

    def public_fields(self) -> dict[str, Any]:
        return {name: getattr(self, column) for name, column in self.PUBLIC_FIELDS.items()}

    @classmethod
    def columns_of(cls, fields: dict[str, Any]) -> dict[str, Any]:
        """The columns of `fields` given under their public names (an onboarding document's
        type): those it leaves out take their column's default."""
        return {
            column: fields[name] if name in fields else getattr(cls, column).default
            for name, column in cls.PUBLIC_FIELDS.items()
        }


class RequestTypeDefaultTag(BaseModel):
    id: Any  # the AutoField: a column in queries, an int on a row
    request_type_id: uuid.UUID
    tag_id: uuid.UUID

    request_type = pw.ForeignKeyField(RequestType, backref="default_tags", on_delete="CASCADE")
    tag = pw.ForeignKeyField(Tag, on_delete="CASCADE")

    class Meta:
        indexes = ((("request_type", "tag"), True),)
