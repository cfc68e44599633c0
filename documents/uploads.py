"""Storage limits of the signed-documents flow: the size of one upload, the upload links a
clinic may hold open, and the purge of uploads that were never registered.

Without them storage only grows: every upload link names a fresh object, and an object
uploaded but never registered was kept for ever. The link lifetime is the caller's
(`documents.patient_requests.UPLOAD_URL_SECONDS`), passed in, so that this module needs
nothing from the flow itself.

Presigned URLs are credentials: nothing here sees or logs one; logs carry counts only.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta
from typing import Any

import peewee as pw

from models import MedicalRecord, PatientRequest, UploadLink
from plumbing.clock import as_utc
from plumbing.database import db, is_postgresql
from plumbing.errors import Invalid, TooMany
from storage import Storage

__all__ = ["PURGE_BATCH", "check_open_links", "check_size", "purge_expired_uploads"]

#: Rows (and objects) purged per transaction: the rows stay locked while their objects are
#: deleted, one storage call each, so a batch is kept short.
PURGE_BATCH = 100
# Two-key advisory locks under their own namespace, apart from the one-key locks
# (migrations, first calls) and the call leases' namespace (jobs/leases.py).
_LINKS_LOCK_NAMESPACE = 0x75706C64  # "upld"


def _registered() -> Any:  # a peewee expression (its stubs lack `~`)
    """True for an issued upload registered as an attachment (correlated EXISTS)."""
    return pw.fn.EXISTS(MedicalRecord.select(pw.SQL("1")).where(MedicalRecord.file_hash == UploadLink.file_hash))


# --- the size of one upload ----------------------------------------------------------------


def check_size(storage: Storage, size: int, *keys: str) -> None:
    """400 VALIDATION_FAILED naming the limit when an upload of `size` bytes is over
    `storage.max_upload_bytes`, after deleting the objects `keys` (the upload, its copy).

    The S3 backend cannot refuse a large PUT (a presigned PUT limits the size only when its
    exact length is signed), so registration is where the cap holds there; the local backend
    refused the PUT already, unless the cap was lowered since. Deleting the object frees the
    space at once; the link, while it lasts, can take a smaller file."""
    limit = storage.max_upload_bytes
    if size <= limit:
        return
    for key in keys:
        storage.delete(key)
    raise Invalid(
        f"fileHash: the uploaded file has {size} bytes; at most {limit} bytes "
        f"({limit / 2**20:g} MiB) are accepted. Upload a smaller file.",
        param="/fileHash",
    )


# --- open upload links per clinic ------------------------------------------------------------


def check_open_links(clinic_id: uuid.UUID, limit: int, lifetime: int, now: datetime) -> None:
    """Inside the transaction that issues a link: 429 TOO_MANY_UPLOAD_LINKS with Retry-After
    (seconds until the oldest open link expires) when the clinic already holds `limit` links
    issued within `lifetime` seconds and not registered.

    On PostgreSQL the clinic's links are counted under a transaction advisory lock, held
    until the issuing transaction ends, so two calls at once cannot both take the last slot."""
    if is_postgresql():
        key = int.from_bytes(uuid.UUID(str(clinic_id)).bytes[:4], "big", signed=True)  # uuid4s are random
        db.execute_sql("SELECT pg_advisory_xact_lock(%s, %s)", (_LINKS_LOCK_NAMESPACE, key))
    now = as_utc(now)
    count, oldest = (
        UploadLink.select(pw.fn.COUNT(UploadLink.id), pw.fn.MIN(UploadLink.created_at))
        .join(PatientRequest)
        .where(
            (PatientRequest.clinic == clinic_id)
            & (UploadLink.created_at > now - timedelta(seconds=lifetime))
            & ~_registered()
        )
        .scalar(as_tuple=True)
    )
    if count < limit:
        return
    retry_after = max(1, math.ceil((oldest + timedelta(seconds=lifetime) - now).total_seconds()))
    raise TooMany(
        f"The clinic holds {count} open upload links (at most {limit}: issued within "
        f"{lifetime} seconds and not registered). Upload and register with the links "
        "already issued, or try again after Retry-After seconds.",
        code="TOO_MANY_UPLOAD_LINKS",
        retry_after=retry_after,
    )


# --- purging what was never registered --------------------------------------------------------


def purge_expired_uploads(
    storage: Storage, now: datetime, *, lifetime: int, grace: int, batch: int = PURGE_BATCH
) -> int:
    """Delete every upload whose link expired over `grace` seconds ago without being
    registered: its stored object (a missing one is no error) and its `UploadLink` row,
    so a later registration of that fileHash answers 400 ("not issued by an upload link").
    Returns how many were purged. Needs a database connection (the caller's).

    In batches of `batch`, one transaction each. On PostgreSQL the batch's rows are taken
    with FOR UPDATE SKIP LOCKED, so purges running at once (every worker runs one) take
    disjoint rows and delete each object once. A storage error rolls the batch back: its
    rows stay for the next run, and deleting an object again is harmless. Registered
    uploads keep their rows: registering the same fileHash again answers the first
    registration, however late."""
    cutoff = as_utc(now) - timedelta(seconds=lifetime + grace)
    purged = 0
    while True:
        with db.atomic():
            query = (
                UploadLink.select(UploadLink.id, UploadLink.file_hash)
                .where((UploadLink.created_at < cutoff) & ~_registered())
                .order_by(UploadLink.created_at)
                .limit(batch)
            )
            if is_postgresql():
                query = query.for_update(skip_locked=True)
            rows = list(query)
            for row in rows:
                storage.delete(row.file_hash)
            if rows:
                # Checked again: a registration committed since the select (it sealed a copy
                # before the upload went) keeps its row, so its retry still finds it.
                purged += (
                    UploadLink.delete().where(UploadLink.id.in_([row.id for row in rows]) & ~_registered()).execute()
                )
        if len(rows) < batch:
            return purged
