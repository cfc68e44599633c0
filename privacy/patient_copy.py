"""A patient's copy of their data (GDPR articles 15 and 20): one ZIP archive.

It holds `patient-data.json` (every personal field the service stores about the person, as
docs/data-protection.md lists them, times in each clinic's time zone), each transcript as
a text file, each signed document as registered, and a README in Czech and English. The
recordings are not the service's: it never copies them, so the archive names each one and
the platform that holds it. Making a copy is audit-logged (`patient.copy`, counts only).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
import zipfile
from datetime import date, datetime
from typing import IO, Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from models import (
    Actor,
    AuditEvent,
    Calendar,
    Call,
    Clinic,
    ExternalId,
    MedicalRecord,
    Patient,
    PatientRecord,
    PatientRecordTag,
    PatientRequest,
    PatientRequestTag,
    RequestType,
    Reservation,
    Tag,
)
from models.requests import spans_of, words_at
from plumbing.clock import as_utc
from plumbing.database import db, release_connection
from privacy.erasure import Plan, plan
from storage import Storage, ascii_filename

#: (table, column) -> the key under which `patient-data.json` gives it: every column holding
#: personal data of a patient (docs/data-protection.md says which; a test holds the two
#: together), so a copy holds all of them.
FIELDS: dict[tuple[str, str], str] = {
    ("patient", "id"): "patients[].id",
    ("patient", "first_name"): "patients[].firstName",
    ("patient", "last_name"): "patients[].lastName",
    ("patient", "phone"): "patients[].phone",
    ("patient", "email"): "patients[].email",
    ("patient", "birth_date"): "patients[].birthDate",
    ("patient", "merged_into_id"): "patients[].mergedInto",
    ("patient", "created_at"): "patients[].createdAt",
    ("patient_record", "status"): "records[].status",
    ("patient_record", "note"): "records[].note",
    ("patient_record", "created_at"): "records[].createdAt",
    ("patient_record_tag", "tag_id"): "records[].tags",
    ("external_id", "source"): "records[].externalIds[].source",
    ("external_id", "value"): "records[].externalIds[].id",
    ("patient_request", "title"): "requests[].title",
    ("patient_request", "kind"): "requests[].kind",
    ("patient_request", "request_type_id"): "requests[].requestType",
    ("patient_request", "clinic_note"): "requests[].clinicNote",
    ("patient_request", "user_note"): "requests[].userNote",
    ("patient_request", "created_at"): "requests[].createdAt",
    ("patient_request", "done_at"): "requests[].doneAt",
    ("patient_request", "suggested_type_id"): "requests[].suggestedType",
    ("patient_request", "suggested_type_spans"): "requests[].suggestedTypeWords",
    ("patient_request", "type_confirmed_at"): "requests[].typeConfirmedAt",
    ("patient_request", "urgent"): "requests[].mayBeUrgent",
    ("patient_request", "urgent_spans"): "requests[].urgentWords",
    ("patient_request", "urgent_cleared_at"): "requests[].urgentClearedAt",
    ("patient_request_tag", "tag_id"): "requests[].tags",
    ("reservation", "starts_at"): "requests[].reservations[].startsAt",
    ("reservation", "ends_at"): "requests[].reservations[].endsAt",
    ("reservation", "calendar_id"): "requests[].reservations[].calendar",
    ("medical_record", "description"): "requests[].documents[].description",
    ("medical_record", "category_type"): "requests[].documents[].categoryType",
    ("medical_record", "content_type"): "requests[].documents[].contentType",
    ("medical_record", "visible_to_patient"): "requests[].documents[].visibleToPatient",
    ("medical_record", "sha256"): "requests[].documents[].sha256",
    ("medical_record", "created_at"): "requests[].documents[].createdAt",
    ("medical_record", "object_key"): "requests[].documents[].file",
    ("call", "call_sid"): "calls[].callSid",
    ("call", "call_from"): "calls[].from",
    ("call", "call_to"): "calls[].to",
    ("call", "status"): "calls[].status",
    ("call", "source"): "calls[].source",
    ("call", "extra"): "calls[].extra",
    ("call", "received_at"): "calls[].receivedAt",
    ("call", "outcome"): "calls[].outcome",
    ("call", "transcript"): "calls[].transcript",
    ("call", "corrected_transcript"): "calls[].correctedTranscript",
    ("call", "corrected_at"): "calls[].transcriptCorrectedAt",
    ("call", "transcript_language"): "calls[].transcriptLanguage",
    ("call", "transcript_status"): "calls[].transcriptStatus",
    ("call", "transcript_signals"): "calls[].transcriptSignals",
    ("call", "intelligibility"): "calls[].intelligibility",
    ("call", "callback_number"): "calls[].callbackNumber",
    ("call", "heard_number"): "calls[].heardNumber",
    ("call", "callback_number_at"): "calls[].callbackNumberAt",
    ("call", "recording_sid"): "calls[].recording.reference",
    ("call", "recording_url"): "calls[].recording.heldBy",
    ("call", "recording_sha256"): "calls[].recording.sha256",
}

ARCHIVE_README = """Kopie údajů pacienta / A patient's copy of their data

patient-data.json  vše, co služba o pacientovi uchovává (časy v časovém pásmu kliniky)
                   everything the service holds about the patient (times in the clinic's time zone)
transcripts/       přepisy hlasových zpráv / the voicemails' transcripts
documents/         podepsané dokumenty / the signed documents

Nahrávky hovorů služba nekopíruje: uchovává je telefonní ústředna (platforma), kterou
patient-data.json u každého hovoru jmenuje (calls[].recording).
The service does not copy call recordings: the switchboard's platform keeps them, named
for each call in patient-data.json (calls[].recording).
"""


#: The service's own patients and notes (stored as English markers, models/patients.py) in the
#: words of the copy's language: the patient reads the copy. The console's catalogue says the
#: same (tests/test_patient_words.py holds the two together).
MARKER_WORDS: dict[str, dict[str, str]] = {
    "cs": {
        Patient.MARKER_UNKNOWN_CALLER: "neznámý volající",
        Patient.MARKER_ERASED: "vymazaný pacient",
        PatientRecord.MARKER_FROM_A_CALL: "Založeno z telefonního hovoru.",
    },
    "en": {
        Patient.MARKER_UNKNOWN_CALLER: "unknown caller",
        Patient.MARKER_ERASED: "erased patient",
        PatientRecord.MARKER_FROM_A_CALL: "Created from a phone call.",
    },
}
COPY_LANGUAGES = tuple(MARKER_WORDS)  # the first is the default


@dataclasses.dataclass(frozen=True)
class CopyMade:
    requests: int
    calls: int
    documents: int
    transcripts: int


def write_copy(
    patient_id: uuid.UUID,
    out: IO[bytes],
    storage: Storage,
    actor: Actor,
    now: datetime,
    clinic: Clinic | None = None,
    language: str = COPY_LANGUAGES[0],
) -> CopyMade:
    """Write the archive of the person `patient_id` is (the survivor of a merge and the
    rows merged into it) to `out`; `clinic` scopes it as for an erasure (the console's
    admin); the service's own words in it (the markers) in `language`. `NotFound` for no
    such patient. Needs a database connection (the caller's)."""
    p = plan(patient_id, clinic)
    clinics = {c.id: c for c in Clinic.select().where(Clinic.organization == p.organization.id)}
    home = clinics.get(clinic.id) if clinic is not None else None
    zone = _zone(home or (clinics[p.records[0].clinic_id] if p.records else next(iter(clinics.values()), None)))
    words = MARKER_WORDS.get(language, MARKER_WORDS[COPY_LANGUAGES[0]])
    document, files = _document(p, clinics, zone, now, words)
    release_connection()  # the documents are read from storage: no pooled connection held meanwhile
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("README.txt", ARCHIVE_README)
        archive.writestr("patient-data.json", json.dumps(document, ensure_ascii=False, indent=2))
        for name, text in files.transcripts.items():
            archive.writestr(name, text)
        for name, key in files.documents.items():
            stream, _ = storage.open_for_read(key)
            with stream, archive.open(name, "w") as target:
                while chunk := stream.read(1 << 20):
                    target.write(chunk)
    made = CopyMade(
        requests=len(p.requests),
        calls=len(p.calls),
        documents=len(files.documents),
        transcripts=len(files.transcripts),
    )
    with db.atomic():
        for clinic_id in sorted(p.clinic_ids(), key=str):
            AuditEvent.record(
                actor, clinic_id, "patient.copy", ("patient", p.patient.id), dataclasses.asdict(made), at=now
            )
    return made


@dataclasses.dataclass
class _Files:
    transcripts: dict[str, str] = dataclasses.field(default_factory=dict)  # archive name -> text
    documents: dict[str, str] = dataclasses.field(default_factory=dict)  # archive name -> storage key


def _zone(clinic: Clinic | None) -> ZoneInfo:
    return ZoneInfo(clinic.timezone if clinic else "UTC")


def _at(moment: datetime | None, zone: ZoneInfo) -> str | None:
    """A stored time (naive UTC) in the clinic's zone, with its offset."""
    if moment is None:
        return None
    return as_utc(moment).replace(tzinfo=ZoneInfo("UTC")).astimezone(zone).isoformat(timespec="seconds")


def _document(
    p: Plan, clinics: dict[uuid.UUID, Clinic], zone: ZoneInfo, now: datetime, words: dict[str, str]
) -> tuple[dict, _Files]:
    files = _Files()

    def zone_of(clinic_id: uuid.UUID) -> ZoneInfo:
        return _zone(clinics.get(clinic_id))

    def clinic_name(clinic_id: uuid.UUID) -> str:
        return clinics[clinic_id].name if clinic_id in clinics else str(clinic_id)

    record_ids = [r.id for r in p.records]
    record_tags: dict[uuid.UUID, list[str]] = {}
    for record_tag in (
        PatientRecordTag.select(PatientRecordTag.record, Tag.name)
        .join(Tag)
        .where(PatientRecordTag.record.in_(record_ids or [uuid.UUID(int=0)]))
    ):
        record_tags.setdefault(record_tag.record_id, []).append(record_tag.tag.name)
    external: dict[tuple[uuid.UUID, uuid.UUID], list[dict[str, str]]] = {}
    for e in ExternalId.select().where(ExternalId.patient.in_([x.id for x in p.patients])).order_by(ExternalId.id):
        external.setdefault((e.patient_id, e.clinic_id), []).append({"source": e.source, "id": e.value})
    request_ids = [r.id for r in p.requests] or [uuid.UUID(int=0)]
    request_tags: dict[uuid.UUID, list[str]] = {}
    for request_tag in (
        PatientRequestTag.select(PatientRequestTag.request, Tag.name)
        .join(Tag)
        .where(PatientRequestTag.request.in_(request_ids))
    ):
        request_tags.setdefault(request_tag.request_id, []).append(request_tag.tag.name)
    calendars = {
        k.id: k.name for k in Calendar.select().where(Calendar.clinic.in_(list(clinics) or [uuid.UUID(int=0)]))
    }
    reservations: dict[uuid.UUID, list[Reservation]] = {}
    for booked in Reservation.select().where(Reservation.request.in_(request_ids)).order_by(Reservation.starts_at):
        reservations.setdefault(booked.request_id, []).append(booked)
    documents: dict[uuid.UUID, list[MedicalRecord]] = {}
    for d in p.documents:
        documents.setdefault(d.request_id, []).append(d)
    types = {
        t.id: t.name
        for t in RequestType.select().where(
            RequestType.id.in_(
                [t for r in p.requests for t in (r.request_type_id, r.suggested_type_id) if t] or [uuid.UUID(int=0)]
            )
        )
    }
    # What the voice messages' transcripts suggested: the words, from the calls' transcripts.
    transcripts = {c.id: c.transcript or "" for c in p.calls}

    def document_json(d: MedicalRecord, request: PatientRequest, index: int) -> dict[str, Any]:
        name = f"documents/{str(request.id)[:8]}/{index + 1}-{ascii_filename(d.description)}"
        files.documents[name] = d.stored_key
        z = zone_of(request.clinic_id)
        return {
            "file": name,
            "description": d.description,
            "categoryType": d.category_type,
            "contentType": d.content_type,
            "visibleToPatient": d.visible_to_patient,
            "sha256": d.sha256,
            "createdAt": _at(d.created_at, z),
        }

    requests = []
    for r in p.requests:
        z = zone_of(r.clinic_id)
        requests.append(
            {
                "id": str(r.id),
                "clinic": clinic_name(r.clinic_id),
                "kind": r.kind,
                "requestType": types.get(r.request_type_id) if r.request_type_id else None,
                "title": r.title,
                "clinicNote": r.clinic_note,
                "userNote": r.user_note,
                "createdAt": _at(r.created_at, z),
                "doneAt": _at(r.done_at, z),
                "suggestedType": types.get(r.suggested_type_id) if r.suggested_type_id else None,
                "suggestedTypeWords": words_at(transcripts.get(r.call_id, ""), spans_of(r.suggested_type_spans))
                if r.call_id
                else [],
                "typeConfirmedAt": _at(r.type_confirmed_at, z),
                "mayBeUrgent": r.urgent,
                "urgentWords": words_at(transcripts.get(r.call_id, ""), spans_of(r.urgent_spans)) if r.call_id else [],
                "urgentClearedAt": _at(r.urgent_cleared_at, z),
                "tags": sorted(request_tags.get(r.id, [])),
                "reservations": [
                    {
                        "calendar": calendars.get(x.calendar_id) if x.calendar_id else None,
                        "startsAt": _at(x.starts_at, z),
                        "endsAt": _at(x.ends_at, z),
                    }
                    for x in reservations.get(r.id, [])
                ],
                "documents": [document_json(d, r, i) for i, d in enumerate(documents.get(r.id, []))],
                "call": str(r.call_id) if r.call_id else None,
            }
        )
    calls = [_call_json(c, zone_of(c.clinic_id), clinic_name(c.clinic_id), files) for c in p.calls]
    return (
        {
            "madeAt": _at(now, zone),
            "organization": p.organization.name,
            "patients": [
                {
                    "id": str(x.id),
                    "firstName": x.first_name,
                    "lastName": words[x.marker] if x.marker else x.last_name,
                    "phone": x.phone,
                    "email": x.email,
                    "birthDate": x.birth_date.isoformat() if isinstance(x.birth_date, date) else x.birth_date,
                    "mergedInto": str(x.merged_into_id) if x.merged_into_id else None,
                    "createdAt": _at(x.created_at, zone),
                }
                for x in p.patients
            ],
            "records": [
                {
                    "clinic": clinic_name(r.clinic_id),
                    "status": r.status,
                    "note": words[r.note_marker] if r.note_marker else r.note,
                    "tags": sorted(record_tags.get(r.id, [])),
                    "externalIds": external.get((r.patient_id, r.clinic_id), []),
                    "createdAt": _at(r.created_at, zone_of(r.clinic_id)),
                }
                for r in p.records
            ],
            "requests": requests,
            "calls": calls,
        },
        files,
    )


def _call_json(c: Call, zone: ZoneInfo, clinic: str, files: _Files) -> dict[str, Any]:
    transcript_file = None
    if c.transcript:
        local = _at(c.received_at, zone) or ""
        transcript_file = f"transcripts/{local[:19].replace(':', '-')}-{str(c.id)[:8]}.txt"
        files.transcripts[transcript_file] = c.transcript + "\n"
    host = urlsplit(c.recording_url).hostname if c.recording_url else None
    return {
        "id": str(c.id),
        "clinic": clinic,
        "callSid": c.call_sid,
        "from": c.call_from,
        "to": c.call_to,
        "status": c.status,
        "source": c.source,
        "extra": _json_or_text(c.extra),
        "receivedAt": _at(c.received_at, zone),
        "outcome": c.outcome,
        "transcript": c.transcript,
        "transcriptFile": transcript_file,
        # What staff who listened wrote down as really said (the machine's text above).
        "correctedTranscript": c.corrected_transcript,
        "transcriptCorrectedAt": _at(c.corrected_at, zone) if c.corrected_at else None,
        "transcriptLanguage": c.transcript_language,
        "transcriptStatus": c.transcript_status,
        "transcriptSignals": _json_or_text(c.transcript_signals),
        "intelligibility": c.intelligibility,
        "callbackNumber": c.callback_number,
        "heardNumber": c.heard_number,
        "callbackNumberAt": c.callback_number_at,
        "recording": {
            "reference": c.recording_sid,
            "heldBy": (
                f"the switchboard platform at {host}; the service keeps no copy"
                if host
                else "no recording was handed off"
            ),
            "sha256": c.recording_sha256,
        },
    }


def _json_or_text(stored: str | None) -> Any:
    """A column holding JSON as what it holds; text that is not JSON as the text."""
    if not stored:
        return None
    try:
        return json.loads(stored)
    except ValueError:
        return stored
