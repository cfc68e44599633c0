"""A clinic's words from the database, what a transcript suggests as its request stores it,
and the suggestions read again when the words change. (Staff confirming a suggested type or
clearing a flag are changes of the request: patient_requests/changes.py.)"""

from __future__ import annotations

import json
import uuid

from models import Call, Clinic, PatientRequest, RequestType, Triage
from triage import reading, vocabulary


def vocabulary_of(clinic_id: uuid.UUID) -> reading.Vocabulary:
    """The clinic's words: each active request type's that has some, and its urgency words."""
    types = {}
    presets: dict[str, list[str]] = {}
    for t in RequestType.select(RequestType.id, RequestType.transcript_words).where(
        (RequestType.clinic == clinic_id) & RequestType.active & RequestType.transcript_words.is_null(False)
    ):
        setting = json.loads(t.transcript_words or "null")
        words = vocabulary.type_words(setting)
        if any(words.values()):
            types[str(t.id)] = words
            presets.setdefault((setting or {}).get("preset") or "", []).append(str(t.id))
    stored = Clinic.select(Clinic.urgency_words).where(Clinic.id == clinic_id).scalar()
    return reading.Vocabulary(
        types, vocabulary.urgency_words(json.loads(stored) if stored else None), vocabulary.outranks(presets)
    )


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
        # Staff's correction, when there is one, is the text read (and the spans' text).
        r = reading.read(call.corrected_transcript or call.transcript or "", call.transcript_language, words)
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
