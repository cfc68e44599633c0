"""Patient requests and their attachments (signed-documents flow, steps 3-7).

Create applies the type's default patient tags best effort; upload links hand out a
fresh object key (`fileHash`) per call and remember it for the request, so that
registration accepts only keys issued for the same request and already uploaded.
Presigned download links come from `storage.links.LinkCache`, cached per (attachment,
disposition).

Presigned URLs are credentials: nothing here logs them.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from documents import Remember, file_types, forget, uploads
from documents.patients import patient_for_create, tag_json
from models import (
    Actor,
    ApiToken,
    AuditEvent,
    Calendar,
    Call,
    Clinic,
    MedicalRecord,
    PatientRecord,
    PatientRecordTag,
    PatientRequest,
    PatientRequestTag,
    RequestType,
    RequestTypeDefaultTag,
    Reservation,
    Tag,
    UploadLink,
)
from models.requests import spans_of, words_at
from plumbing.clock import as_utc, iso_utc, utc_now
from plumbing.database import db, release_connection
from plumbing.errors import Invalid, NotFound
from plumbing.keyset import Keyset
from storage import ObjectNotFound, Storage, new_object_key, sealed_key
from storage.links import LinkCache

log = logging.getLogger(__name__)

UPLOAD_URL_SECONDS = 600  # spec: valid 10 minutes (module-level so tests can shorten it)
MAX_ATTACHMENTS = 1000
DEFAULT_LIMIT = 50


def request_type_json(t: RequestType) -> dict[str, Any]:
    return {
        "id": str(t.id),
        "ecrfId": t.ecrf_id,
        "name": t.name,
        "description": t.description,
        "requiresReservation": t.requires_reservation,
        "requiresPayment": t.requires_payment,
        "requiresSignature": t.requires_signature,
        "reservationLength": t.reservation_length,
        "remindDaysBefore": t.remind_days_before,
    }


def active_types(clinic: Clinic) -> list[dict[str, Any]]:
    query = RequestType.select().where((RequestType.clinic == clinic) & RequestType.active).order_by(RequestType.name)
    return [request_type_json(t) for t in query]


def clinic_tags(clinic: Clinic, tag_type: str | None) -> list[dict[str, Any]]:
    query = Tag.select().where((Tag.clinic == clinic) & Tag.deleted_at.is_null())
    if tag_type is not None:
        query = query.where(Tag.type == tag_type)
    return [tag_json(t) for t in query.order_by(Tag.type, Tag.name)]


def request_of(clinic: Clinic, request_id: str) -> PatientRequest:
    """This clinic's request, else 404 PATIENT_REQUEST_NOT_FOUND (also for malformed ids)."""
    try:
        rid = uuid.UUID(request_id)
    except ValueError:
        rid = None
    request = (
        PatientRequest.get_or_none((PatientRequest.id == rid) & (PatientRequest.clinic == clinic)) if rid else None
    )
    if request is None:
        raise NotFound("No such patient request in this clinic.", code="PATIENT_REQUEST_NOT_FOUND")
    return request


# --- create ----------------------------------------------------------------------------


def create_request(
    clinic: Clinic, body: dict[str, Any], token: ApiToken, remember: Remember = forget
) -> dict[str, Any]:
    """The new request as create answers it. The answer is read inside the transaction
    that writes the request: once it commits nothing is left to fail, so a committed create
    never answers 5xx and invites the retry that would duplicate it."""
    patient, record = patient_for_create(clinic, body["patientId"])
    request_type = RequestType.get_or_none(
        (RequestType.id == uuid.UUID(body["userECRFId"])) & (RequestType.clinic == clinic) & RequestType.active
    )
    if request_type is None:
        raise NotFound("Unknown or inactive request type.", code="USER_ECRF_NOT_FOUND")
    slot = _time_slot(clinic, body.get("timeSlotInput"))
    with db.atomic():
        request = PatientRequest.create(
            clinic=clinic,
            patient=patient,
            request_type=request_type,
            title=request_type.name,
            clinic_note=body.get("userNote", ""),
            created_by=token,
            done_at=utc_now() if slot else None,
        )
        if slot:
            Reservation.create(request=request, calendar=slot[0], starts_at=slot[1], ends_at=slot[2])
        apply_default_tags(request_type, record)
        AuditEvent.record(
            token,
            clinic,
            "patient_request.create",
            request,
            {"patientId": str(patient.id), "requestTypeId": str(request_type.id)},
        )
        answer = summaries([request])[0]
        remember(answer)
        return answer


def _time_slot(clinic: Clinic, slot: dict[str, Any] | None) -> tuple[Calendar, datetime, datetime] | None:
    if slot is None:
        return None
    calendar = Calendar.get_or_none((Calendar.id == uuid.UUID(slot["calendarId"])) & (Calendar.clinic == clinic))
    if calendar is None:
        raise Invalid("timeSlotInput.calendarId: not a calendar of this clinic")
    start, end = (as_utc(datetime.fromisoformat(slot[k].replace("Z", "+00:00"))) for k in ("start", "end"))
    if end <= start:
        raise Invalid("timeSlotInput.end: must be after start")
    return calendar, start, end


def apply_default_tags(request_type: RequestType, record: PatientRecord) -> None:
    """Best effort: deleted tags are skipped silently; any other failure is logged and
    rolled back to a savepoint, so it can never fail (or abort) the create."""
    tags = Tag.select().join(RequestTypeDefaultTag).where(RequestTypeDefaultTag.request_type == request_type)
    for tag in tags:
        if tag.deleted_at is not None:
            continue
        try:
            with db.atomic():
                if tag.clinic_id != record.clinic_id or tag.type != "patient":
                    raise ValueError("not a patient tag of the record's clinic")
                PatientRecordTag.insert(record=record, tag=tag).on_conflict_ignore().execute()
        except Exception:
            log.warning(
                "default tag %s of request type %s not applied to patient record %s",
                tag.id,
                request_type.id,
                record.id,
                exc_info=True,
            )


# --- search, detail, patch -------------------------------------------------------------------

# Newest first; a cursor is the opaque (createdAt, id) of the last row shown.
REQUEST_ORDER = Keyset(PatientRequest.created_at, PatientRequest.id, descending=True)


def search_requests(
    clinic: Clinic, flt: dict[str, Any], pagination: dict[str, Any]
) -> tuple[list[dict[str, Any]], str | None]:
    """Newest first, keyset-paginated on (createdAt, id); the filters only narrow the
    rows, so a cursor stays a position in the same order."""
    # JSON Schema counts 9.0 as an integer (found by the fuzzer: a float slice index was a 500).
    limit = int(pagination.get("limit", DEFAULT_LIMIT))
    query = PatientRequest.select().where(PatientRequest.clinic == clinic)
    if "patientId" in flt:
        query = query.where(PatientRequest.patient == uuid.UUID(flt["patientId"]))
    if "kind" in flt:
        query = query.where(PatientRequest.kind == flt["kind"])
    rows, next_cursor = REQUEST_ORDER.page(query, pagination.get("cursor"), limit)
    return summaries(rows), next_cursor


def summaries(requests: list[PatientRequest]) -> list[dict[str, Any]]:
    """Requests as create and search answer them (`medicalRecords` always empty)."""
    ids = [r.id for r in requests]
    tags: dict[uuid.UUID, list[dict[str, Any]]] = {}
    reservations: dict[uuid.UUID, list[dict[str, Any]]] = {}
    if ids:
        rows = (
            PatientRequestTag.select(PatientRequestTag.request, Tag)
            .join(Tag)
            .where(PatientRequestTag.request.in_(ids) & Tag.deleted_at.is_null())
            .order_by(Tag.name)
        )
        for row in rows:
            tags.setdefault(row.request_id, []).append(tag_json(row.tag))
        for res in Reservation.select().where(Reservation.request.in_(ids)).order_by(Reservation.starts_at):
            reservations.setdefault(res.request_id, []).append(
                {
                    "id": str(res.id),
                    "start": iso_utc(res.starts_at),
                    "end": iso_utc(res.ends_at),
                    "calendarId": str(res.calendar_id) if res.calendar_id else None,
                }
            )
    transcripts: dict[uuid.UUID, str] = {}
    read = [r.call_id for r in requests if r.call_id and r.suggested_type_spans is not None]
    if read:
        transcripts = {c.id: c.transcript or "" for c in Call.select(Call.id, Call.transcript).where(Call.id.in_(read))}
    return [
        {
            "id": str(r.id),
            "kind": r.kind,
            "title": r.title,
            "createdAt": iso_utc(r.created_at),
            "doneAt": iso_utc(r.done_at),
            "patientId": str(r.patient_id),
            "requestTypeId": str(r.request_type_id) if r.request_type_id else None,
            "userNote": r.user_note,
            "tags": tags.get(r.id, []),
            "medicalRecords": [],
            "reservations": reservations.get(r.id, []),
            **triage_json(r, transcripts.get(r.call_id) if r.call_id else None),
        }
        for r in requests
    ]


def triage_json(r: PatientRequest, transcript: str | None) -> dict[str, Any]:
    """What the request's voice message suggests (its type, whether it may be urgent), with
    the transcript's words that led to it; both null for a request never read."""
    if r.suggested_type_spans is None or transcript is None:
        return {"requestTypeSuggestion": None, "urgent": None}

    return {
        "requestTypeSuggestion": {
            "requestTypeId": str(r.suggested_type_id) if r.suggested_type_id else None,
            "words": words_at(transcript, spans_of(r.suggested_type_spans)),
            "confirmedAt": iso_utc(r.type_confirmed_at),
        },
        "urgent": {
            "flagged": r.urgent,
            "words": words_at(transcript, spans_of(r.urgent_spans)),
            "clearedAt": iso_utc(r.urgent_cleared_at),
        },
    }


def detail(request: PatientRequest, links: LinkCache) -> dict[str, Any]:
    records = list(
        MedicalRecord.select()
        .where(MedicalRecord.request == request)
        .order_by(MedicalRecord.created_at, MedicalRecord.id)
        .limit(MAX_ATTACHMENTS + 1)
    )
    if len(records) > MAX_ATTACHMENTS:
        raise Invalid(f"the request holds more than {MAX_ATTACHMENTS} attachments")
    out = summaries([request])[0]
    out["medicalRecords"] = [
        {
            **attachment_json(m),
            "categoryType": m.category_type,
            "visibleToPatient": m.visible_to_patient,
            "url": links.url(m, "inline"),
            "downloadUrl": links.url(m, "attachment"),
        }
        for m in records
    ]
    return out


def patch_request(
    clinic: Clinic, request: PatientRequest, body: dict[str, Any], token: ApiToken | Actor, remember: Remember = forget
) -> dict[str, Any]:
    """Apply a PATCH; the request as PATCH answers it, read inside the write's transaction."""
    wanted = {uuid.UUID(i) for i in body.get("addTagIds", [])}
    tags = (
        list(
            Tag.select(Tag.id).where(
                Tag.id.in_(list(wanted))
                & (Tag.clinic == clinic)
                & (Tag.type == "patient_request")
                & Tag.deleted_at.is_null()
            )
        )
        if wanted
        else []
    )
    unknown = wanted - {t.id for t in tags}
    if unknown:
        raise Invalid(f"addTagIds: not request tags of this clinic: {', '.join(sorted(map(str, unknown)))}")
    with db.atomic():
        for tag in tags:
            PatientRequestTag.insert(request=request, tag=tag).on_conflict_ignore().execute()
        if "userNote" in body:
            PatientRequest.update(user_note=body["userNote"]).where(PatientRequest.id == request.id).execute()
        if body.get("done") is True:  # a second resolve keeps the first one's time
            PatientRequest.update(done_at=utc_now()).where(
                (PatientRequest.id == request.id) & PatientRequest.done_at.is_null()
            ).execute()
        elif body.get("done") is False:
            PatientRequest.update(done_at=None).where(PatientRequest.id == request.id).execute()
        # The names of the fields set, never their values (a note may hold anything); a
        # resolve or reopen is recorded with its direction.
        fields = sorted(k for k in ("addTagIds", "userNote", "done") if k in body)
        details: dict[str, Any] = {"fields": fields}
        if "done" in body:
            details["done"] = body["done"]
        AuditEvent.record(token, clinic, "patient_request.patch", request, details)
        answer = summaries([PatientRequest.get_by_id(request.id)])[0]
        remember(answer)
        return answer


def remove_tag(request: PatientRequest, tag_id: uuid.UUID, actor: Actor) -> bool:
    """Take one tag off a request (the console's remove; the API only adds, as the spec
    says). False when the request did not carry it."""
    with db.atomic():
        removed = (
            PatientRequestTag.delete()
            .where((PatientRequestTag.request == request) & (PatientRequestTag.tag == tag_id))
            .execute()
        )
        if removed:
            AuditEvent.record(actor, request.clinic_id, "patient_request.patch", request, {"fields": ["removeTagIds"]})
    return bool(removed)


# --- attachments -------------------------------------------------------------------------------


def issue_upload_link(
    storage: Storage,
    request: PatientRequest,
    content_type: str,
    token: ApiToken,
    *,
    open_links_limit: int,
    remember: Remember = forget,
) -> dict[str, str]:
    """A fresh key and its presigned PUT; 429 TOO_MANY_UPLOAD_LINKS while the clinic holds
    `open_links_limit` links that are neither expired nor registered (`uploads.check_open_links`).

    `remember` is given the key without the URL: a presigned URL is a credential, never
    stored, and a replayed one could have expired (`upload_link_again` presigns anew)."""
    content_type = content_type.strip()
    key = new_object_key(request.id, content_type)
    with db.atomic():  # counted and issued in one transaction, under the clinic's lock
        uploads.check_open_links(request.clinic_id, open_links_limit, UPLOAD_URL_SECONDS)
        UploadLink.create(request=request, file_hash=key, content_type=content_type)
        AuditEvent.record(
            token, request.clinic_id, "attachment.upload_link", request, {"fileHash": key, "contentType": content_type}
        )
        remember({"fileHash": key})
    return {"url": storage.presign_put(key, content_type, UPLOAD_URL_SECONDS), "fileHash": key}


def upload_link_again(storage: Storage, request: PatientRequest, file_hash: str) -> dict[str, str]:
    """The upload link answer for a key issued before (a retry with the same
    Idempotency-Key): the same `fileHash`, a fresh presigned PUT valid the full ten minutes."""
    link = UploadLink.get((UploadLink.request == request) & (UploadLink.file_hash == file_hash))
    return {"url": storage.presign_put(file_hash, link.content_type, UPLOAD_URL_SECONDS), "fileHash": file_hash}


def register_attachment(
    storage: Storage, request: PatientRequest, body: dict[str, Any], token: ApiToken, remember: Remember = forget
) -> MedicalRecord:
    """Register an uploaded object. Registering the same fileHash again answers the
    attachment registered first (so a retry after a timeout never duplicates).

    The registered bytes are evidence: they are copied to a key no upload URL names
    (`storage.seal`), so the upload URL, valid for minutes more, cannot change them, and
    the record keeps their SHA-256. The type check reads that copy; the upload itself is
    deleted once registered."""
    link = UploadLink.get_or_none((UploadLink.request == request) & (UploadLink.file_hash == body["fileHash"]))
    if link is None:
        raise Invalid("fileHash: not issued by an upload link of this request")
    registered = MedicalRecord.get_or_none(MedicalRecord.file_hash == link.file_hash)
    if registered is not None:
        if remember is not forget:
            with db.atomic():
                remember(attachment_json(registered))
        return registered
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
        raise Invalid("fileHash: no file was uploaded for it") from None
    uploads.check_size(storage, sealed.size, link.file_hash, target)
    if not file_types.matches(body["contentType"], storage.read_prefix(target, file_types.PREFIX_BYTES)):
        storage.delete(target)
        raise Invalid(f"contentType: the uploaded file is not {body['contentType']}")
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
            created_at=utc_now(),
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
            )
        remember(attachment_json(record))
    release_connection()
    storage.delete(target if record.object_key != target else link.file_hash)  # a concurrent registration won
    return record


def attachment_json(m: MedicalRecord) -> dict[str, Any]:
    return {
        "id": str(m.id),
        "description": m.description,
        "contentType": m.content_type,
        "createdAt": iso_utc(m.created_at),
        "sha256": m.sha256,
    }
