"""A request's signed documents (the signed-documents flow, steps 6 and 7): an upload link
hands out a fresh object key (`fileHash`) per call and remembers it for the request, so
that registration accepts only keys issued for the same request and already uploaded;
the registered bytes are sealed where no upload URL reaches.

Presigned URLs are credentials: nothing here logs them. A write the API answers takes
`then`, called inside the write's transaction (patient_requests/changes.py says why).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from documents import file_types, uploads
from models import ApiToken, AuditEvent, ChangeEvent, MedicalRecord, PatientRequest, UploadLink
from plumbing.clock import as_utc
from plumbing.database import db, release_connection
from plumbing.errors import Invalid
from storage import ObjectNotFound, Storage, new_object_key, sealed_key

T = TypeVar("T")

UPLOAD_URL_SECONDS = 600  # spec: valid 10 minutes (module-level so tests can shorten it)


def issue_upload_link(
    storage: Storage,
    request: PatientRequest,
    content_type: str,
    token: ApiToken,
    now: datetime,
    *,
    open_links_limit: int,
    then: Callable[[str], object],
) -> tuple[str, str]:
    """A fresh key and its presigned PUT, (url, key); 429 TOO_MANY_UPLOAD_LINKS while the
    clinic holds `open_links_limit` links that are neither expired nor registered
    (`uploads.check_open_links`).

    `then` is given the key without the URL: a presigned URL is a credential, never
    stored, and a replayed one could have expired (`upload_link_again` presigns anew)."""
    content_type = content_type.strip()
    key = new_object_key(request.id, content_type)
    with db.atomic():  # counted and issued in one transaction, under the clinic's lock
        uploads.check_open_links(request.clinic_id, open_links_limit, UPLOAD_URL_SECONDS, now)
        UploadLink.create(request=request, file_hash=key, content_type=content_type, created_at=as_utc(now))
        AuditEvent.record(
            token,
            request.clinic_id,
            "attachment.upload_link",
            request,
            {"fileHash": key, "contentType": content_type},
            at=now,
        )
        then(key)
    return storage.presign_put(key, content_type, UPLOAD_URL_SECONDS), key


def upload_link_again(storage: Storage, request: PatientRequest, file_hash: str) -> str:
    """A fresh presigned PUT for a key issued before (a retry with the same
    Idempotency-Key), valid the full ten minutes."""
    link = UploadLink.get((UploadLink.request == request) & (UploadLink.file_hash == file_hash))
    return storage.presign_put(file_hash, link.content_type, UPLOAD_URL_SECONDS)


def register_attachment(
    storage: Storage,
    request: PatientRequest,
    body: dict[str, Any],
    token: ApiToken,
    now: datetime,
    then: Callable[[MedicalRecord], T],
) -> T:
    """Register an uploaded object. Registering the same fileHash again answers the
    attachment registered first (so a retry after a timeout never duplicates).

    The registered bytes are evidence: they are copied to a key no upload URL names
    (`storage.seal`), so the upload URL, valid for minutes more, cannot change them, and
    the record keeps their SHA-256. The type check reads that copy; the upload itself is
    deleted once registered."""
    link = UploadLink.get_or_none((UploadLink.request == request) & (UploadLink.file_hash == body["fileHash"]))
    if link is None:
        raise Invalid("fileHash: not issued by an upload link of this request", param="/fileHash")
    registered = MedicalRecord.get_or_none(MedicalRecord.file_hash == link.file_hash)
    if registered is not None:
        with db.atomic():
            return then(registered)
    # Over the size cap: refused before the copy (S3 lets any size through its PUT), and the
    # copy checked again, as the reusable upload URL may have replaced the object meanwhile.
    uploaded = storage.head(link.file_hash)
    if uploaded is not None:
        uploads.check_size(storage, uploaded.size, link.file_hash)
    target = sealed_key(link.file_hash)
    # The copy and the read-back are storage round trips (S3: the network, the bytes read
    # back to hash them): no pooled connection is held through them. Not in a transaction.
    release_connection()
    try:
        sealed = storage.seal(link.file_hash, target)
    except ObjectNotFound:
        raise Invalid("fileHash: no file was uploaded for it", param="/fileHash") from None
    uploads.check_size(storage, sealed.size, link.file_hash, target)
    if not file_types.matches(body["contentType"], storage.read_prefix(target, file_types.PREFIX_BYTES)):
        storage.delete(target)
        raise Invalid(f"contentType: the uploaded file is not {body['contentType']}", param="/contentType")
    with db.atomic():
        MedicalRecord.insert(
            id=(ours := uuid.uuid4()),
            request=request,
            file_hash=link.file_hash,
            object_key=target,
            sha256=sealed.sha256,
            content_type=body["contentType"],
            description=body["description"],
            category_type=body.get("categoryType"),
            visible_to_patient=body.get("visibleToPatient", False),
            created_by=token,
            created_at=as_utc(now),
        ).on_conflict_ignore().execute()
        record = MedicalRecord.get(MedicalRecord.file_hash == link.file_hash)
        if record.id == ours:  # not when a concurrent registration of the same upload won
            # Not the description: a file name may carry a patient's name.
            AuditEvent.record(
                token,
                request.clinic_id,
                "attachment.register",
                record,
                {"patientRequestId": str(request.id), "contentType": record.content_type, "sha256": record.sha256},
                at=now,
            )
            ChangeEvent.record(
                request.clinic_id,
                "attachment.added",
                {"requestId": str(request.id), "patientId": str(request.patient_id), "attachmentId": str(record.id)},
                now,
            )
        answer = then(record)
    release_connection()
    storage.delete(target if record.object_key != target else link.file_hash)  # a concurrent registration won
    return answer
