"""What changed, for integrators: the event log and the clinics' webhook endpoints.

A `ChangeEvent` is written in the transaction of the change it describes (`record`): a
change that rolls back leaves no event, one that commits leaves exactly one. It carries a
stable id (the Standard Webhooks `webhook-id` of every delivery of it, and the id the
event log pages by), its type, its clinic, its time and the ids it concerns: never patient
data (a receiver fetches what it needs with its API key). `seq` orders the log.

A clinic's `WebhookEndpoint` wants some of the types (none named: all of them). For each
endpoint that wants an event, `record` writes an outbox row (`topic` "webhook", its
`group_key` the endpoint's: jobs/webhooks.py delivers an endpoint's rows one at a time) in
the same transaction. The signing secret is stored encrypted (SECRET_KEY's key ring),
never in clear; while a rotation's overlap lasts the previous one signs too.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import peewee as pw

from models.base import BaseModel, place_changes
from models.clinics import Clinic
from models.outbox import Outbox
from plumbing.clock import as_utc, iso_utc

#: The event types, each with what it tells (docs/integrators/webhooks.md).
TYPES = (
    "request.created",
    "request.updated",
    "attachment.added",
    "recording.unavailable",
    "patient.erased",
)
#: The log keeps an event this long (the events API's promise).
KEEP_DAYS = 30
TOPIC = "webhook"
#: The advisory lock of the one placer (`ChangeEvent.place`).
PLACE_LOCK = 7_341_052


def group_key(endpoint_id: uuid.UUID | str) -> str:
    return f"webhook:{endpoint_id}"


class ChangeEvent(BaseModel):
    seq = pw.BigAutoField()
    # The event's place in the log, given after its transaction committed (`place`: one
    # placer at a time, in commit order as it finds them): a reader pages by it, and an event
    # committed late is placed after what a reader has already passed, never before it.
    position = pw.BigIntegerField(null=True, unique=True)
    id = pw.UUIDField(unique=True, default=uuid.uuid4)
    clinic_id = pw.UUIDField()  # not a foreign key: the log outlives nothing it names
    type = pw.CharField(max_length=40)
    occurred_at = pw.DateTimeField()
    data = pw.TextField(default="{}")  # JSON object: ids and the names of what changed

    class Meta:
        table_name = "change_event"
        indexes = ((("clinic_id", "position"), False), (("occurred_at",), False))

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.data or "{}")

    def shape(self, clinic_slug: str | None) -> dict[str, Any]:
        """The event as the events API answers it and a webhook's body carries it."""
        return {
            "id": str(self.id),
            "type": self.type,
            "occurredAt": iso_utc(self.occurred_at),
            "clinicSlug": clinic_slug,
            "data": self.payload,
        }

    @classmethod
    def record(cls, clinic_id: uuid.UUID | str, type: str, data: dict[str, Any], now: datetime) -> uuid.UUID:
        """Write the event and one outbox row per endpoint of the clinic that wants it, in
        the caller's transaction (the change's); the event's id."""
        if type not in TYPES:
            raise ValueError(f"unknown event type {type!r}")
        data = {"patientId": None, **data}  # every event names its patient (None: no patient concerned)
        clinic = clinic_id if isinstance(clinic_id, uuid.UUID) else uuid.UUID(str(clinic_id))
        event_id = uuid.uuid4()
        cls.insert(
            id=event_id,
            clinic_id=clinic,
            type=type,
            occurred_at=as_utc(now),
            data=json.dumps(data, sort_keys=True, default=str),
        ).execute()
        for endpoint in WebhookEndpoint.wanting(clinic, type):
            Outbox.add(
                TOPIC,
                {"event": str(event_id), "endpoint": str(endpoint.id)},
                now,
                clinic_id=clinic,
                group_key=group_key(endpoint.id),
            )
        return event_id

    @classmethod
    def place(cls, limit: int = 1000) -> int:
        """Give the committed events without a place theirs, in the order they were written,
        after every place given (models/base.py `place_changes`: one placer at a time, so
        places become visible in increasing order); how many."""
        return place_changes(cls, PLACE_LOCK, limit, column="position", order="seq")

    @classmethod
    def page(
        cls, clinic_id: uuid.UUID, after: int | None, limit: int, types: list[str] | None = None
    ) -> tuple[list[ChangeEvent], bool]:
        """Up to `limit` of the clinic's placed events after the place `after`, in the log's
        order, and whether more follow. Places are given in increasing order and never
        before one already visible, so paging skips and repeats nothing however the
        writes interleave."""
        query = cls.select().where((cls.clinic_id == clinic_id) & cls.position.is_null(False))
        if after is not None:
            query = query.where(cls.position > after)
        if types:
            query = query.where(cls.type.in_(types))
        rows = list(query.order_by(cls.position).limit(limit + 1))
        return rows[:limit], len(rows) > limit

    @classmethod
    def purge(cls, now: datetime, keep_days: int = KEEP_DAYS) -> int:
        return cls.delete().where(cls.occurred_at < as_utc(now) - timedelta(days=keep_days)).execute()


class WebhookEndpoint(BaseModel):
    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    clinic = pw.ForeignKeyField(Clinic, backref="webhook_endpoints", on_delete="CASCADE")
    url = pw.CharField(max_length=500)
    # JSON array of the event types it wants; empty: every type.
    event_types = pw.TextField(default="[]")
    description = pw.CharField(max_length=200, default="")
    secret_encrypted = pw.TextField()
    # The secret a rotation replaced, still signing beside the new one until `previous_until`.
    previous_secret_encrypted = pw.TextField(null=True)
    previous_until = pw.DateTimeField(null=True)
    created_at = pw.DateTimeField()
    disabled_at = pw.DateTimeField(null=True)
    disabled_reason = pw.CharField(max_length=40, null=True)  # gone (410), failing, by_admin
    # Deliveries failing in a row; while they do, the endpoint is tried once per backoff step
    # (`paused_until`), not once per event.
    failures = pw.IntegerField(default=0)
    failing_since = pw.DateTimeField(null=True)
    paused_until = pw.DateTimeField(null=True)

    class Meta:
        table_name = "webhook_endpoint"

    clinic_id: uuid.UUID

    @property
    def types(self) -> list[str]:
        return list(json.loads(self.event_types or "[]"))

    def wants(self, type: str) -> bool:
        return not self.types or type in self.types

    @classmethod
    def wanting(cls, clinic_id: uuid.UUID, type: str) -> list[WebhookEndpoint]:
        endpoints = cls.select().where((cls.clinic == clinic_id) & cls.disabled_at.is_null())
        return [e for e in endpoints if e.wants(type)]

    def secrets_at(self, now: datetime) -> list[str]:
        """The encrypted secrets that sign at `now`: the current one, and the previous one
        during a rotation's overlap."""
        secrets = [self.secret_encrypted]
        if self.previous_secret_encrypted and self.previous_until and as_utc(self.previous_until) > as_utc(now):
            secrets.append(self.previous_secret_encrypted)
        return secrets
