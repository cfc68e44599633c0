"""The stored answers of writes sent with an `Idempotency-Key`."""

from __future__ import annotations

import uuid
from datetime import datetime

import peewee as pw

from models.base import BaseModel
from models.tokens import ApiToken
from plumbing.clock import as_utc, utc_now
from plumbing.database import db


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
