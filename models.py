"""Peewee models and the domain queries that live on them.

Times are stored as naive UTC (`utc_now()`); office hours and vacations are evaluated
in the clinic's IANA timezone by `office_hours`. Phones are stored in E.164.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NoReturn

import peewee as pw

from plumbing.clock import as_utc, utc_now
from plumbing.database import columns, db, from_row, hot_prepared, hot_sql, is_postgresql
from plumbing.errors import Conflict
from plumbing.logs import client_address as current_client_address
from plumbing.logs import request_id as current_request_id
from plumbing.phones import to_e164

if TYPE_CHECKING:
    from plumbing.row_cache import RowCache


def _uuid(value: Any) -> uuid.UUID:
    """A UUID column's raw value (a string on SQLite, a UUID on PostgreSQL) as a UUID."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


class BaseModel(pw.Model):
    class Meta:
        database = db
        legacy_table_names = False


class Organization(BaseModel):
    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    slug = pw.CharField(max_length=64, unique=True)
    name = pw.CharField(max_length=200)
    patient_sharing = pw.BooleanField(default=False)


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


class OfficeHours(BaseModel):
    id: Any  # the AutoField: a column in queries, an int on a row
    clinic_id: uuid.UUID

    WEEKS = ("every", "odd", "even")

    clinic = pw.ForeignKeyField(Clinic, backref="office_hours", on_delete="CASCADE")
    weekday = pw.SmallIntegerField()  # ISO: 1 = Monday ... 7 = Sunday
    opens = pw.TimeField()  # local wall-clock time in the clinic's timezone
    closes = pw.TimeField()  # <= opens means the interval runs past midnight
    weeks = pw.CharField(max_length=5, default="every")  # ISO week parity


class Vacation(BaseModel):
    calendar_id: uuid.UUID

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    calendar = pw.ForeignKeyField(Calendar, backref="vacations", on_delete="CASCADE")
    name = pw.CharField(max_length=200, default="")
    starts_at = pw.DateTimeField()  # UTC, inclusive
    ends_at = pw.DateTimeField()  # UTC, exclusive
    applies_to_switchboard = pw.BooleanField(default=True)


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

    class Meta:
        indexes = ((("organization", "phone"), False),)

    @classmethod
    def ids_with_phone(cls, organization_id: uuid.UUID, phone: str) -> list[uuid.UUID]:
        query = cls.select(cls.id).where((cls.organization == organization_id) & (cls.phone == phone))
        return [p.id for p in query]

    @classmethod
    def for_caller(cls, clinic: Clinic, raw_number: str) -> Patient:
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
            patient = cls.get_or_none(cls.id == anonymous) or cls.create(
                id=anonymous, organization=clinic.organization_id, last_name="Unknown caller"
            )
            PatientRecord.insert(patient=patient, clinic=clinic).on_conflict_ignore().execute()
            return patient
        if is_postgresql():
            # Serialize first calls from one new number, so they share one new patient.
            db.execute_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{clinic.organization_id}:{phone}",))
        survivors = cls.with_survivors(cls.ids_with_phone(clinic.organization_id, phone))
        live = [p for p in cls.select().where(cls.id.in_(survivors or [uuid.UUID(int=0)])) if p.merged_into_id is None]
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
                return cls.get_by_id(open_here.patient_id)
            newest = (
                PatientRecord.select()
                .where((PatientRecord.clinic == clinic) & PatientRecord.patient.in_(list(local)))
                .order_by(PatientRecord.created_at.desc())
                .first()
            )
            return cls.get_by_id(newest.patient_id)
        if len(live) == 1 and clinic.organization.patient_sharing:
            PatientRecord.insert(patient=live[0], clinic=clinic).on_conflict_ignore().execute()
            return live[0]
        patient = cls.create(organization=clinic.organization_id, phone=phone)
        PatientRecord.create(patient=patient, clinic=clinic, note="Created from a phone call.")
        return patient

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

    class Meta:
        indexes = ((("clinic", "ecrf_id"), True),)


class RequestTypeDefaultTag(BaseModel):
    id: Any  # the AutoField: a column in queries, an int on a row
    request_type_id: uuid.UUID
    tag_id: uuid.UUID

    request_type = pw.ForeignKeyField(RequestType, backref="default_tags", on_delete="CASCADE")
    tag = pw.ForeignKeyField(Tag, on_delete="CASCADE")

    class Meta:
        indexes = ((("request_type", "tag"), True),)


class ApiToken(BaseModel):
    """A personal access token. The secret is shown once; only its SHA-256 is kept.

    The token text is `csk_<id hex>_<secret>`: the id finds the row, the secret's hash
    is compared in constant time. The secret has 256 bits of entropy, so a fast hash
    is the right tool (a password hash would only slow every request down).
    """

    PREFIX = "csk"
    SCOPES = ("read", "write")

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    name = pw.CharField(max_length=200)  # the service account every write is attributed to
    secret_hash = pw.CharField(max_length=64)
    scopes = pw.CharField(max_length=50)  # space separated
    created_at = pw.DateTimeField(default=utc_now)
    expires_at = pw.DateTimeField(null=True)
    revoked_at = pw.DateTimeField(null=True)
    last_used_at = pw.DateTimeField(null=True)
    # Who issued it, as the audit trail names them ("staff:anna@example.cz", "operator:deploy")
    # and the key it replaced when issued by a rotation (migration 50; None before).
    created_by = pw.CharField(max_length=220, null=True)
    rotated_from = pw.UUIDField(null=True)

    @staticmethod
    def _hash(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    @classmethod
    def issue(
        cls,
        name: str,
        clinics: list[Clinic],
        scopes: list[str],
        expires_in: timedelta | None = None,
        created_by: str | None = None,
        expires_at: datetime | None = None,
        rotated_from: uuid.UUID | None = None,
    ) -> tuple[ApiToken, str]:
        """Create a token; returns the row and the token text (never stored). The rules
        (expiry required, at most a year, ...) are `api_keys`'s: this only writes."""
        secret = secrets.token_urlsafe(32)
        with db.atomic():
            token = cls.create(
                name=name,
                secret_hash=cls._hash(secret),
                scopes=" ".join(sorted(set(scopes))),
                expires_at=as_utc(expires_at) if expires_at else (utc_now() + expires_in if expires_in else None),
                created_by=created_by,
                rotated_from=rotated_from,
            )
            for clinic in clinics:
                ApiTokenClinic.create(token=token, clinic=clinic)
        return token, f"{cls.PREFIX}_{token.id.hex}_{secret}"

    @classmethod
    def authorize(
        cls, text: str, slug: str, now: datetime, cache: RowCache | None = None
    ) -> tuple[ApiToken, Clinic | None] | None:
        """The live token for `text` (None: unknown, bad secret, revoked or expired) and
        the clinic named `slug` (None if there is none), with `covered` telling whether
        the token is bound to it.

        One round trip for every check, in SQL written once (Peewee would rebuild it per
        request, which cost more than running it), or none when `cache` holds them.
        """
        parts = text.split("_", 2)
        if len(parts) != 3 or parts[0] != cls.PREFIX:
            return None
        try:
            token_id = uuid.UUID(hex=parts[1])
        except ValueError:
            return None
        key = (token_id, slug)
        cached, generation = cache.get(key) if cache is not None else (None, -1)
        presented = cls._hash(parts[2])
        if cached is not None:
            # The models built from the row when it was read (building them per request
            # cost as much as the rest of the check); nothing changes them afterwards.
            token, clinic = cached
        else:
            row = hot_sql(_AUTHORIZE_SQL, (slug, cls.id.db_value(token_id))).fetchone()
            if row is None:
                hmac.compare_digest(presented, presented)  # same work either way
                return None
            token = from_row(cls, row)
            clinic_values = row[len(cls._meta.sorted_fields) :]
            clinic = None
            if clinic_values[0] is not None:  # else the LEFT JOIN found no clinic of that slug
                clinic = from_row(Clinic, clinic_values)
                clinic.covered = bool(clinic_values[-1])
        if not hmac.compare_digest(token.secret_hash, presented):
            return None
        if token.revoked_at is not None:
            return None
        if token.expires_at is not None and token.expires_at <= as_utc(now):
            return None
        if clinic is None:
            return token, None
        if cached is None and cache is not None:  # only rows whose secret matched: no filling it with guesses
            cache.put(key, (token, clinic), generation)
        return token, clinic

    @property
    def scope_set(self) -> set[str]:
        return set(self.scopes.split())

    @classmethod
    def touch(cls, token_id: uuid.UUID, now: datetime, every: timedelta) -> datetime:
        """Record a use at `now` unless one within `every` is recorded already (by any
        process): at most one write per token per `every`. Returns the recorded last use."""
        now = as_utc(now)
        written = (
            cls.update(last_used_at=now)
            .where((cls.id == token_id) & (cls.last_used_at.is_null() | (cls.last_used_at <= now - every)))
            .execute()
        )
        if written:
            return now
        row = cls.select(cls.last_used_at).where(cls.id == token_id).first()
        return as_utc(row.last_used_at) if row and row.last_used_at else now


class ApiTokenClinic(BaseModel):
    id: Any  # the AutoField: a column in queries, an int on a row
    token_id: uuid.UUID
    clinic_id: uuid.UUID

    token = pw.ForeignKeyField(ApiToken, backref="clinic_links", on_delete="CASCADE")
    clinic = pw.ForeignKeyField(Clinic, on_delete="CASCADE")

    class Meta:
        indexes = ((("token", "clinic"), True),)


class Call(BaseModel):
    """A switchboard call, as handed off by `recording-complete`. Deduplicated by CallSid.

    `state` is `pending` until the ingest job has finished with it (`done`); `outcome`
    says what came of it. Every input is kept as received, `Extra` included.
    """

    clinic_id: uuid.UUID
    received_by_id: uuid.UUID | None

    OUTCOMES = ("no_recording", "voice_message", "missed_call", "opted_out", "recording_unavailable")
    # reliable / check / unreliable: the reliability label (transcription/reliability.py);
    # failed: no usable text.
    TRANSCRIPT_STATUSES = ("reliable", "check", "unreliable", "failed")

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    clinic = pw.ForeignKeyField(Clinic, backref="calls", on_delete="CASCADE")
    call_sid = pw.CharField(max_length=200, unique=True)
    call_from = pw.CharField(max_length=100)
    call_to = pw.CharField(max_length=100)
    status = pw.CharField(max_length=100, null=True)
    has_recording = pw.BooleanField(null=True)
    recording_url = pw.TextField(null=True)  # a credential while it lives: never logged
    recording_sid = pw.CharField(max_length=500, null=True)
    source = pw.CharField(max_length=200, null=True)
    extra = pw.TextField(null=True)
    received_at = pw.DateTimeField(default=utc_now)
    received_by = pw.ForeignKeyField(ApiToken, null=True, on_delete="SET NULL")
    state = pw.CharField(max_length=10, default="pending", index=True)
    outcome = pw.CharField(max_length=30, null=True)
    attempts = pw.IntegerField(default=0)
    fetch_error = pw.TextField(null=True)  # why the recording could not be fetched
    transcript = pw.TextField(null=True)
    transcript_language = pw.CharField(max_length=8, null=True)  # the detected language
    # How far the transcript can be trusted: TRANSCRIPT_STATUSES, or None when none was
    # attempted (no recording, not fetched, no speech); the issue is a short code
    # (`low_confidence`, `timeout`, `engine_error`, ...) when it is not `reliable`.
    transcript_status = pw.CharField(max_length=12, null=True)
    transcript_issue = pw.CharField(max_length=40, null=True)
    callback_number = pw.CharField(max_length=20, null=True)  # E.164, its digits confirmed as heard
    # A number read from the transcript whose digits were not confirmed (E.164 of the
    # digits as written): never callback_number, for a person to listen to.
    heard_number = pw.CharField(max_length=20, null=True)
    callback_number_at = pw.FloatField(null=True)  # seconds into the recording where either was said
    transcript_signals = pw.TextField(null=True)  # JSON: confidence signals of the engine
    intelligibility = pw.CharField(max_length=30, null=True)  # "ok" or the reason it is not
    processed_at = pw.DateTimeField(null=True)
    # Playable recording (jobs/refetch.py): the latest link re-fetched from the platform
    # (a credential: never logged) and its expiry; why the recording is gone, once known.
    recording_link = pw.TextField(null=True)
    recording_link_expires_at = pw.DateTimeField(null=True)
    recording_gone_reason = pw.CharField(max_length=30, null=True)
    recording_checked_at = pw.DateTimeField(null=True)
    # When the relay (jobs/relay.py) handed the call to the queue; None = not yet.
    queued_at = pw.DateTimeField(null=True)
    # What was odd about the hand-off (JSON list of `switchboard.handoff.ANOMALIES` names);
    # None when nothing was.
    anomalies = pw.TextField(null=True)
    # The recording the hand-off delivered, as the ingest job downloaded it: a re-fetched
    # link is served only when it yields these bytes (voicemail/recordings.py).
    recording_sha256 = pw.CharField(max_length=64, null=True)
    recording_bytes = pw.BigIntegerField(null=True)

    #: PostgreSQL NOTIFY channel of a trigger on every new call (migration 5): the relay
    #: LISTENs to queue calls at once, rather than on its next poll.
    NEW_CALL_CHANNEL = "call_pending"

    @classmethod
    def claim_unqueued(cls, limit: int = 200, per_clinic: int = 0) -> list[uuid.UUID]:
        """Mark up to `limit` pending calls as being queued and return their ids, in the
        order to queue them. Atomic per row: two relays never claim the same call.

        `per_clinic` > 0 is the fair share (issue 22): a clinic has at most that many
        calls in flight (claimed, not done), and clinics take turns: every clinic's next
        call comes before any clinic's call after it. So one clinic's burst holds at most
        `per_clinic` places in the queue, and another clinic's call waits behind those,
        not behind the whole burst. A call waiting for a download retry (`fetch_error`
        set by its job) holds no place: it would block its clinic for minutes. 0: oldest
        first, no limit (the order before the fair share)."""
        if per_clinic <= 0:
            oldest = (
                cls.select(cls.id)
                .where((cls.state == "pending") & cls.queued_at.is_null())
                .order_by(cls.received_at)
                .limit(limit)
            )
            claimed = (
                cls.update(queued_at=utc_now()).where(cls.id.in_(oldest) & cls.queued_at.is_null()).returning(cls.id)
            )
            return [row.id for row in claimed.execute()]
        waiting = [_uuid(row[0]) for row in hot_sql(_FAIR_CLAIM_SQL, (per_clinic, limit)).fetchall()]
        if not waiting:
            return []
        # Selected, then claimed row by row: a call another relay claimed in between is
        # skipped. Two relays at once pick from the front of the same per-clinic order, so
        # together they stay within the share (bar a call stored with an earlier
        # received_at than one already claimed: one more in flight for a while).
        taken = {
            row.id
            for row in cls.update(queued_at=utc_now())
            .where(cls.id.in_(waiting) & cls.queued_at.is_null())
            .returning(cls.id)
            .execute()
        }
        return [call_id for call_id in waiting if call_id in taken]

    @classmethod
    def unclaim(cls, ids: list[uuid.UUID]) -> None:
        if ids:
            cls.update(queued_at=None).where(cls.id.in_(ids)).execute()

    @classmethod
    def row_for(cls, clinic: Clinic, fields: dict, token: ApiToken | None) -> dict:
        """The row `recording-complete` stores (`switchboard.intake.GroupCommit` writes it)."""
        return {
            "id": uuid.uuid4(),
            "clinic": clinic.id,
            "received_by": token.id if token else None,
            "received_at": utc_now(),
            "state": "pending",
            "attempts": 0,
            **fields,
        }

    @classmethod
    def insert_rows(cls, rows: list[dict], origins: dict[uuid.UUID, Origin] | None = None) -> set[uuid.UUID]:
        """INSERT the rows in one statement, so one commit; returns the ids stored (a row
        whose CallSid is already stored, or repeated among `rows`, is skipped).

        Each stored row's `call.receive` audit event (`origins`: the request that handed
        each row off, and its client's address) is written by the same statement on
        PostgreSQL: a multi-row INSERT in a WITH, so still one round trip and one commit;
        none for a row skipped."""
        names = tuple(dict.fromkeys(name for row in rows for name in row))
        fields = [cls._meta.fields[name] for name in names]
        params = [field.db_value(row.get(field.name)) for row in rows for field in fields]
        origins = origins or {}
        if not is_postgresql():  # SQLite has no INSERT inside a WITH
            with db.atomic():
                stored = {_uuid(r[0]) for r in hot_sql(_insert_call_sql(names, len(rows)), params)}
                AuditEvent.calls_received([row for row in rows if row["id"] in stored], origins)
            return stored
        for row in rows:
            origin = origins.get(row["id"], Origin())
            params += [cls.id.db_value(row["id"]), origin.request_id, origin.address]
        sql = _insert_call_sql(names, len(rows), audited=True)
        return {_uuid(r[0]) for r in hot_sql(sql, params).fetchall()}

    @classmethod
    def stored(cls, clinic: Clinic, call_sid: str) -> Call:
        """The call already stored under `call_sid`; `CallSidConflict` if another clinic's."""
        call = cls.get(cls.call_sid == call_sid)
        if call.clinic_id != clinic.id:
            raise CallSidConflict(call_sid)
        return call

    def finish(
        self,
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
    ) -> None:
        """Record what the ingest made of the call and create its request, in one
        transaction, once: a call already done is left as it is, and a call has at most one
        request (`PatientRequest.from_call`)."""
        with db.atomic():
            PatientRequest.from_call(self, outcome)
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
            ).where((Call.id == self.id) & (Call.state == "pending")).execute()


class CallSidConflict(Conflict):
    """The CallSid of a hand-off is already another clinic's call."""

    def __init__(self, call_sid: str) -> None:
        super().__init__("This CallSid is already used by another clinic.", code="CALL_SID_CONFLICT")
        self.call_sid = call_sid


class RefusedHandoff(BaseModel):
    """A `recording-complete` answered 4xx after its token was authenticated: a switchboard
    does not retry those, so each is a voicemail that did not arrive. Kept
    `REFUSED_HANDOFF_RETENTION_DAYS` (the worker purges older rows) for the operator's
    `manage.py calls --refused`, and counted in /metrics. Never the body, and never a URL's
    query string in the message."""

    id = pw.BigAutoField()
    at = pw.DateTimeField(default=utc_now, index=True)  # UTC
    clinic_id = pw.UUIDField(null=True)  # None: the URL named no clinic (404)
    clinic_slug = pw.CharField(max_length=64)  # as the URL named it
    token_id = pw.UUIDField(null=True)
    call_sid = pw.CharField(max_length=200, null=True)  # when the body was read and had one
    status = pw.SmallIntegerField()
    code = pw.CharField(max_length=40)
    message = pw.CharField(max_length=500)


class IdempotencyKey(BaseModel):
    """The answer of a document write sent with an `Idempotency-Key` (web/idempotency.py),
    stored in the write's own transaction and replayed to a retry with the same key.

    A key belongs to one token and one operation: another token's identical key is
    another row, never visible to it. `fingerprint` is the SHA-256 of the request's path
    and canonical body, so the same key with another body is told apart; `answer` is the
    response body exactly as it was sent (for the upload link, the `fileHash` only: a
    replay presigns a fresh URL). Purged by the workers once `expires_at` has passed."""

    id = pw.BigAutoField()
    token = pw.ForeignKeyField(ApiToken, on_delete="CASCADE")
    operation = pw.CharField(max_length=40)
    key = pw.CharField(max_length=255)
    fingerprint = pw.CharField(max_length=64)
    status = pw.SmallIntegerField()
    answer = pw.BlobField()
    created_at = pw.DateTimeField(default=utc_now)  # UTC
    expires_at = pw.DateTimeField(index=True)  # UTC

    class Meta:
        indexes = ((("token", "operation", "key"), True),)

    @classmethod
    def find(cls, token_id: uuid.UUID, operation: str, key: str, now: datetime) -> IdempotencyKey | None:
        """The stored answer for this token's key, or None; one past its time is deleted
        (the purge may not have come yet) so that the key runs anew."""
        where = (cls.token == token_id) & (cls.operation == operation) & (cls.key == key)
        row = cls.get_or_none(where)
        if row is not None and as_utc(row.expires_at) <= as_utc(now):
            cls.delete().where(where & (cls.expires_at <= as_utc(now))).execute()
            return None
        return row

    @classmethod
    def store(
        cls,
        *,
        token_id: uuid.UUID,
        operation: str,
        key: str,
        fingerprint: str,
        status: int,
        answer: bytes,
        now: datetime,
        expires_at: datetime,
    ) -> bool:
        """Store an answer unless the key has one already (then False: another request
        stored it first). Inside the caller's transaction; a concurrent insert of the same
        key waits for that transaction's end, no savepoint needed."""
        query = cls.insert(
            token=token_id,
            operation=operation,
            key=key,
            fingerprint=fingerprint,
            status=status,
            answer=answer,
            created_at=as_utc(now),
            expires_at=as_utc(expires_at),
        ).on_conflict_ignore()
        return db.execute(query).rowcount == 1  # 0: the conflict skipped it

    @classmethod
    def purge(cls, now: datetime) -> int:
        """Delete the answers past their time; returns how many."""
        return cls.delete().where(cls.expires_at <= as_utc(now)).execute()


class PatientRequest(BaseModel):
    clinic_id: uuid.UUID
    patient_id: uuid.UUID
    request_type_id: uuid.UUID | None
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

    class Meta:
        indexes = (
            (("clinic", "patient", "done_at"), False),
            (("clinic", "created_at"), False),
            # Search filtered by kind, newest first (a clinic's few voice messages among
            # many other requests are found without walking past the others).
            (("clinic", "kind", "created_at"), False),
        )

    # The request a call's outcome makes: kind and title ("no_recording" and "opted_out" make none).
    FROM_CALL = {
        "voice_message": ("voice_message", "Voice message from {number}"),
        "missed_call": ("missed_call", "Missed call from {number}"),
        "recording_unavailable": ("voice_message", "Voice message from {number} (recording could not be fetched)"),
    }

    @classmethod
    def from_call(cls, call: Call, outcome: str) -> None:
        """The request `outcome` makes of the call, for the patient the caller is
        (`Patient.for_caller`); nothing when the call already has one (the unique
        `call_id`) or the outcome makes none. Call inside a transaction."""
        if outcome not in cls.FROM_CALL:
            return
        kind, title = cls.FROM_CALL[outcome]
        clinic = Clinic.get_by_id(call.clinic_id)
        patient = Patient.for_caller(clinic, call.call_from)
        cls.insert(
            clinic=clinic,
            patient=patient,
            kind=kind,
            call=call.id,
            title=title.format(number=patient.phone or call.call_from.strip() or "a withheld number")[:300],
        ).on_conflict_ignore().execute()

    @classmethod
    def open_for_caller(cls, clinic: Clinic, phone: str | None, patient_id: uuid.UUID | None) -> bool:
        """Whether the clinic has an open request of the patients with `phone` in its
        organization or of `patient_id`, or of a patient either was merged into (along
        the whole chain), in one round trip, for
        `has-active-request`, which a switchboard asks on every call."""
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
            ).fetchone()[0]
        )


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


class StaffUser(BaseModel):
    """A clinic employee who logs in to the staff console with a password (never to the
    API). Disabled, not deleted: the audit trail names who wrote."""

    LANGUAGES = ("cs", "en")  # Czech first: the clinics are Czech

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    email = pw.CharField(max_length=254, unique=True)  # stored lower case (`normal_email`)
    name = pw.CharField(max_length=200)
    password_hash = pw.TextField()  # Argon2id, staff.passwords
    language = pw.CharField(max_length=2, default="cs")
    created_at = pw.DateTimeField(default=utc_now)
    disabled_at = pw.DateTimeField(null=True)
    last_login_at = pw.DateTimeField(null=True)
    # Two-factor login (staff/two_factor.py): the TOTP secret encrypted with SECRET_KEY
    # (plumbing/crypto.py); set but not enabled while the user is enrolling. The last time
    # step a code was accepted for: a code is good once, even within its window.
    totp_secret_encrypted = pw.TextField(null=True)
    totp_enabled_at = pw.DateTimeField(null=True)
    totp_last_step = pw.BigIntegerField(null=True)

    @property
    def two_factor(self) -> bool:
        return self.totp_enabled_at is not None

    @staticmethod
    def normal_email(email: str) -> str:
        return email.strip().lower()

    @classmethod
    def by_email(cls, email: str) -> StaffUser | None:
        return cls.get_or_none(cls.email == cls.normal_email(email))

    def clinics(self, role: str | None = None) -> list[Clinic]:
        """The clinics of the user's memberships (only those with `role` when given), by name."""
        query = Clinic.select().join(StaffMembership).where(StaffMembership.user == self)
        if role is not None:
            query = query.where(StaffMembership.role == role)
        return list(query.order_by(Clinic.name, Clinic.slug))

    def role_in(self, clinic: Clinic) -> str | None:
        """`staff`, `admin`, or None when the user does not work for the clinic."""
        membership = StaffMembership.get_or_none(StaffMembership.user == self, StaffMembership.clinic == clinic)
        return membership.role if membership else None

    def two_factor_required(self) -> bool:
        """Whether a clinic the user works for requires a second factor at login."""
        return (
            Clinic.select()
            .join(StaffMembership)
            .where((StaffMembership.user == self) & Clinic.two_factor_required)
            .exists()
        )


class StaffMembership(BaseModel):
    """Which clinics a staff user works for, and as what."""

    id: Any  # the AutoField: a column in queries, an int on a row
    user_id: uuid.UUID
    clinic_id: uuid.UUID

    ROLES = ("staff", "admin")

    user = pw.ForeignKeyField(StaffUser, backref="memberships", on_delete="CASCADE")
    clinic = pw.ForeignKeyField(Clinic, backref="staff", on_delete="CASCADE")
    role = pw.CharField(max_length=8, default="staff")

    class Meta:
        indexes = ((("user", "clinic"), True),)


class StaffSession(BaseModel):
    """A console login, held server-side. The cookie carries a random token; only its
    SHA-256 is stored (the id), so a database dump opens no session. Logging out or
    disabling the user deletes the row, which ends the session at once."""

    user_id: uuid.UUID

    id = pw.CharField(max_length=64, primary_key=True)  # sha256 hex of the cookie's token
    user = pw.ForeignKeyField(StaffUser, backref="sessions", on_delete="CASCADE")
    created_at = pw.DateTimeField()
    last_seen_at = pw.DateTimeField()
    csrf_token = pw.CharField(max_length=64)
    ip = pw.CharField(max_length=64, null=True)
    user_agent = pw.CharField(max_length=300, null=True)
    # A login half done: None = logged in; "code" = the password was right, the second factor
    # is awaited; "enrol" = the password was right, and a clinic requires two-factor the user
    # has not enrolled yet. Such a session opens only the page that finishes the login.
    pending = pw.CharField(max_length=8, null=True)


class StaffPasswordLink(BaseModel):
    """A one-time link that lets a staff user choose a password (a new account, or a reset
    an admin made): the service sends no e-mail, the admin hands the link over. Only the
    SHA-256 of its token is stored; it is good once, until `expires_at`."""

    user_id: uuid.UUID

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    user = pw.ForeignKeyField(StaffUser, backref="password_links", on_delete="CASCADE")
    token_hash = pw.CharField(max_length=64, unique=True)
    created_at = pw.DateTimeField()
    expires_at = pw.DateTimeField()
    used_at = pw.DateTimeField(null=True)


class StaffRecoveryCode(BaseModel):
    """A two-factor recovery code (shown once at enrolment), stored as its SHA-256; good once."""

    id: Any
    user_id: uuid.UUID

    user = pw.ForeignKeyField(StaffUser, backref="recovery_codes", on_delete="CASCADE")
    code_hash = pw.CharField(max_length=64)
    used_at = pw.DateTimeField(null=True)

    class Meta:
        indexes = ((("user", "code_hash"), True),)


@dataclass(frozen=True)
class Origin:
    """Where a write came from, for its audit event: the request's id and client address
    (None outside a request: the CLI, a job)."""

    request_id: str | None = None
    address: str | None = None

    @classmethod
    def current(cls) -> Origin:
        return cls(current_request_id.get(), current_client_address.get())


@dataclass(frozen=True)
class Actor:
    """Who made a write: a token's service account (`token`), the operator at the CLI
    (`operator`), or a staff user in the console (`staff`, `Actor.staff`)."""

    kind: str
    name: str
    token_id: uuid.UUID | None = None

    @classmethod
    def of(cls, who: ApiToken | Actor) -> Actor:
        return who if isinstance(who, Actor) else cls("token", who.name, who.id)

    @classmethod
    def staff(cls, user: StaffUser) -> Actor:
        # The e-mail is the stable name (unique); the display name may repeat.
        return cls("staff", user.email)


class AppendOnly(Exception):
    """An audit event was to be changed or deleted: the trail never allows it."""


class AuditEvent(BaseModel):
    """One write in the append-only audit trail: when, who (the token and its service
    account's name as it was then; later a staff user), in which clinic, what (a stable
    verb such as `patient_request.patch`) and to what, with a few details that are never
    sensitive values (field names, counts, ids).

    `record` writes it inside the transaction of the write it describes, so a write that
    rolls back leaves no event and a committed one always has its event. The group commit
    of call hand-offs writes its events in its own single statement (`Call.insert_rows`).

    Append-only: nothing here changes or deletes a row (`update`, `delete` and saving an
    existing row raise `AppendOnly`), and on PostgreSQL a trigger refuses UPDATE and
    DELETE from any client (migration `audit_trail`). TRUNCATE stays possible: the tests
    empty every table between cases.
    """

    token_id: uuid.UUID | None

    ACTOR_KINDS = ("token", "operator", "staff")

    id = pw.BigAutoField()
    at = pw.DateTimeField(default=utc_now, index=True)  # UTC
    actor_kind = pw.CharField(max_length=16)
    # No ON DELETE action: SET NULL or CASCADE would be an UPDATE or DELETE of the trail,
    # which the trigger refuses. A token that wrote is revoked, never deleted. No index:
    # every call hand-off writes a row, and nothing reads the trail by token yet.
    token = pw.ForeignKeyField(ApiToken, null=True, backref="audit_events", index=False)
    actor_name = pw.CharField(max_length=200)  # the service account as named when it wrote
    # Not a foreign key: the trail must outlive what it names (a clinic's cascade would
    # delete it).
    clinic_id = pw.UUIDField(null=True)
    action = pw.CharField(max_length=64)
    target_type = pw.CharField(max_length=40, null=True)  # a table name: patient_request, call, ...
    target_id = pw.CharField(max_length=64, null=True)
    details = pw.TextField(default="{}")  # JSON object
    request_id = pw.CharField(max_length=128, null=True)  # the X-Request-Id of the access log line
    # From where: the client's address as the web process saw it (None: the CLI, a job).
    address = pw.CharField(max_length=64, null=True)

    class Meta:
        indexes = ((("clinic_id", "at"), False),)

    @classmethod
    def record(
        cls,
        actor: ApiToken | Actor,
        clinic: Clinic | uuid.UUID | None,
        action: str,
        target: pw.Model | tuple[str, object] | None = None,
        details: dict | None = None,
    ) -> None:
        """Append the event of a write; call it inside that write's transaction."""
        if not db.in_transaction():
            # Outside the write's transaction the event could outlive a rolled-back write,
            # or be missing from a committed one.
            raise RuntimeError("AuditEvent.record belongs inside the transaction of the write it records")
        who, origin = Actor.of(actor), Origin.current()
        if isinstance(target, pw.Model):
            target = (target._meta.table_name, target.get_id())
        cls.insert(
            at=utc_now(),
            actor_kind=who.kind,
            token=who.token_id,
            actor_name=who.name,
            clinic_id=clinic.id if isinstance(clinic, Clinic) else clinic,
            action=action,
            target_type=target[0] if target else None,
            target_id=str(target[1]) if target else None,
            details=json.dumps(details or {}, sort_keys=True, default=str),
            request_id=origin.request_id,
            address=origin.address,
        ).execute()

    @classmethod
    def calls_received(cls, rows: list[dict], origins: dict[uuid.UUID, Origin]) -> None:
        """The `call.receive` events of stored call rows (`Call.row_for`), in one INSERT;
        rows without a token are nobody's write to attribute. (On PostgreSQL
        `Call.insert_rows` writes them in its own statement instead.)"""
        names = {
            t.id: t.name
            for t in ApiToken.select(ApiToken.id, ApiToken.name).where(
                ApiToken.id.in_([r["received_by"] for r in rows if r.get("received_by")])
            )
        }
        events = [
            {
                "at": r["received_at"],
                "actor_kind": "token",
                "token": r["received_by"],
                "actor_name": names[r["received_by"]],
                "clinic_id": r["clinic"],
                "action": "call.receive",
                "target_type": "call",
                "target_id": str(r["id"]),
                "details": "{}",
                "request_id": origins.get(r["id"], Origin()).request_id,
                "address": origins.get(r["id"], Origin()).address,
            }
            for r in rows
            if r.get("received_by") in names
        ]
        if events:
            cls.insert_many(events).execute()

    @classmethod
    def trail(
        cls, clinic_id: uuid.UUID | None = None, since: datetime | None = None, limit: int = 100
    ) -> list[AuditEvent]:
        """Newest first (insertion order breaks ties of one timestamp)."""
        query = cls.select()
        if clinic_id is not None:
            query = query.where(cls.clinic_id == clinic_id)
        if since is not None:
            query = query.where(cls.at >= as_utc(since))
        return list(query.order_by(cls.at.desc(), cls.id.desc()).limit(limit))

    @classmethod
    def update(cls, *args: object, **kwargs: object) -> NoReturn:
        raise AppendOnly("audit events are never changed")

    @classmethod
    def delete(cls) -> NoReturn:
        raise AppendOnly("audit events are never deleted")

    def delete_instance(self, *args: object, **kwargs: object) -> NoReturn:
        raise AppendOnly("audit events are never deleted")

    def save(self, force_insert: bool = False, only: object = None) -> int | bool:
        if self.id is not None and not force_insert:  # saving a loaded row would UPDATE it
            raise AppendOnly("audit events are never changed")
        return super().save(force_insert=force_insert, only=only)


class SchemaMigration(BaseModel):
    version = pw.IntegerField(primary_key=True)
    name = pw.CharField(max_length=200)
    applied_at = pw.DateTimeField(default=utc_now)


# --- The hot path's SQL (every authenticated request, every call hand-off), run with
# database.hot_sql.

_AUTHORIZE_SQL = (
    f"SELECT {columns('t', ApiToken)}, {columns('c', Clinic)}, EXISTS ("
    'SELECT 1 FROM "api_token_clinic" AS l WHERE l."token_id" = t."id" AND l."clinic_id" = c."id") '
    'FROM "api_token" AS t LEFT JOIN "clinic" AS c ON c."slug" = %s WHERE t."id" = %s'
)


# The relay's fair claim (`Call.claim_unqueued`): each clinic's calls not queued yet,
# numbered oldest first, after its calls in flight; those whose place is within the
# share, by place (clinics take turns), then by age. Plain SQL with window functions:
# PostgreSQL and SQLite (3.25+, the embedded run) both run it.
_FAIR_CLAIM_SQL = """
WITH busy AS (
    SELECT "clinic_id", COUNT(*) AS "n" FROM "call"
    WHERE "state" = 'pending' AND "queued_at" IS NOT NULL AND "fetch_error" IS NULL
    GROUP BY "clinic_id"
), waiting AS (
    SELECT "id", "clinic_id", "received_at",
           ROW_NUMBER() OVER (PARTITION BY "clinic_id" ORDER BY "received_at", "id") AS "turn"
    FROM "call" WHERE "state" = 'pending' AND "queued_at" IS NULL
)
SELECT w."id" FROM waiting AS w LEFT JOIN busy AS b ON b."clinic_id" = w."clinic_id"
WHERE w."turn" + COALESCE(b."n", 0) <= %s
ORDER BY w."turn" + COALESCE(b."n", 0), w."received_at", w."id"
LIMIT %s
"""


@lru_cache(maxsize=256)
def _insert_call_sql(names: tuple[str, ...], rows: int, audited: bool = False) -> str:
    columns = ", ".join(f'"{Call._meta.fields[n].column_name}"' for n in names)
    values = ", ".join([f"({', '.join(['%s'] * len(names))})"] * rows)
    insert = f'INSERT INTO "call" ({columns}) VALUES {values} ON CONFLICT DO NOTHING RETURNING "id"'
    if not audited:
        return insert
    # The stored rows (RETURNING: a skipped row gets no event) joined to their token for the
    # service account's name, and to (call id, request id) pairs passed after the rows.
    a, c = AuditEvent._meta.fields, Call._meta.fields
    events = ", ".join(
        f'"{a[n].column_name}"'
        for n in (
            "at",
            "actor_kind",
            "token",
            "actor_name",
            "clinic_id",
            "action",
            "target_type",
            "target_id",
            "details",
            "request_id",
            "address",
        )
    )
    handed = ", ".join(["(%s::uuid, %s::text, %s::text)"] * rows)
    received_by, clinic, received_at = (c[n].column_name for n in ("received_by", "clinic", "received_at"))
    return (
        f'WITH stored AS ({insert}, "{clinic}", "{received_by}", "{received_at}"), '
        f'audited AS (INSERT INTO "audit_event" ({events}) '
        f'SELECT s."{received_at}", \'token\', s."{received_by}", t."name", s."{clinic}", \'call.receive\', \'call\', '
        f's."id"::text, \'{{}}\', h.request_id, h.address FROM stored AS s JOIN "api_token" AS t ON t."id" = s."{received_by}" '  # noqa: E501
        f'LEFT JOIN (VALUES {handed}) AS h(call_id, request_id, address) ON h.call_id = s."id") '
        'SELECT "id" FROM stored'
    )


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
]
