"""The outbox: what the workers must tell someone, written in the transaction of its cause.

A row is a fact to deliver (`topic`: "mail", or an event such as "request.urgent" that a
worker turns into e-mails) with a small JSON payload of ids and words: never patient data,
never an address (a recipient is a staff user's id, "the clinic's on-call address" or "the
operator", resolved when the e-mail is written). The workers' relay (jobs/outbox.py) queues
each due row under a stable job id and its job delivers it once; a row whose job is gone is
queued again. Done rows are deleted `KEEP_DAYS` after (the workers' purge rounds).

`dedup_key`, unique, makes a fact once-only where its cause may repeat (a refused hand-off:
one notice per key per day). `group_key` gathers rows that may still be merged (the urgent
e-mails of one recipient, gathered until one is sent).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import peewee as pw

from models.base import BaseModel
from plumbing.clock import as_utc

STATES = ("pending", "done", "failed")
#: Done and failed rows are kept this long (a week of what was sent, for a question about it).
KEEP_DAYS = 7


class Outbox(BaseModel):
    id = pw.BigAutoField()
    topic = pw.CharField(max_length=40)
    clinic_id = pw.UUIDField(null=True)  # not a foreign key: a row outlives nothing it names
    payload = pw.TextField(default="{}")  # JSON object of ids and words
    dedup_key = pw.CharField(max_length=200, null=True, unique=True)
    group_key = pw.CharField(max_length=120, null=True)
    created_at = pw.DateTimeField()
    due_at = pw.DateTimeField()  # not delivered before
    state = pw.CharField(max_length=8, default="pending")
    attempts = pw.IntegerField(default=0)
    queued_at = pw.DateTimeField(null=True)  # when the relay queued its job; None: not queued
    done_at = pw.DateTimeField(null=True)
    outcome = pw.CharField(max_length=40, null=True)  # a short word: sent, nobody, the last error

    class Meta:
        indexes = ((("state", "due_at"), False), (("group_key", "state"), False))

    @property
    def data(self) -> dict[str, Any]:
        return json.loads(self.payload or "{}")

    @classmethod
    def add(
        cls,
        topic: str,
        payload: dict[str, Any],
        now: datetime,
        *,
        clinic_id: uuid.UUID | None = None,
        due_at: datetime | None = None,
        dedup_key: str | None = None,
        group_key: str | None = None,
    ) -> int | None:
        """Write one row (in the caller's transaction: the cause's); its id, or None when
        `dedup_key` is taken already (the fact was told)."""
        query = cls.insert(
            topic=topic,
            clinic_id=clinic_id,
            payload=json.dumps(payload, sort_keys=True, default=str),
            dedup_key=dedup_key,
            group_key=group_key,
            created_at=as_utc(now),
            due_at=as_utc(due_at or now),
            state="pending",
        )
        if dedup_key is None:
            return int(query.execute())
        rows = query.on_conflict_ignore().execute()
        if not rows:
            return None
        found = cls.select(cls.id).where(cls.dedup_key == dedup_key).scalar()
        return int(found) if found is not None else None

    @classmethod
    def claim_due(cls, now: datetime, limit: int = 100) -> list[int]:
        """Mark up to `limit` due pending rows as queued and return their ids, oldest due
        first. Atomic per row: two relays never claim one row. Not the webhooks: their own
        relay hands each endpoint's to one job at a time (jobs/webhooks.py)."""
        now = as_utc(now)
        due = (
            cls.select(cls.id)
            .where((cls.state == "pending") & cls.queued_at.is_null() & (cls.due_at <= now) & (cls.topic != "webhook"))
            .order_by(cls.due_at, cls.id)
            .limit(limit)
        )
        claimed = cls.update(queued_at=now).where(cls.id.in_(due) & cls.queued_at.is_null()).returning(cls.id)
        return sorted(row.id for row in claimed.execute())

    @classmethod
    def unclaim(cls, ids: list[int]) -> None:
        if ids:
            cls.update(queued_at=None).where(cls.id.in_(ids)).execute()

    @classmethod
    def queued_before(cls, moment: datetime) -> list[int]:
        """Pending rows queued before `moment` (the sweep asks whether their job lives)."""
        query = cls.select(cls.id).where(
            (cls.state == "pending") & cls.queued_at.is_null(False) & (cls.queued_at < as_utc(moment))
        )
        return [row.id for row in query]

    @classmethod
    def later(cls, ids: list[int], due_at: datetime) -> int:
        """Give rows back to the relay, due at `due_at` (their job is gone)."""
        if not ids:
            return 0
        return (
            cls.update(queued_at=None, due_at=as_utc(due_at))
            .where(cls.id.in_(ids) & (cls.state == "pending"))
            .execute()
        )

    @classmethod
    def finish(cls, row_id: int, now: datetime, outcome: str, state: str = "done") -> bool:
        """Mark a pending row delivered (or failed for good); False when it was not pending."""
        return bool(
            cls.update(state=state, done_at=as_utc(now), outcome=outcome[:40])
            .where((cls.id == row_id) & (cls.state == "pending"))
            .execute()
        )

    @classmethod
    def pending_count(cls, topic: str | None = None) -> int:
        query = cls.select().where(cls.state == "pending")
        return query.where(cls.topic == topic).count() if topic else query.count()

    @classmethod
    def purge(cls, now: datetime, keep_days: int = KEEP_DAYS) -> int:
        """Delete the rows done or failed over `keep_days` ago; returns how many."""
        cutoff = as_utc(now) - timedelta(days=keep_days)
        return cls.delete().where((cls.state != "pending") & (cls.done_at < cutoff)).execute()
