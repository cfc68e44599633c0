"""Objects in storage waiting to be deleted: the outbox of erasures and retention."""

from __future__ import annotations

import peewee as pw

from models.base import BaseModel
from plumbing.clock import utc_now


class PendingObjectDeletion(BaseModel):
    """A stored object whose rows are gone and whose bytes must go too.

    Written in the transaction that deletes the rows naming the object (an erasure, the
    retention), so that a crash between that commit and the storage call leaves a row
    here instead of bytes nobody can find: the workers' retention round deletes every
    object listed, then the row (`privacy.object_deletion.drain`). Deleting an object twice is
    harmless (both backends answer a missing object as deleted)."""

    id = pw.BigAutoField()
    key = pw.CharField(max_length=512)  # the storage key; no personal data (a random name)
    created_at = pw.DateTimeField(default=utc_now)
