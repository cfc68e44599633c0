"""How the API writes each noun as JSON (the answers' shapes that web/schemas/ describes):
patient requests (a summary, the detail with its attachments' presigned links, what the
transcript suggested), attachments, request types, tags, patients and a bulk import's
outcome. The domain packages hand over models; this is the only place that names their
fields the contract's way."""

from __future__ import annotations

import uuid
from typing import Any

from models import Clinic, MedicalRecord, Patient, PatientRequest, RequestType, Tag
from models.requests import spans_of, words_at
from patient_requests import queries
from patients import directory
from patients.directory import Outcome
from plumbing.clock import iso_utc
from storage.links import LinkCache

#: A patient shared in the organization, without a record in the addressed clinic.
SHARED_STATUS = "WAITING"


def request_type(t: RequestType) -> dict[str, Any]:
    return {"id": str(t.id), **t.public_fields()}


def tag(t: Tag) -> dict[str, Any]:
    return {"id": str(t.id), "name": t.name, "type": t.type, "color": t.color}


def requests(rows: list[PatientRequest]) -> list[dict[str, Any]]:
    """Requests as create, search and PATCH answer them (`medicalRecords` always empty);
    four queries whatever their number."""
    tags = queries.tags_of(rows)
    reservations = queries.reservations_of(rows)
    transcripts = queries.transcripts_of(rows)
    return [
        {
            "id": str(r.id),
            "kind": r.kind,
            "title": r.title,
            "createdAt": iso_utc(r.created_at),
            "updatedAt": iso_utc(r.updated_at or r.created_at),
            "doneAt": iso_utc(r.done_at),
            "patientId": str(r.patient_id),
            "requestTypeId": str(r.request_type_id) if r.request_type_id else None,
            "userNote": r.user_note,
            "tags": [tag(t) for t in tags.get(r.id, [])],
            "medicalRecords": [],
            "reservations": [
                {
                    "id": str(res.id),
                    "start": iso_utc(res.starts_at),
                    "end": iso_utc(res.ends_at),
                    "calendarId": str(res.calendar_id) if res.calendar_id else None,
                }
                for res in reservations.get(r.id, [])
            ],
            **triage(r, transcripts.get(r.call_id) if r.call_id else None),
        }
        for r in rows
    ]


def request(r: PatientRequest) -> dict[str, Any]:
    return requests([r])[0]


def triage(r: PatientRequest, transcript: str | None) -> dict[str, Any]:
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


def detail(r: PatientRequest, links: LinkCache) -> dict[str, Any]:
    """A request's detail: its summary, and its attachments with fresh presigned links."""
    return {
        **request(r),
        "medicalRecords": [
            {
                **attachment(m),
                "categoryType": m.category_type,
                "visibleToPatient": m.visible_to_patient,
                "url": links.url(m, "inline"),
                "downloadUrl": links.url(m, "attachment"),
            }
            for m in queries.attachments_of(r)
        ],
    }


def attachment(m: MedicalRecord) -> dict[str, Any]:
    return {
        "id": str(m.id),
        "description": m.description,
        "contentType": m.content_type,
        "createdAt": iso_utc(m.created_at),
        "sha256": m.sha256,
    }


def upload_link(url: str, file_hash: str) -> dict[str, str]:
    return {"url": url, "fileHash": file_hash}


def patients(clinic: Clinic, rows: list[Patient]) -> list[dict[str, Any]]:
    """Patients as in `data[]` of patient search, seen from `clinic`; three queries
    whatever their number."""
    records = directory.records_here(clinic, rows)
    tags = directory.record_tags(records)
    external = directory.external_ids(clinic, list(records))
    out = []
    for p in rows:
        record = records.get(p.id)
        out.append(
            {
                "id": str(p.id),
                "firstName": p.first_name,
                "lastName": p.last_name,
                "phone": p.phone,
                "email": p.email,
                "birthDate": p.birth_date.isoformat() if p.birth_date else None,
                "updatedAt": iso_utc(p.updated_at or p.created_at),
                "tags": [tag(t) for t in tags.get(p.id, [])],
                "note": record.note if record else "",
                "externalIds": [{"source": e.source, "id": e.value} for e in external.get(p.id, [])],
                "status": record.status if record else SHARED_STATUS,
                "isInClinic": record is not None,
            }
        )
    return out


def imported(clinic: Clinic, patient: Patient, created: bool) -> dict[str, Any]:
    """A single import's answer: the patient and whether it was created."""
    return {"patient": patients(clinic, [patient])[0], "created": created}


def bulk_import(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """import-bulk's answer: per item, in order, its status, patient id and error."""
    return [
        {
            "index": index,
            "status": status,
            "patientId": str(patient_id) if patient_id else None,
            "error": error.to_dict() if error else None,
        }
        for index, (patient_id, status, error) in enumerate(outcomes)
    ]


def ids(values: list[str] | None) -> tuple[uuid.UUID, ...] | None:
    """A body's list of ids (validated as UUIDs by its schema) as the domain takes them."""
    return None if values is None else tuple(uuid.UUID(v) for v in values)
