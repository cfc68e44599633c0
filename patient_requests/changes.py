"""Every change made to a patient request, each with who makes it and when, audited in
its own transaction: created (through the API, or from a finished call), resolved or
reopened, tagged, noted, its type confirmed, its urgency cleared.

A write the API answers takes `then`: it is called with the written request inside the
write's transaction, and its result is the write's. The web layer shapes its answer
there and stores it for the request's Idempotency-Key (web/idempotency.py), so that a
write never commits without the answer a retry will be given, nor the answer without
the write, and a committed create never answers 5xx (nothing is left to fail)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from models import (
    Actor,
    ApiToken,
    AuditEvent,
    Calendar,
    Call,
    ChangeEvent,
    Clinic,
    Outbox,
    Patient,
    PatientRecord,
    PatientRecordTag,
    PatientRequest,
    PatientRequestTag,
    RequestType,
    RequestTypeDefaultTag,
    Reservation,
    Tag,
    Triage,
)
from patients.directory import patient_for_create
from plumbing.clock import as_utc
from plumbing.database import db
from plumbing.errors import Invalid, NotFound
from triage import clinic_words

log = logging.getLogger(__name__)

T = TypeVar("T")
Who = ApiToken | Actor


def _nothing(request: PatientRequest) -> None:
    """The `then` of a change whose caller answers nothing from inside its transaction."""


@dataclass(frozen=True)
class TimeSlot:
    """A reservation the create asks for: one of the clinic's calendars, from `start` to `end`."""

    calendar_id: uuid.UUID
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Changes:
    """What one update changes (None: left as it is): tags added, the note, done or not.
    The audit trail names the fields set as the API does (`addTagIds`, `userNote`,
    `done`), never their values: a note may hold anything."""

    add_tags: tuple[uuid.UUID, ...] | None = None
    note: str | None = None
    done: bool | None = None

    def audited(self) -> dict[str, Any]:
        fields = {"addTagIds": self.add_tags, "userNote": self.note, "done": self.done}
        details: dict[str, Any] = {"fields": sorted(k for k, v in fields.items() if v is not None)}
        if self.done is not None:  # a resolve or a reopen is recorded with its direction
            details["done"] = self.done
        return details


# --- create --------------------------------------------------------------------------


def create(
    clinic: Clinic,
    patient_id: uuid.UUID,
    request_type_id: uuid.UUID,
    *,
    note: str,
    slot: TimeSlot | None,
    actor: Who,
    now: datetime,
    then: Callable[[PatientRequest], T],
) -> T:
    """A request of one of the clinic's active types for one of its patients (404, 410 and
    403 as `patient_for_create` says); with a time slot it is reserved and done at once.
    The type's default patient tags are applied best effort."""
    patient, record = patient_for_create(clinic, patient_id)
    request_type = RequestType.get_or_none(
        (RequestType.id == request_type_id) & (RequestType.clinic == clinic) & RequestType.active
    )
    if request_type is None:
        raise NotFound("Unknown or inactive request type.", code="USER_ECRF_NOT_FOUND")
    calendar = _calendar_of(clinic, slot)
    with db.atomic():
        request = PatientRequest.create(
            clinic=clinic,
            patient=patient,
            request_type=request_type,
            title=request_type.name,
            clinic_note=note,
            created_by=actor if isinstance(actor, ApiToken) else None,
            created_at=as_utc(now),
            done_at=as_utc(now) if slot else None,
        )
        if slot is not None:
            Reservation.create(
                request=request, calendar=calendar, starts_at=as_utc(slot.start), ends_at=as_utc(slot.end)
            )
        _apply_default_tags(request_type, record)
        AuditEvent.record(
            actor,
            clinic,
            "patient_request.create",
            request,
            {"patientId": str(patient.id), "requestTypeId": str(request_type.id)},
            at=now,
        )
        ChangeEvent.record(clinic.id, "request.created", _created(request.id, patient.id, "standard", "api"), now)
        return then(request)


def _created(request_id: uuid.UUID, patient_id: Any, kind: str, source: str) -> dict[str, Any]:
    return {"requestId": str(request_id), "patientId": str(patient_id), "kind": kind, "source": source}


def _updated(request: PatientRequest, changed: list[str], **more: Any) -> None:
    """The `request.updated` event of a change, in its transaction: which fields changed
    (names, never values)."""
    now = more.pop("at")
    PatientRequest.update(updated_at=as_utc(now)).where(PatientRequest.id == request.id).execute()
    data = {"requestId": str(request.id), "patientId": str(request.patient_id), "changed": changed, **more}
    ChangeEvent.record(request.clinic_id, "request.updated", data, now)


def _calendar_of(clinic: Clinic, slot: TimeSlot | None) -> Calendar | None:
    if slot is None:
        return None
    calendar = Calendar.get_or_none((Calendar.id == slot.calendar_id) & (Calendar.clinic == clinic))
    if calendar is None:
        raise Invalid("timeSlotInput.calendarId: not a calendar of this clinic", param="/timeSlotInput/calendarId")
    if as_utc(slot.end) <= as_utc(slot.start):
        raise Invalid("timeSlotInput.end: must be after start", param="/timeSlotInput/end")
    return calendar


def _apply_default_tags(request_type: RequestType, record: PatientRecord) -> None:
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


def create_from_call(call: Call, patient: Patient, kind: str, title: str, triage: Triage | None, now: datetime) -> None:
    """The request a finished call makes (a voice message, a missed call) for the patient
    the caller is; nothing when the call has one already (the unique `call_id`). Call
    inside the transaction that finishes the call: its `call.receive` is the audit trail's.
    A request flagged "may be urgent" is told to whoever its clinic asked: the outbox's
    `request.urgent`, in this transaction (notices/urgent.py decides who and when)."""
    request_id = uuid.uuid4()
    made = (
        PatientRequest.insert(
            id=request_id,
            clinic=call.clinic_id,
            patient=patient,
            kind=kind,
            call=call.id,
            title=title[:300],
            created_at=as_utc(now),
            **(triage.columns() if triage is not None else {}),
        )
        .on_conflict_ignore()
        .execute()
    )
    # (Not when the call had its request already: SQLite's answer to an ignored insert is no proof.)
    if made is None or not PatientRequest.select().where(PatientRequest.id == request_id).exists():
        return
    source = "voicemail" if kind == "voice_message" else kind
    ChangeEvent.record(call.clinic_id, "request.created", _created(request_id, patient.id, kind, source), now)
    if triage is not None and triage.urgent:
        Outbox.add("request.urgent", {"request": str(request_id)}, now, clinic_id=call.clinic_id)


# --- update: tags, note, done ----------------------------------------------------------


def update(
    request: PatientRequest, changes: Changes, actor: Who, now: datetime, then: Callable[[PatientRequest], T]
) -> T:
    """Apply `changes` in one transaction, audited as one `patient_request.patch`; a
    tag that is not one of the clinic's request tags refuses the whole update (400). A
    second resolve keeps the first one's time."""
    wanted = set(changes.add_tags or ())
    tags = (
        list(
            Tag.select(Tag.id).where(
                Tag.id.in_(list(wanted))
                & (Tag.clinic == request.clinic_id)
                & (Tag.type == "patient_request")
                & Tag.deleted_at.is_null()
            )
        )
        if wanted
        else []
    )
    unknown = wanted - {t.id for t in tags}
    if unknown:
        raise Invalid(
            f"addTagIds: not request tags of this clinic: {', '.join(sorted(map(str, unknown)))}", param="/addTagIds"
        )
    with db.atomic():
        changed: list[str] = []
        had = {
            row.tag_id
            for row in PatientRequestTag.select(PatientRequestTag.tag).where(PatientRequestTag.request == request)
        }
        for tag in tags:
            PatientRequestTag.insert(request=request, tag=tag).on_conflict_ignore().execute()
        if {tag.id for tag in tags} - had:
            changed.append("tags")
        if changes.note is not None and (
            PatientRequest.update(user_note=changes.note)
            .where((PatientRequest.id == request.id) & (PatientRequest.user_note != changes.note))
            .execute()
        ):
            changed.append("note")
        if changes.done is True:
            if (
                PatientRequest.update(done_at=as_utc(now))
                .where((PatientRequest.id == request.id) & PatientRequest.done_at.is_null())
                .execute()
            ):
                changed.append("done")
        elif changes.done is False and (
            PatientRequest.update(done_at=None)
            .where((PatientRequest.id == request.id) & PatientRequest.done_at.is_null(False))
            .execute()
        ):
            changed.append("done")
        AuditEvent.record(actor, request.clinic_id, "patient_request.patch", request, changes.audited(), at=now)
        if changed:
            extra = {"done": changes.done} if "done" in changed else {}
            _updated(request, changed, at=now, **extra)
        return then(PatientRequest.get_by_id(request.id))


def resolve(request: PatientRequest, actor: Who, now: datetime) -> None:
    update(request, Changes(done=True), actor, now, _nothing)


def reopen(request: PatientRequest, actor: Who, now: datetime) -> None:
    update(request, Changes(done=False), actor, now, _nothing)


def set_note(request: PatientRequest, note: str, actor: Who, now: datetime) -> None:
    update(request, Changes(note=note), actor, now, _nothing)


def add_tag(request: PatientRequest, tag_id: uuid.UUID, actor: Who, now: datetime) -> None:
    update(request, Changes(add_tags=(tag_id,)), actor, now, _nothing)


def remove_tag(request: PatientRequest, tag_id: uuid.UUID, actor: Who, now: datetime) -> bool:
    """Take one tag off (the console's remove; the API only adds, as the contract says).
    False when the request did not carry it."""
    with db.atomic():
        removed = (
            PatientRequestTag.delete()
            .where((PatientRequestTag.request == request) & (PatientRequestTag.tag == tag_id))
            .execute()
        )
        if removed:
            AuditEvent.record(
                actor, request.clinic_id, "patient_request.patch", request, {"fields": ["removeTagIds"]}, at=now
            )
            _updated(request, ["tags"], at=now)
    return bool(removed)


# --- what the transcript suggested: the type, "may be urgent" -----------------------------


def confirm_type(request: PatientRequest, type_id: uuid.UUID | None, actor: Who, now: datetime) -> None:
    """Staff say which of the clinic's request types the message is (None: "other"), the
    suggestion's or another: it becomes the request's type, audited with what was suggested."""
    if type_id is not None and not (
        RequestType.select()
        .where((RequestType.id == type_id) & (RequestType.clinic == request.clinic_id) & RequestType.active)
        .exists()
    ):
        raise Invalid("type: not an active request type of this clinic", param="/type")
    with db.atomic():
        PatientRequest.update(request_type=type_id, type_confirmed_at=as_utc(now)).where(
            PatientRequest.id == request.id
        ).execute()
        details: dict[str, Any] = {
            "requestTypeId": str(type_id) if type_id else None,
            "suggestedRequestTypeId": str(request.suggested_type_id) if request.suggested_type_id else None,
        }
        details["asSuggested"] = details["requestTypeId"] == details["suggestedRequestTypeId"]
        AuditEvent.record(actor, request.clinic_id, "patient_request.confirm_type", request, details, at=now)
        _updated(request, ["type"], at=now)


def clear_urgent(request: PatientRequest, actor: Who, now: datetime) -> bool:
    """Staff take the "may be urgent" flag off; the words that raised it stay on the request.
    False when it was not flagged (a second click, another user first)."""
    with db.atomic():
        cleared = (
            PatientRequest.update(urgent=False, urgent_cleared_at=as_utc(now))
            .where((PatientRequest.id == request.id) & PatientRequest.urgent)
            .execute()
        )
        if cleared:
            AuditEvent.record(actor, request.clinic_id, "patient_request.clear_urgent", request, {}, at=now)
            _updated(request, ["urgent"], at=now)
    return bool(cleared)


# --- what was really said: a corrected transcript ----------------------------------------

#: The longest correction kept (a voicemail's transcript is a few hundred characters).
MAX_CORRECTION = 5000


def correct_transcript(request: PatientRequest, text: str, actor: Who, now: datetime) -> bool:
    """Staff who listened write down what was really said: kept beside the machine's
    transcript (never over it), shown first and returned by the API; empty text takes the
    correction back. The suggested type and the "may be urgent" flag are read again in the
    clinic's words from the text now shown, but for a type staff confirmed or a flag they
    cleared. Audited with the correction's length only (never the text). False when nothing
    changed."""
    call = Call.get_or_none(Call.id == request.call_id) if request.call_id else None
    if call is None or call.transcript is None:
        raise Invalid("transcript: this request has no transcript to correct")
    corrected = text.replace("\r\n", "\n").strip()[:MAX_CORRECTION] or None
    if corrected == call.corrected_transcript:
        return False
    who = Actor.of(actor)
    with db.atomic():
        Call.update(
            corrected_transcript=corrected,
            corrected_at=as_utc(now) if corrected else None,
            corrected_by=who.name if corrected else None,
        ).where(Call.id == call.id).execute()
        fresh: dict[str, Any] = {}
        if request.suggested_type_spans is not None:  # a message the triage read: read again
            fresh = clinic_words.read_transcript(
                request.clinic_id, corrected or call.transcript, call.transcript_language
            ).columns()
            if request.type_confirmed_at is not None:
                fresh = {k: v for k, v in fresh.items() if not k.startswith("suggested_")}
            if request.urgent_cleared_at is not None:
                fresh = {k: v for k, v in fresh.items() if not k.startswith("urgent")}
            if fresh:
                PatientRequest.update(**fresh).where(PatientRequest.id == request.id).execute()
        AuditEvent.record(
            actor,
            request.clinic_id,
            "patient_request.correct_transcript",
            request,
            {"characters": len(corrected or ""), "withdrawn": corrected is None},
            at=now,
        )
    return True
