"""The patient directory the API searches and imports into: organization-scoped search,
one patient's import and a bulk import.

Search is scoped to the clinic's organization when patient sharing is on, else to the
clinic; a patient without a record in the addressed clinic reads `isInClinic` false,
status `WAITING`, and no note, tags or external ids. External ids are per clinic:
matching and listing only see the addressed clinic's. Merged patients are not listed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, TypeVar

import peewee as pw

from models import Actor, ApiToken, AuditEvent, Clinic, ExternalId, Patient, PatientRecord, PatientRecordTag, Tag
from models.base import place_changes
from plumbing import json_schema
from plumbing.clock import as_utc
from plumbing.database import db, is_postgresql
from plumbing.errors import DomainError, Forbidden, Gone, Invalid, NotFound
from plumbing.keyset import Keyset
from plumbing.phones import to_e164

T = TypeVar("T")

DEFAULT_LIMIT = 50
#: What a bulk import answers for each item, in the order of the API's enumeration.
IMPORT_RESULTS = ("created", "updated", "failed")
PATIENT_ORDER = Keyset(Patient.id)  # a cursor is the id of the last patient shown
CHANGE_ORDER = Keyset(Patient.change_position)  # with `updatedSince`: the last row's place
PLACE_LOCK = 7_341_054


def patient_for_create(clinic: Clinic, patient_id: uuid.UUID) -> tuple[Patient, PatientRecord]:
    """The patient and its record here, or the API error the spec names (404, 410, 403)."""
    patient = Patient.get_or_none((Patient.id == patient_id) & (Patient.organization == clinic.organization_id))
    if patient is None:
        raise NotFound("Unknown patient.", code="PATIENT_NOT_FOUND")
    if patient.merged_into_id is not None:
        raise Gone(
            "The patient was merged into another record; use mergedInto.",
            code="PATIENT_MERGED",
            mergedInto=str(patient.survivor_id()),
        )
    record = PatientRecord.get_or_none((PatientRecord.patient == patient) & (PatientRecord.clinic == clinic))
    if record is None:
        raise Forbidden("The patient has no record in this clinic; import the patient first.")
    return patient, record


def search(
    clinic: Clinic, flt: dict[str, Any], cursor: str | None = None, limit: int = DEFAULT_LIMIT
) -> tuple[list[Patient], str | None]:
    """One page of patients (keyset on id) and the next page's cursor. `flt`: the API's
    filter (`inClinic`, `externalId`, `externalIds`, `externalIdSource`, `query`)."""
    query = Patient.select().where(
        (Patient.organization == clinic.organization_id)
        & Patient.merged_into.is_null()
        # The erased patients' documents' holder is nobody's patient (privacy/erasure.py).
        & (Patient.id != Patient.erased_id(clinic.organization_id))
    )
    if flt.get("inClinic") or not clinic.organization.patient_sharing:
        query = query.where(
            Patient.id.in_(PatientRecord.select(PatientRecord.patient).where(PatientRecord.clinic == clinic))
        )
    if "externalId" in flt or "externalIds" in flt:
        values = ([flt["externalId"]] if "externalId" in flt else []) + list(flt.get("externalIds", []))
        matches = ExternalId.select(ExternalId.patient).where(
            (ExternalId.clinic == clinic) & ExternalId.value.in_(values)
        )
        if "externalIdSource" in flt:
            matches = matches.where(ExternalId.source == flt["externalIdSource"])
        query = query.where(Patient.id.in_(matches))
    if flt.get("query", "").strip():
        query = query.where(_text_match(clinic, flt["query"].strip()))
    if "updatedSince" in flt:
        # The patients changed since then, in the order of their changes (their places:
        # models/base.py `place_changes`): none passed over while a reader pages.
        place_changes(Patient, PLACE_LOCK)
        since = as_utc(datetime.fromisoformat(flt["updatedSince"].replace("Z", "+00:00")))
        query = query.where((Patient.updated_at >= since) & Patient.change_position.is_null(False))
        rows, _ = CHANGE_ORDER.page(query, cursor, limit)
        return rows, CHANGE_ORDER.cursor(rows[-1]) if rows else cursor
    return PATIENT_ORDER.page(query, cursor, limit)


def records_here(clinic: Clinic, patients: list[Patient]) -> dict[uuid.UUID, PatientRecord]:
    """The patients' records in `clinic`, by patient (a shared patient may have none here)."""
    ids = [p.id for p in patients]
    if not ids:
        return {}
    query = PatientRecord.select().where((PatientRecord.clinic == clinic) & PatientRecord.patient.in_(ids))
    return {r.patient_id: r for r in query}


def record_tags(records: dict[uuid.UUID, PatientRecord]) -> dict[uuid.UUID, list[Tag]]:
    """The tags of each record that are not deleted, by name, by patient (one query)."""
    tags: dict[uuid.UUID, list[Tag]] = {}
    if records:
        owner = {r.id: r.patient_id for r in records.values()}
        rows = (
            PatientRecordTag.select(PatientRecordTag.record, Tag)
            .join(Tag)
            .where(PatientRecordTag.record.in_(list(owner)) & Tag.deleted_at.is_null())
            .order_by(Tag.name)
        )
        for row in rows:
            tags.setdefault(owner[row.record_id], []).append(row.tag)
    return tags


def external_ids(clinic: Clinic, patient_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[ExternalId]]:
    """The patients' external ids in `clinic` (per clinic: another clinic's are never
    shown), by patient (one query)."""
    found: dict[uuid.UUID, list[ExternalId]] = {}
    if patient_ids:
        query = (
            ExternalId.select()
            .where((ExternalId.clinic == clinic) & ExternalId.patient.in_(patient_ids))
            .order_by(ExternalId.id)
        )
        for e in query:
            found.setdefault(e.patient_id, []).append(e)
    return found


def _text_match(clinic: Clinic, text: str) -> pw.Expression:
    full_name = Patient.first_name.concat(" ").concat(Patient.last_name)
    condition = (
        full_name.contains(text)
        | Patient.last_name.concat(" ").concat(Patient.first_name).contains(text)
        | Patient.email.contains(text)
    )
    digits = re.sub(r"\D", "", text)
    if len(digits) >= 3 and re.fullmatch(r"[\d\s()+./-]+", text):
        condition |= Patient.phone.contains(digits)
        phone = to_e164(text, clinic.country)
        if phone:
            condition |= Patient.phone == phone
    ext = ExternalId.select(ExternalId.patient).where((ExternalId.clinic == clinic) & ExternalId.value.contains(text))
    return condition | Patient.id.in_(ext)


# --- import ---------------------------------------------------------------------------


def _fields(clinic: Clinic, item: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {"first_name": item["firstName"], "last_name": item["lastName"]}
    if "phone" in item:
        fields["phone"] = None
        if item["phone"]:
            fields["phone"] = to_e164(item["phone"], clinic.country)
            if fields["phone"] is None:
                raise Invalid("phone: not a phone number", param="/phone")
    if "email" in item:
        fields["email"] = item["email"] or None
    if "birthDate" in item:
        fields["birth_date"] = date.fromisoformat(item["birthDate"]) if item["birthDate"] else None
    return fields


def import_patient(
    clinic: Clinic, item: dict[str, Any], actor: ApiToken | Actor, now: datetime
) -> tuple[Patient, bool]:
    """Create the patient with a record and the external id here, or update the patient
    that already carries that external id in this clinic. Returns (patient, created).

    The unique (clinic, source, value) constraint decides a race between two imports of
    the same id: the loser's insert fails inside a savepoint and it updates instead.
    """
    fields = _fields(clinic, item)
    key = (
        (ExternalId.clinic == clinic)
        & (ExternalId.source == item.get("externalIdSource", ""))
        & (ExternalId.value == item["externalId"])
    )
    with db.atomic():
        link = ExternalId.get_or_none(key)
        if link is None:
            try:
                with db.atomic():
                    patient = Patient.create(organization=clinic.organization_id, created_at=as_utc(now), **fields)
                    PatientRecord.create(patient=patient, clinic=clinic, created_at=as_utc(now))
                    ExternalId.create(
                        clinic=clinic,
                        patient=patient,
                        source=item.get("externalIdSource", ""),
                        value=item["externalId"],
                    )
                    AuditEvent.record(actor, clinic, "patient.import", patient, {"created": True}, at=now)
                return patient, True
            except pw.IntegrityError:
                link = ExternalId.get(key)  # a concurrent import of the same id won
        Patient.update(**fields).where(Patient.id == link.patient_id).execute()
        PatientRecord.insert(
            patient=link.patient_id, clinic=clinic, created_at=as_utc(now)
        ).on_conflict_ignore().execute()
        patient = Patient.get_by_id(link.patient_id)
        AuditEvent.record(actor, clinic, "patient.import", patient, {"created": False}, at=now)
        return patient, False


def import_one(
    clinic: Clinic, item: dict[str, Any], actor: ApiToken | Actor, now: datetime, then: Callable[[Patient, bool], T]
) -> T:
    """`import_patient`, with `then` given the patient and whether it was created inside
    the import's transaction (the API's answer is read there)."""
    with db.atomic():
        patient, created = import_patient(clinic, item, actor, now)
        return then(patient, created)


# --- bulk import ----------------------------------------------------------------------

_CHUNK = 500  # rows per statement: well under PostgreSQL's 65,535 parameters
_OPTIONAL = ("phone", "email", "birth_date")  # kept as they are when an item leaves them out

# One UPDATE for a chunk of patients; a flag per optional field says whether the item
# set it (absent: the stored value stays), as `import_patient` updates only what it got.
_BULK_UPDATE_SQL = """
UPDATE "patient" AS p SET "first_name" = v.first_name, "last_name" = v.last_name,
    "phone" = CASE WHEN v.set_phone THEN v.phone ELSE p."phone" END,
    "email" = CASE WHEN v.set_email THEN v.email ELSE p."email" END,
    "birth_date" = CASE WHEN v.set_birth_date THEN v.birth_date ELSE p."birth_date" END
FROM (VALUES {rows}) AS v(id, first_name, last_name, set_phone, phone, set_email, email, set_birth_date, birth_date)
WHERE p."id" = v.id
"""
_BULK_UPDATE_ROW = "(%s::uuid, %s::text, %s::text, %s::boolean, %s::text, %s::boolean, %s::text, %s::boolean, %s::date)"


Outcome = tuple[uuid.UUID | None, str, DomainError | None]


def _answered_by_caller(outcomes: list[Outcome]) -> None:
    """The `then` of a bulk import whose caller answers nothing from inside it."""


def import_patients(
    clinic: Clinic,
    items: list[dict[str, Any]],
    actor: ApiToken | Actor,
    item_schema: dict[str, Any],
    now: datetime,
    then: Callable[[list[Outcome]], object] = _answered_by_caller,
) -> list[Outcome]:
    """`import_patient` for many items at once, with the same outcome per item, in order:
    (patient id, "created" | "updated" | "failed", the error of a failed one). Each item is
    checked against `item_schema` (the API's, which the web layer owns) first.

    Items are validated first; then, in one transaction, a few statements per 500 items
    instead of several round trips (and a savepoint) per item. An external id given
    twice creates one patient and then updates it, as importing the items one by one
    would. An external id another import creates meanwhile wins as in `import_patient`:
    our patient for it is dropped and the item updates theirs.

    One audit event for the whole import, with its counts (no event when every item
    failed validation: nothing was written, and `then` is not called: a retry would
    answer the same). `then` is given the outcomes inside the import's transaction."""
    results: list[Outcome] = []
    wanted: list[tuple[int, tuple[str, str], dict[str, Any]]] = []  # (index, key, fields)
    for index, item in enumerate(items):
        try:
            json_schema.check(item, item_schema)
            fields = _fields(clinic, item)
        except DomainError as exc:
            results.append((None, "failed", exc))
            continue
        results.append((None, "", None))
        wanted.append((index, (item.get("externalIdSource", ""), item["externalId"]), fields))
    if not wanted:
        return results
    with db.atomic():
        known = _patients_by_key(clinic, {key for _, key, _ in wanted})
        new: dict[tuple[str, str], dict[str, Any]] = {}  # key -> the row to insert
        for index, key, fields in wanted:
            if key in known:
                results[index] = (known[key], "updated", None)
            elif key in new:
                new[key].update(fields)  # a later item with the same id updates the new patient
                results[index] = (new[key]["id"], "updated", None)
            else:
                new[key] = {
                    "id": uuid.uuid4(),
                    "organization": clinic.organization_id,
                    "created_at": as_utc(now),
                    **dict.fromkeys(_OPTIONAL),
                    **fields,
                }
                results[index] = (new[key]["id"], "created", None)
        lost = _create(clinic, new)
        if lost:  # created meanwhile by another import: update theirs instead
            known.update(lost)
            for index, key, _ in wanted:
                if key in lost:
                    results[index] = (lost[key], "updated", None)
        _update(clinic, [(known[key], fields) for _, key, fields in wanted if key in known], now)
        statuses = [status for _, status, _ in results]
        AuditEvent.record(
            actor,
            clinic,
            "patient.import_bulk",
            None,
            {s: statuses.count(s) for s in ("created", "updated", "failed")},
            at=now,
        )
        then(results)
    return results


def _patients_by_key(clinic: Clinic, keys: set[tuple[str, str]]) -> dict[tuple[str, str], uuid.UUID]:
    found: dict[tuple[str, str], uuid.UUID] = {}
    values = sorted({value for _, value in keys})
    for start in range(0, len(values), _CHUNK):
        query = ExternalId.select(ExternalId.source, ExternalId.value, ExternalId.patient).where(
            (ExternalId.clinic == clinic) & ExternalId.value.in_(values[start : start + _CHUNK])
        )
        for link in query:
            if (link.source, link.value) in keys:
                found[(link.source, link.value)] = link.patient_id
    return found


def _create(clinic: Clinic, new: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], uuid.UUID]:
    """Insert the new patients, their records here and their external ids; the keys
    another import took first, with that import's patient (ours for them are deleted)."""
    rows = list(new.values())
    for start in range(0, len(rows), _CHUNK):
        patients = rows[start : start + _CHUNK]
        Patient.insert_many(patients).execute()
        PatientRecord.insert_many(
            [{"patient": row["id"], "clinic": clinic, "created_at": row["created_at"]} for row in patients]
        ).execute()
    keys = list(new)
    won: set[tuple[str, str]] = set()
    for start in range(0, len(keys), _CHUNK):
        chunk = keys[start : start + _CHUNK]
        query = ExternalId.insert_many(
            [{"clinic": clinic, "patient": new[key]["id"], "source": key[0], "value": key[1]} for key in chunk]
        ).on_conflict_ignore()
        if is_postgresql():
            won |= {(row.source, row.value) for row in query.returning(ExternalId.source, ExternalId.value).execute()}
        else:  # SQLite (bin/run): one importer at a time, nothing to lose
            query.execute()
            won |= set(chunk)
    lost_keys = set(keys) - won
    if not lost_keys:
        return {}
    Patient.delete().where(Patient.id.in_([new[key]["id"] for key in lost_keys])).execute()
    return _patients_by_key(clinic, lost_keys)


def _update(clinic: Clinic, updates: list[tuple[uuid.UUID, dict[str, Any]]], now: datetime) -> None:
    """Apply each item's fields to its patient, in item order (a later item wins), and
    give every one a record here."""
    merged: dict[uuid.UUID, dict[str, Any]] = {}
    for patient_id, fields in updates:
        merged.setdefault(patient_id, {}).update(fields)
    if not merged:
        return
    ids = list(merged)
    if is_postgresql():
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            params: list[Any] = []
            for patient_id in chunk:
                fields = merged[patient_id]
                params += [patient_id, fields["first_name"], fields["last_name"]]
                for name in _OPTIONAL:
                    params += [name in fields, fields.get(name)]
            db.execute_sql(_BULK_UPDATE_SQL.format(rows=", ".join([_BULK_UPDATE_ROW] * len(chunk))), params)
    else:
        for patient_id, fields in merged.items():
            Patient.update(**fields).where(Patient.id == patient_id).execute()
    for start in range(0, len(ids), _CHUNK):
        PatientRecord.insert_many(
            [{"patient": i, "clinic": clinic, "created_at": as_utc(now)} for i in ids[start : start + _CHUNK]]
        ).on_conflict_ignore().execute()
