"""Stored objects whose rows are gone: queued in the deleting transaction, deleted after.

A row and the object it names cannot be deleted in one transaction (the object is in
another system). Deleting the object first would leave rows naming nothing if the
transaction then rolled back; deleting it after the commit would leave bytes nobody can
find if the process died in between. So the transaction that deletes the rows lists their
objects in `pending_object_deletion`, and `drain` deletes them afterwards, by whoever comes
next: the erasure itself, or the workers' retention round after a crash.
"""

from __future__ import annotations

from collections.abc import Iterable

from models import PendingObjectDeletion
from plumbing.database import db, is_postgresql
from storage import Storage

BATCH = 200


def queue(keys: Iterable[str | None], now_utc: object) -> int:
    """List these objects for deletion; call inside the transaction deleting their rows."""
    rows = [{"key": key, "created_at": now_utc} for key in dict.fromkeys(k for k in keys if k)]
    if rows:
        PendingObjectDeletion.insert_many(rows).execute()
    return len(rows)


def drain(storage: Storage, batch: int = BATCH) -> int:
    """Delete every listed object, then its row; returns how many. Workers draining at once
    take disjoint rows (SKIP LOCKED). A storage error leaves the batch for the next try."""
    deleted = 0
    while True:
        with db.atomic():
            query = PendingObjectDeletion.select().order_by(PendingObjectDeletion.id).limit(batch)
            if is_postgresql():
                query = query.for_update(skip_locked=True)
            rows = list(query)
            for row in rows:
                storage.delete(row.key)
            if rows:
                PendingObjectDeletion.delete().where(PendingObjectDeletion.id.in_([r.id for r in rows])).execute()
                deleted += len(rows)
        if len(rows) < batch:
            return deleted
