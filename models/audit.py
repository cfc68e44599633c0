"""The append-only audit trail: who wrote what, when, from where."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import NoReturn

import peewee as pw

from models.base import BaseModel
from models.clinics import Clinic
from models.staff import StaffUser
from models.tokens import ApiToken
from plumbing.clock import as_utc, utc_now
from plumbing.database import db, is_postgresql
from plumbing.logs import client_address as current_client_address
from plumbing.logs import request_id as current_request_id


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
    existing row raise `AppendOnly`), and on PostgreSQL a trigger refuses DELETE and every
    UPDATE from any client (migrations `audit_trail`, `data_lifecycle`) but one: the
    retention's `forget_addresses`, which removes an old event's client address and marks it
    `redacted_at`, leaving what happened, to what and by whom. TRUNCATE stays possible: the
    tests empty every table between cases.
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
    # When the retention removed the client address (None: not yet).
    redacted_at = pw.DateTimeField(null=True)

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
        *,
        at: datetime,
    ) -> None:
        """Append the event of a write made `at` (the writer's clock); call it inside that
        write's transaction."""
        if not db.in_transaction():
            # Outside the write's transaction the event could outlive a rolled-back write,
            # or be missing from a committed one.
            raise RuntimeError("AuditEvent.record belongs inside the transaction of the write it records")
        who, origin = Actor.of(actor), Origin.current()
        if isinstance(target, pw.Model):
            target = (target._meta.table_name, target.get_id())
        cls.insert(
            at=as_utc(at),
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
    def forget_addresses(cls, clinic_id: uuid.UUID | None, before: datetime, now: datetime, batch: int) -> int:
        """Remove the client address of up to `batch` events of the clinic (None: of no
        clinic) written before `before`; returns how many. The one UPDATE the trail allows
        (the PostgreSQL trigger checks nothing else changes)."""
        owner = cls.clinic_id.is_null() if clinic_id is None else (cls.clinic_id == clinic_id)
        due = (
            cls.select(cls.id)
            .where(owner & (cls.at < as_utc(before)) & cls.address.is_null(False))
            .order_by(cls.at)
            .limit(batch)
        )
        return super().update(address=None, redacted_at=as_utc(now)).where(cls.id.in_(due)).execute()

    @classmethod
    def forget_clinic(cls, clinic_id: uuid.UUID, token_ids: list[uuid.UUID]) -> int:
        """Delete the clinic's events (and any of the keys that served only it) when the clinic
        is offboarded (privacy/offboarding.py): the one DELETE the trail allows, inside the
        offboarding's transaction (on PostgreSQL the trigger lets it through only there)."""
        if is_postgresql():
            db.execute_sql("SET LOCAL clinic_service.offboarding = 'on'")
        owned = cls.clinic_id == clinic_id
        if token_ids:
            owned |= cls.token.in_(token_ids)
        gone = super().delete().where(owned).execute()
        if is_postgresql():
            db.execute_sql("SET LOCAL clinic_service.offboarding = 'off'")
        return gone

    @classmethod
    def trail(
        cls,
        clinic_id: uuid.UUID | None = None,
        since: datetime | None = None,
        limit: int = 100,
        action: str | None = None,
    ) -> list[AuditEvent]:
        """Newest first (insertion order breaks ties of one timestamp)."""
        query = cls.select()
        if clinic_id is not None:
            query = query.where(cls.clinic_id == clinic_id)
        if action is not None:
            query = query.where(cls.action == action)
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


@dataclass(frozen=True)
class Reader:
    """Who read a patient's data: a staff user in the console (`staff`) or an API key
    (`token`), by id, with the name they had then (a staff user's e-mail, a key's service
    account): the read trail outlives both."""

    kind: str
    id: uuid.UUID
    name: str

    @classmethod
    def of(cls, who: StaffUser | ApiToken) -> Reader:
        if isinstance(who, StaffUser):
            return cls("staff", who.id, who.email)
        return cls("token", who.id, who.name)


_READ_ROW = "(%s::timestamp, %s::uuid, %s, %s::uuid, %s, %s, %s::uuid, %s::uuid, %s, %s)"
_READ_INSERT = (
    'INSERT INTO "read_event" ("at", "clinic_id", "reader_kind", "reader_id", "reader_name", "kind", '
    '"patient_id", "patient_request_id", "request_id", "address") '
    "SELECT v.* FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed, (VALUES {values}) AS v"
)


class ReadEvent(BaseModel):
    """One read of a patient's data in the append-only read trail: when (the reader's
    clock), who (a staff user or an API key, `Reader`), in which clinic, what kind of read
    (`KINDS`), of which patient and which request, from where.

    A read is one INSERT (`record`, however many patients a search listed), committed before
    the answer leaves: a process stopped after answering has its read recorded already.
    Append-only: nothing here changes a row, and on PostgreSQL a trigger refuses UPDATE;
    DELETE is the retention's and the clinic's offboarding's only (`expire`).
    """

    # What was read: a request's detail or page (its transcript, notes, numbers and its
    # documents' links with it); its recording played; a signed document opened from the
    # console; a patient's page; a patient's copy made; a search's results (one row per
    # patient or request listed).
    KINDS = ("request", "recording", "document", "patient", "copy", "request_search", "patient_search")
    READER_KINDS = ("staff", "token")

    id = pw.BigAutoField()
    at = pw.DateTimeField()  # UTC, the reader's clock
    # Not foreign keys: the trail outlives the clinic's rows it names (erasure, retention).
    clinic_id = pw.UUIDField()
    reader_kind = pw.CharField(max_length=8)
    reader_id = pw.UUIDField()  # the staff user's or the key's id
    reader_name = pw.CharField(max_length=254)  # the staff user's e-mail, the key's name, then
    kind = pw.CharField(max_length=16)
    patient_id = pw.UUIDField(null=True)
    patient_request_id = pw.UUIDField(null=True)
    request_id = pw.CharField(max_length=128, null=True)  # the X-Request-Id of the access log line
    address = pw.CharField(max_length=64, null=True)  # the client's, as the web process saw it

    class Meta:
        table_name = "read_event"
        indexes = (
            (("clinic_id", "at"), False),  # the retention, a clinic's trail
            (("reader_id", "at"), False),  # the breach question: what X read between two times
            (("patient_id", "at"), False),  # the patient's page: who read this
        )

    @classmethod
    def record(
        cls,
        reader: Reader,
        clinic_id: uuid.UUID,
        kind: str,
        reads: list[tuple[uuid.UUID | None, uuid.UUID | None]],
        *,
        at: datetime,
    ) -> int:
        """Append one row per (patient id, request id) read, in one INSERT; returns how many."""
        if not reads:
            return 0
        origin = Origin.current()
        rows = [
            {
                "at": as_utc(at),
                "clinic_id": clinic_id,
                "reader_kind": reader.kind,
                "reader_id": reader.id,
                "reader_name": reader.name,
                "kind": kind,
                "patient_id": patient_id,
                "patient_request_id": request_id,
                "request_id": origin.request_id,
                "address": origin.address,
            }
            for patient_id, request_id in reads
        ]
        if is_postgresql() and not db.in_transaction():
            # One statement, committed on its own before the answer leaves (a stopped process
            # loses nothing), whose commit does not wait for the WAL's flush to disk: that wait
            # was most of a read's added time (bench/read_trail_bench.py). Only a crash of the
            # database server itself could lose the last fraction of a second of reads.
            values = ", ".join([_READ_ROW] * len(rows))
            params = [
                (
                    r["at"],
                    str(r["clinic_id"]),
                    r["reader_kind"],
                    str(r["reader_id"]),
                    r["reader_name"],
                    r["kind"],
                    str(r["patient_id"]) if r["patient_id"] else None,
                    str(r["patient_request_id"]) if r["patient_request_id"] else None,
                    r["request_id"],
                    r["address"],
                )
                for r in rows
            ]
            db.execute_sql(_READ_INSERT.format(values=values), [v for row in params for v in row])
        else:
            cls.insert_many(rows).execute()
        return len(rows)

    @classmethod
    def forget_clinic(cls, clinic_id: uuid.UUID) -> int:
        """Delete the clinic's whole read trail (the clinic offboarded)."""
        return super().delete().where(cls.clinic_id == clinic_id).execute()

    @classmethod
    def expire(cls, clinic_id: uuid.UUID, before: datetime, batch: int) -> int:
        """Delete up to `batch` of the clinic's rows older than `before`; returns how many."""
        due = cls.select(cls.id).where((cls.clinic_id == clinic_id) & (cls.at < as_utc(before))).limit(batch)
        return super().delete().where(cls.id.in_(due)).execute()

    @classmethod
    def update(cls, *args: object, **kwargs: object) -> NoReturn:
        raise AppendOnly("read events are never changed")

    @classmethod
    def delete(cls) -> NoReturn:
        raise AppendOnly("read events are deleted only by their retention (ReadEvent.expire)")

    def delete_instance(self, *args: object, **kwargs: object) -> NoReturn:
        raise AppendOnly("read events are deleted only by their retention (ReadEvent.expire)")

    def save(self, force_insert: bool = False, only: object = None) -> int | bool:
        if self.id is not None and not force_insert:
            raise AppendOnly("read events are never changed")
        return super().save(force_insert=force_insert, only=only)
