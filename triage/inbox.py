"""A clinic's words from the database, what a transcript suggests as its request stores it,
the suggestions read again when the words change, and staff confirming or clearing them."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from models import Actor, AuditEvent, Call, Clinic, PatientRequest, RequestType, Triage
from plumbing.clock import as_utc
from plumbing.database import db
from plumbing.errors import Invalid
from triage import reading, vocabulary


def vocabulary_of(clinic_id: uuid.UUID) -> reading.Vocabulary:
    """The clinic's words: each active request type's that has some, and its urgency words."""
    types = {}
    for t in RequestType.select(RequestType.id, RequestType.transcript_words).where(
        (RequestType.clinic == clinic_id) & RequestType.active & RequestType.transcript_words.is_null(False)
    ):
        words = vocabulary.type_words(json.loads(t.transcript_words or "null"))
        if any(words.values()):
            types[str(t.id)] = words
    stored = Clinic.select(Clinic.urgency_words).where(Clinic.id == clinic_id).scalar()
    return reading.Vocabulary(types, vocabulary.urgency_words(json.loads(stored) if stored else None))


def read_transcript(clinic_id: uuid.UUID, text: str, language: str | None) -> Triage:
    """What the transcript suggests, in the clinic's words, as its request stores it."""
    r = reading.read(text, language, vocabulary_of(clinic_id))
    return Triage(uuid.UUID(r.type_id) if r.type_id else None, r.type_spans, r.urgent, r.urgent_spans)


def refresh(clinic_id: uuid.UUID) -> int:
    """Read the clinic's open voice messages again in its words (after they changed): the
    suggestion of each whose type staff have not confirmed, the flag of each they have not
    cleared. Idempotent: only what differs is written. Returns the requests changed.

    Call inside the transaction that changed the words. An inbox holds tens of open
    messages, not thousands; each reading takes milliseconds."""
    words = vocabulary_of(clinic_id)
    changed = 0
    rows = (
        PatientRequest.select(PatientRequest, Call)
        .join(Call)
        .where(
            (PatientRequest.clinic == clinic_id)
            & PatientRequest.done_at.is_null()
            & PatientRequest.suggested_type_spans.is_null(False)
            & Call.transcript.is_null(False)
        )
    )
    for request in rows:
        call = request.call  # joined: every row has one
        assert call is not None
        r = reading.read(call.transcript or "", call.transcript_language, words)
        fresh = Triage(uuid.UUID(r.type_id) if r.type_id else None, r.type_spans, r.urgent, r.urgent_spans).columns()
        if request.type_confirmed_at is not None:
            fresh = {k: v for k, v in fresh.items() if not k.startswith("suggested_")}
        if request.urgent_cleared_at is not None:
            fresh = {k: v for k, v in fresh.items() if not k.startswith("urgent")}
        now = {
            "suggested_type": request.suggested_type_id,
            "suggested_type_spans": request.suggested_type_spans,
            "urgent": request.urgent,
            "urgent_spans": request.urgent_spans,
        }
        if any(now[k] != v for k, v in fresh.items()):
            PatientRequest.update(**fresh).where(PatientRequest.id == request.id).execute()
            changed += 1
    return changed


def confirm_type(request: PatientRequest, type_id: uuid.UUID | None, actor: Actor, now: datetime) -> None:
    """Staff say which of the clinic's request types the message is (None: "other"), the
    suggestion's or another: it becomes the request's type, audited with what was suggested."""
    if type_id is not None and not (
        RequestType.select()
        .where((RequestType.id == type_id) & (RequestType.clinic == request.clinic_id) & RequestType.active)
        .exists()
    ):
        raise Invalid("type: not an active request type of this clinic")
    with db.atomic():
        PatientRequest.update(request_type=type_id, type_confirmed_at=as_utc(now)).where(
            PatientRequest.id == request.id
        ).execute()
        details: dict[str, Any] = {
            "requestTypeId": str(type_id) if type_id else None,
            "suggestedRequestTypeId": str(request.suggested_type_id) if request.suggested_type_id else None,
        }
        details["asSuggested"] = details["requestTypeId"] == details["suggestedRequestTypeId"]
        AuditEvent.record(actor, request.clinic_id, "patient_request.confirm_type", request, details)


def clear_urgent(request: PatientRequest, actor: Actor, now: datetime) -> bool:
    """Staff take the "may be urgent" flag off; the words that raised it stay on the request.
    False when it was not flagged (a second click, another user first)."""
    with db.atomic():
        cleared = (
            PatientRequest.update(urgent=False, urgent_cleared_at=as_utc(now))
            .where((PatientRequest.id == request.id) & PatientRequest.urgent)
            .execute()
        )
        if cleared:
            AuditEvent.record(actor, request.clinic_id, "patient_request.clear_urgent", request, {})
    return bool(cleared)
