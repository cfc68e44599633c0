"""The read trail: who read which patient's data, when and from where (models.audit.ReadEvent),
and the questions a data-protection officer asks of it: "who read this patient" and, after a
stolen password or a leaked key, "everything staff member X or key Y read between two
times" (`reads_by`), on the console's page, as CSV and from `manage.py reads`.

Each read is one INSERT, written by the resource that answers it before the answer leaves
(console/ and resources/ call `record`): nothing is queued, so nothing is lost when the
process stops, and nothing is read back to write it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from models import ApiToken, Clinic, Patient, Reader, ReadEvent, StaffUser
from plumbing.clock import as_utc, iso_utc

#: The most rows one answer of the breach question lists (the CSV and the CLI have all).
PAGE_LIMIT = 1000


def record(
    who: StaffUser | ApiToken,
    clinic_id: uuid.UUID,
    kind: str,
    reads: Iterable[tuple[uuid.UUID | None, uuid.UUID | None]],
    now: datetime,
) -> int:
    """Record one read of `kind` (ReadEvent.KINDS) by `who`: one row per (patient id,
    request id) it showed, in one INSERT. Returns the rows written."""
    if kind not in ReadEvent.KINDS:
        raise ValueError(f"not a kind of read: {kind}")
    return ReadEvent.record(Reader.of(who), clinic_id, kind, list(reads), at=now)


#: The console's player loads a message's recording as soon as its row is shown (to show its
#: length, and to play from a heard number at once): a recording delivered to a staff member's
#: browser is a read, recorded once per staff member and request within this window, so an
#: inbox shown again and again does not write a row per message each time.
RECORDING_WINDOW = timedelta(hours=1)


def record_recording(
    who: StaffUser, clinic_id: uuid.UUID, patient_id: uuid.UUID, request_id: uuid.UUID, now: datetime
) -> int:
    """A recording delivered to a staff member's browser: recorded unless the same member
    had the same request's recording within `RECORDING_WINDOW` (one indexed query)."""
    recent = ReadEvent.select(ReadEvent.id).where(
        (ReadEvent.reader_id == who.id)
        & (ReadEvent.at >= as_utc(now) - RECORDING_WINDOW)
        & (ReadEvent.patient_request_id == request_id)
        & (ReadEvent.kind == "recording")
    )
    if recent.exists():
        return 0
    return record(who, clinic_id, "recording", [(patient_id, request_id)], now)


def reader_ids(who: str) -> set[uuid.UUID]:
    """The ids a breach question's `who` names: a staff user by e-mail (disabled ones too),
    an API key by its id or its service account's name (every key of that name)."""
    text = who.strip()
    ids: set[uuid.UUID] = set()
    user = StaffUser.by_email(text) if text else None
    if user is not None:
        ids.add(user.id)
    with contextlib.suppress(ValueError):
        ids.add(uuid.UUID(text))
    if text:
        ids |= {t.id for t in ApiToken.select(ApiToken.id).where(ApiToken.name == text)}
    return ids


@dataclass(frozen=True)
class Read:
    """One row of the breach question's answer, with the names an officer needs to tell the
    patient (the patient's name as it is now; empty once erased)."""

    at: datetime
    clinic: str
    reader_kind: str
    reader_name: str
    reader_id: uuid.UUID
    kind: str
    patient_id: uuid.UUID | None
    patient_name: str  # as stored (the CSV's); for one of the service's own patients, its marker too
    patient_marker: str | None
    request_id: uuid.UUID | None
    address: str | None


def reads_by(
    clinic_ids: list[uuid.UUID], who: str, since: datetime | None, until: datetime | None, limit: int | None = None
) -> list[Read]:
    """Everything `who` (`reader_ids`) read in these clinics, `since` inclusive, `until`
    exclusive, oldest first: the rows of the read trail with the patients' names."""
    ids = reader_ids(who)
    if not who.strip() or not clinic_ids:
        return []
    # By id, or by the name the reader had then (a staff account deleted since: its e-mail).
    named = ReadEvent.reader_name == who.strip()
    query = ReadEvent.select().where(
        (ReadEvent.reader_id.in_(list(ids)) | named if ids else named) & ReadEvent.clinic_id.in_(clinic_ids)
    )
    if since is not None:
        query = query.where(ReadEvent.at >= as_utc(since))
    if until is not None:
        query = query.where(ReadEvent.at < as_utc(until))
    query = query.order_by(ReadEvent.at, ReadEvent.id)
    if limit is not None:
        query = query.limit(limit)
    return _named(list(query))


def reads_of_patient(clinic_ids: list[uuid.UUID], patient_id: uuid.UUID, limit: int = 200) -> list[Read]:
    """Who read this patient's data in these clinics, newest first (the patient's page)."""
    query = (
        ReadEvent.select()
        .where((ReadEvent.patient_id == patient_id) & ReadEvent.clinic_id.in_(clinic_ids))
        .order_by(ReadEvent.at.desc(), ReadEvent.id.desc())
        .limit(limit)
    )
    return _named(list(query))


def _named(rows: list[ReadEvent]) -> list[Read]:
    patients = {
        p.id: p
        for p in Patient.select(Patient.id, Patient.first_name, Patient.last_name, Patient.phone).where(
            Patient.id.in_(list({r.patient_id for r in rows if r.patient_id}))
        )
    }
    slugs = {
        c.id: c.slug
        for c in Clinic.select(Clinic.id, Clinic.slug).where(Clinic.id.in_(list({r.clinic_id for r in rows})))
    }
    return [
        Read(
            at=r.at,
            clinic=slugs.get(r.clinic_id, str(r.clinic_id)),
            reader_kind=r.reader_kind,
            reader_name=r.reader_name,
            reader_id=r.reader_id,
            kind=r.kind,
            patient_id=r.patient_id,
            patient_name=_name(p := patients.get(r.patient_id) if r.patient_id else None),
            patient_marker=p.marker if p is not None else None,
            request_id=r.patient_request_id,
            address=r.address,
        )
        for r in rows
    ]


def _name(patient: Patient | None) -> str:
    return f"{patient.first_name} {patient.last_name}".strip() if patient is not None else ""


CSV_HEADER = (
    "at",
    "clinic",
    "reader_kind",
    "reader",
    "reader_id",
    "kind",
    "patient_id",
    "patient_name",
    "request_id",
    "address",
)


def as_csv(reads: list[Read]) -> str:
    """The rows as CSV (UTC times, ISO 8601), a header first."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_HEADER)
    for r in reads:
        writer.writerow(
            (
                iso_utc(r.at),
                r.clinic,
                r.reader_kind,
                _cell(r.reader_name),
                r.reader_id,
                r.kind,
                r.patient_id or "",
                _cell(r.patient_name),
                r.request_id or "",
                r.address or "",
            )
        )
    return out.getvalue()


def _cell(text: str) -> str:
    """A cell a spreadsheet will not run as a formula (CSV injection)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def expire(clinic: Clinic, now: datetime, batch: int) -> int:
    """One batch of the clinic's read trail past its period deleted; returns how many."""
    days = clinic.retention_reads_days if clinic.retention_reads_days is not None else Clinic.READS_DEFAULT_DAYS
    return ReadEvent.expire(clinic.id, as_utc(now) - timedelta(days=days), batch)
