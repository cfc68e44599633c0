"""What may be read of a clinic's patient requests: one request (never another clinic's),
a page of them, their tags, reservations and attachments, and the clinic's catalogue the
requests are made from (active request types, tags)."""

from __future__ import annotations

import uuid
from datetime import datetime

from models import Call, Clinic, MedicalRecord, PatientRequest, PatientRequestTag, RequestType, Reservation, Tag
from models.base import place_changes
from plumbing.clock import as_utc
from plumbing.errors import Invalid, NotFound
from plumbing.keyset import Keyset

DEFAULT_LIMIT = 50
#: The most attachments one request's detail lists (a request past it is refused, not cut).
MAX_ATTACHMENTS = 1000

# Newest first; a cursor is the opaque (createdAt, id) of the last row shown.
REQUEST_ORDER = Keyset(PatientRequest.created_at, PatientRequest.id, descending=True)
# With `updatedSince`: in the order of their changes; a cursor is the last row's place.
CHANGE_ORDER = Keyset(PatientRequest.change_position)
PLACE_LOCK = 7_341_053


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


def search(
    clinic: Clinic,
    *,
    patient_id: uuid.UUID | None = None,
    kind: str | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
    updated_since: datetime | None = None,
) -> tuple[list[PatientRequest], str | None]:
    """A page of the clinic's requests, newest first, keyset-paginated on (createdAt, id),
    and the next page's cursor; the filters only narrow the rows, so a cursor stays a
    position in the same order. With `updated_since`: the requests changed since then, in
    the order of their changes (their places: models/base.py `place_changes`), so a row
    changed while a reader pages comes again after the reader's position with what changed,
    and none is passed over."""
    query = PatientRequest.select().where(PatientRequest.clinic == clinic)
    if updated_since is not None:
        place_changes(PatientRequest, PLACE_LOCK)
        query = query.where(
            (PatientRequest.updated_at >= as_utc(updated_since)) & PatientRequest.change_position.is_null(False)
        )
        if patient_id is not None:
            query = query.where(PatientRequest.patient == patient_id)
        if kind is not None:
            query = query.where(PatientRequest.kind == kind)
        rows, _ = CHANGE_ORDER.page(query, cursor, limit)
        # The cursor of the last row even on the last page: a poller keeps its place.
        return rows, CHANGE_ORDER.cursor(rows[-1]) if rows else cursor
    if patient_id is not None:
        query = query.where(PatientRequest.patient == patient_id)
    if kind is not None:
        query = query.where(PatientRequest.kind == kind)
    return REQUEST_ORDER.page(query, cursor, limit)


def active_types(clinic: Clinic) -> list[RequestType]:
    return list(
        RequestType.select().where((RequestType.clinic == clinic) & RequestType.active).order_by(RequestType.name)
    )


def clinic_tags(clinic: Clinic, tag_type: str | None) -> list[Tag]:
    """The clinic's tags that are not deleted (of one type, when given), by type and name."""
    query = Tag.select().where((Tag.clinic == clinic) & Tag.deleted_at.is_null())
    if tag_type is not None:
        query = query.where(Tag.type == tag_type)
    return list(query.order_by(Tag.type, Tag.name))


def tags_of(requests: list[PatientRequest]) -> dict[uuid.UUID, list[Tag]]:
    """Each request's tags that are not deleted, by name (one query for them all)."""
    tags: dict[uuid.UUID, list[Tag]] = {}
    if requests:
        rows = (
            PatientRequestTag.select(PatientRequestTag.request, Tag)
            .join(Tag)
            .where(PatientRequestTag.request.in_([r.id for r in requests]) & Tag.deleted_at.is_null())
            .order_by(Tag.name)
        )
        for row in rows:
            tags.setdefault(row.request_id, []).append(row.tag)
    return tags


def reservations_of(requests: list[PatientRequest]) -> dict[uuid.UUID, list[Reservation]]:
    """Each request's reservations, earliest first (one query for them all)."""
    found: dict[uuid.UUID, list[Reservation]] = {}
    if requests:
        query = (
            Reservation.select()
            .where(Reservation.request.in_([r.id for r in requests]))
            .order_by(Reservation.starts_at)
        )
        for reservation in query:
            found.setdefault(reservation.request_id, []).append(reservation)
    return found


def transcripts_of(requests: list[PatientRequest]) -> dict[uuid.UUID, str]:
    """The transcripts of the calls the requests that were read came from, by call (one
    query): what a suggestion's words are cut from."""
    read = [r.call_id for r in requests if r.call_id and r.suggested_type_spans is not None]
    if not read:
        return {}
    # The text the suggestion was read in: staff's correction when there is one.
    return {
        c.id: c.corrected_transcript or c.transcript or ""
        for c in Call.select(Call.id, Call.transcript, Call.corrected_transcript).where(Call.id.in_(read))
    }


def attachments_of(request: PatientRequest) -> list[MedicalRecord]:
    """The request's registered attachments, oldest first; refused (400) past
    `MAX_ATTACHMENTS` rather than cut short."""
    records = list(
        MedicalRecord.select()
        .where(MedicalRecord.request == request)
        .order_by(MedicalRecord.created_at, MedicalRecord.id)
        .limit(MAX_ATTACHMENTS + 1)
    )
    if len(records) > MAX_ATTACHMENTS:
        raise Invalid(f"the request holds more than {MAX_ATTACHMENTS} attachments")
    return records
