"""Onboarding: create or update an organization from one JSON document, atomically.

The whole document is validated first (structure by its JSON Schema, `onboarding/document_schema.py`,
checked by `plumbing/json_schema.py`; then meaning: time zones, countries, phones, languages,
references); the first problem is reported with the path of the bad field and nothing is
written. Writing happens in one transaction and only touches rows whose values differ, so
running the same file twice changes nothing (docs/operations.md, "Onboarding a clinic").

Identity: every entity gets a deterministic UUID (uuid5 of its natural key) unless the
file gives an `id`, so references and the ids handed to integrators stay stable.
Configuration collections (office hours, a calendar's vacations, a request type's
default tags) are replaced by what the file says; patient data (records, tags,
external ids) is only added or updated, never removed, because the API adds to it too.

The staff logins (`users`) are `onboarding/users.py`'s; the error, the stable ids and the
row writer that counts changes are `onboarding/base.py`'s.
"""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import holidays
import peewee as pw

from models import (
    Calendar,
    Clinic,
    ExternalId,
    OfficeHours,
    Organization,
    Patient,
    PatientRecord,
    PatientRecordTag,
    RequestType,
    RequestTypeDefaultTag,
    Tag,
    Vacation,
)

# OnboardingError and stable_id are this module's too: callers import them from here.
from onboarding.base import OnboardingError, RowWriter, stable_id, unique
from onboarding.document_schema import SCHEMA
from onboarding.users import plan_users, write_user
from plumbing import crypto, json_schema
from plumbing.clock import as_utc
from plumbing.crypto import Keys
from plumbing.database import db
from plumbing.phones import to_e164
from switchboard.office_hours import WEEKDAYS
from triage import clinic_words as triage
from triage import vocabulary
from voicemail.transcription import whisper_languages


def _hhmm(text: str) -> time:
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


def _instant(text: str, tz: ZoneInfo, *, end: bool, where: str) -> datetime:
    """A date is a whole local day (an end date is inclusive); a date-time needs an offset."""
    if len(text) == 10:
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise OnboardingError(where, f"not a date: {text!r}") from None
        if end:
            day += timedelta(days=1)
        return as_utc(datetime.combine(day, time(0), tzinfo=tz))
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OnboardingError(where, f"not a date or an ISO 8601 date-time: {text!r}") from None
    if moment.tzinfo is None:
        raise OnboardingError(where, "a date-time needs a UTC offset (or give a plain date)")
    return as_utc(moment)


def _known_language(code: str, where: str) -> None:
    if code not in whisper_languages():
        raise OnboardingError(
            where,
            f"{code!r} is not a language code whisper.cpp knows "
            "(lower-case ISO 639-1, such as 'cs', 'sk', 'uk', 'en', 'de')",
        )


def _words(words: dict[str, list[str]], at: str) -> dict[str, list[str]]:
    """Words per language as stored: known languages, lines that can be read, cleaned."""
    out = {}
    for code, lines in words.items():
        _known_language(code, f"{at}.{code}")
        for j, line in enumerate(lines):
            problem = vocabulary.problem(line)
            if problem is not None:
                raise OnboardingError(f"{at}.{code}[{j}]", problem)
        out[code] = vocabulary.clean(lines)
    return out


def _languages(codes: list[str] | None, language: str | None, at: str) -> str | None:
    """`languages` as stored (a JSON array, in the file's order), or None when not set.
    Checks `language` too: the transcriber would refuse a code it does not know."""
    if language is not None:
        _known_language(language, f"{at}.language")
    if codes is None:
        return None
    for j, code in enumerate(codes):
        _known_language(code, f"{at}.languages[{j}]")
        if code in codes[:j]:
            raise OnboardingError(f"{at}.languages[{j}]", f"duplicate {code!r}")
    # The transcriber detects among `languages` whenever they are set, so a `language`
    # outside them would silently never be used.
    if language is not None and language not in codes:
        raise OnboardingError(f"{at}.language", f"{language!r} is not among languages {codes}")
    return json.dumps(codes)


class _Plan:
    """The validated document, resolved to rows' values, ready to write."""

    def __init__(self, doc: dict[str, Any]) -> None:
        error = json_schema.first_error(doc, SCHEMA)
        if error is not None:
            raise OnboardingError(json_schema.field_path(error.absolute_path, "(document)"), error.message)
        self.doc = doc
        org = doc["organization"]
        self.org_id = stable_id("organization", org["slug"])
        existing = Organization.get_or_none(Organization.slug == org["slug"])
        if existing is not None:
            self.org_id = existing.id
        self.clinics = [self._clinic(i, c) for i, c in enumerate(doc["clinics"])]
        unique([c["slug"] for c in doc["clinics"]], "clinics", "slug")
        self.patients = self._patients(doc.get("patients", []))
        self.users = plan_users(doc.get("users", []), self.clinics, self.org_id)

    def _own(self, model: type[pw.Model], text: str, at: str) -> uuid.UUID:
        """An explicit id from the document, refused when its row belongs to another
        organization: upserting it would move that tenant's row into this one."""
        key = uuid.UUID(text)
        if model is Patient:
            owner = Patient.select(Patient.organization).where(Patient.id == key).scalar()
        else:
            owner = model.select(Clinic.organization).join(Clinic).where(model._meta.primary_key == key).scalar()
        if owner is not None and owner != self.org_id:
            raise OnboardingError(at, f"{key} belongs to another organization")
        return key

    def _clinic(self, i: int, c: dict[str, Any]) -> dict[str, Any]:
        at = f"clinics[{i}]"
        try:
            tz = ZoneInfo(c["timezone"])
        except (ZoneInfoNotFoundError, ValueError):
            raise OnboardingError(f"{at}.timezone", f"unknown IANA timezone {c['timezone']!r}") from None
        supported = holidays.list_supported_countries()
        if c["country"] not in supported:
            raise OnboardingError(f"{at}.country", f"no public holidays known for {c['country']!r}")
        if c.get("subdivision") and c["subdivision"] not in supported[c["country"]]:
            raise OnboardingError(f"{at}.subdivision", f"unknown subdivision {c['subdivision']!r} of {c['country']}")
        clash = Clinic.get_or_none(Clinic.slug == c["slug"])
        if clash is not None and clash.organization_id != self.org_id:
            raise OnboardingError(f"{at}.slug", "belongs to another organization")
        clinic_id = clash.id if clash else stable_id("clinic", c["slug"])

        hours = []
        for j, h in enumerate(c.get("officeHours", [])):
            opens, closes = _hhmm(h["opens"]), _hhmm(h["closes"])
            if opens == closes:
                raise OnboardingError(f"{at}.officeHours[{j}].closes", "equals opens")
            hours.append((WEEKDAYS.index(h["weekday"]) + 1, opens, closes, h.get("weeks", "every")))

        tags = {}
        for j, t in enumerate(c.get("tags", [])):
            key = (t["type"], t["name"])
            if key in tags:
                raise OnboardingError(f"{at}.tags[{j}].name", f"duplicate {t['type']} tag {t['name']!r}")
            tags[key] = {
                "id": self._own(Tag, t["id"], f"{at}.tags[{j}].id")
                if t.get("id")
                else stable_id("tag", c["slug"], *key),
                "type": t["type"],
                "name": t["name"],
                "color": t.get("color"),
                "deleted": bool(t.get("deleted", False)),
            }

        calendars = []
        unique([k["name"] for k in c.get("calendars", [])], f"{at}.calendars", "name")
        for j, k in enumerate(c.get("calendars", [])):
            cal_id = (
                self._own(Calendar, k["id"], f"{at}.calendars[{j}].id")
                if k.get("id")
                else stable_id("calendar", c["slug"], k["name"])
            )
            vacations = []
            for v_i, v in enumerate(k.get("vacations", [])):
                where = f"{at}.calendars[{j}].vacations[{v_i}]"
                start = _instant(v["start"], tz, end=False, where=f"{where}.start")
                end = _instant(v["end"], tz, end=True, where=f"{where}.end")
                if end <= start:
                    raise OnboardingError(f"{where}.end", "is not after start")
                vacations.append(
                    {
                        "id": stable_id("vacation", str(cal_id), v.get("name", ""), start.isoformat(), end.isoformat()),
                        "name": v.get("name", ""),
                        "starts_at": start,
                        "ends_at": end,
                        "applies_to_switchboard": v.get("switchboard", True),
                    }
                )
            calendars.append(
                {
                    "id": cal_id,
                    "name": k["name"],
                    "ignore_holidays": k.get("ignoreHolidays", False),
                    "vacations": vacations,
                }
            )

        types = []
        unique([t["ecrfId"] for t in c.get("requestTypes", [])], f"{at}.requestTypes", "ecrfId")
        for j, t in enumerate(c.get("requestTypes", [])):
            default_tags = []
            for n, name in enumerate(t.get("defaultPatientTags", [])):
                if ("patient", name) not in tags:
                    raise OnboardingError(
                        f"{at}.requestTypes[{j}].defaultPatientTags[{n}]",
                        f"no patient tag {name!r} in this clinic's tags",
                    )
                default_tags.append(tags[("patient", name)]["id"])
            words: dict[str, Any] = {}
            if "transcriptWords" in t:  # absent: left as they are
                setting = t["transcriptWords"]
                if setting is not None:
                    own = _words(setting.get("words") or {}, f"{at}.requestTypes[{j}].transcriptWords.words")
                    setting = {k: v for k, v in (("preset", setting.get("preset")), ("words", own)) if v}
                words["transcript_words"] = json.dumps(setting, ensure_ascii=False) if setting else None
            types.append(
                {
                    **words,
                    "id": (
                        self._own(RequestType, t["id"], f"{at}.requestTypes[{j}].id")
                        if t.get("id")
                        else stable_id("request-type", c["slug"], t["ecrfId"])
                    ),
                    **RequestType.columns_of(t),
                    "active": t.get("active", True),
                    "default_tags": default_tags,
                }
            )

        return {
            "id": clinic_id,
            "slug": c["slug"],
            "name": c["name"],
            "timezone": c["timezone"],
            "country": c["country"],
            "subdivision": c.get("subdivision"),
            "language": c.get("language"),
            "languages": _languages(c.get("languages"), c.get("language"), at),
            "missed_call_requests": c.get("missedCallRequests", True),
            # Absent: left as it is (the console's admins decide it; a file that does not
            # mention it must not turn a clinic's two-factor requirement off).
            "two_factor_required": c.get("twoFactorRequired"),
            "urgency_words": (
                json.dumps(_words(c["urgencyWords"], f"{at}.urgencyWords"), ensure_ascii=False)
                if c.get("urgencyWords") is not None
                else None
            ),
            "urgency_words_given": "urgencyWords" in c,
            "urgent_notices": _urgent_notices(c.get("urgentNotices"), at),
            "hours": hours,
            "tags": tags,
            "calendars": calendars,
            "types": types,
            "switchboard": c.get("switchboard"),
            "retention": c.get("retention"),
        }

    def _patients(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        clinics = {c["slug"]: c for c in self.clinics}
        ids: dict[str, uuid.UUID] = {}
        for i, p in enumerate(items):
            pid = (
                self._own(Patient, p["id"], f"patients[{i}].id")
                if p.get("id")
                else stable_id("patient", self.doc["organization"]["slug"], p["key"])
            )
            for ref in filter(None, (p.get("key"), p.get("id"))):
                if ref in ids:
                    raise OnboardingError(f"patients[{i}]", f"duplicate patient {ref!r}")
                ids[ref] = pid
        out = []
        for i, p in enumerate(items):
            at = f"patients[{i}]"
            region = (
                clinics[p["records"][0]["clinic"]]["country"]
                if p.get("records") and p["records"][0]["clinic"] in clinics
                else self.clinics[0]["country"]
                if self.clinics
                else "US"
            )
            phone = None
            if p.get("phone"):
                phone = to_e164(p["phone"], region)
                if phone is None:
                    raise OnboardingError(f"{at}.phone", f"not a phone number: {p['phone']!r}")
            merged_into = None
            if p.get("mergedInto"):
                merged_into = ids.get(p["mergedInto"])
                if merged_into is None:
                    raise OnboardingError(f"{at}.mergedInto", f"no patient {p['mergedInto']!r} in this file")
                if merged_into == ids[p.get("key") or p["id"]]:
                    raise OnboardingError(f"{at}.mergedInto", "a patient cannot be merged into itself")
            records = []
            for j, r in enumerate(p.get("records", [])):
                clinic = clinics.get(r["clinic"])
                if clinic is None:
                    raise OnboardingError(f"{at}.records[{j}].clinic", f"no clinic {r['clinic']!r} in this file")
                tag_ids = []
                for n, name in enumerate(r.get("tags", [])):
                    if ("patient", name) not in clinic["tags"]:
                        raise OnboardingError(
                            f"{at}.records[{j}].tags[{n}]", f"no patient tag {name!r} in {r['clinic']}"
                        )
                    tag_ids.append(clinic["tags"][("patient", name)]["id"])
                records.append(
                    {
                        "clinic_id": clinic["id"],
                        "status": r.get("status", "ACTIVE"),
                        "note": r.get("note", ""),
                        "tags": tag_ids,
                        "external_ids": [(e.get("source", ""), e["id"]) for e in r.get("externalIds", [])],
                    }
                )
            birth = date.fromisoformat(p["birthDate"]) if p.get("birthDate") else None
            out.append(
                {
                    "id": ids[p.get("key") or p["id"]],
                    "first_name": p.get("firstName", ""),
                    "last_name": p.get("lastName", ""),
                    "phone": phone,
                    "email": p.get("email"),
                    "birth_date": birth,
                    "merged_into": merged_into,
                    "records": records,
                }
            )
        # Merge chains must end: a cycle would make the survivor undefined.
        links = {p["id"]: p["merged_into"] for p in out if p["merged_into"]}
        for start in links:
            seen, cur = {start}, links[start]
            while cur in links:
                if cur in seen:
                    raise OnboardingError("patients", "mergedInto links form a cycle")
                seen.add(cur)
                cur = links[cur]
        return out


def onboard(document: dict[str, Any], *, secret_key: Keys, now: datetime) -> str:
    """Validate `document`, then write it in one transaction, at `now`. Returns a one-line
    summary. (What the row caches hold is forgotten as the writes commit: plumbing/row_cache.py.)"""
    return _onboard(document, secret_key, now)


def _onboard(document: dict[str, Any], secret_key: Keys, now: datetime) -> str:
    with db.atomic():
        plan = _Plan(document)
        w = RowWriter(secret_key, now)
        org = document["organization"]
        w.upsert(
            Organization,
            plan.org_id,
            {"slug": org["slug"], "name": org["name"], "patient_sharing": org.get("patientSharing", False)},
        )
        for c in plan.clinics:
            words = triage.vocabulary_of(c["id"]).fingerprint
            _write_clinic(w, plan.org_id, c)
            if triage.vocabulary_of(c["id"]).fingerprint != words:
                # The open voice messages' suggestions and flags, read again in the new words.
                triage.refresh(c["id"])
        for p in plan.patients:  # all rows first, so merged_into always points at one
            w.upsert(
                Patient,
                p["id"],
                {
                    "organization": plan.org_id,
                    "first_name": p["first_name"],
                    "last_name": p["last_name"],
                    "phone": p["phone"],
                    "email": p["email"],
                    "birth_date": p["birth_date"],
                },
            )
        for p in plan.patients:
            w.upsert(Patient, p["id"], {"merged_into": p["merged_into"]})
            for r in p["records"]:
                record = PatientRecord.get_or_none(
                    (PatientRecord.patient == p["id"]) & (PatientRecord.clinic == r["clinic_id"])
                )
                rid = record.id if record else stable_id("record", str(p["id"]), str(r["clinic_id"]))
                w.upsert(
                    PatientRecord,
                    rid,
                    {"patient": p["id"], "clinic": r["clinic_id"], "status": r["status"], "note": r["note"]},
                )
                for tag_id in r["tags"]:
                    w.ensure(PatientRecordTag, record=rid, tag=tag_id)
                for source, value in r["external_ids"]:
                    owner = ExternalId.get_or_none(
                        (ExternalId.clinic == r["clinic_id"])
                        & (ExternalId.source == source)
                        & (ExternalId.value == value)
                    )
                    if owner is not None and owner.patient_id != p["id"]:
                        raise OnboardingError(
                            "patients", f"external id {source}:{value} already belongs to another patient"
                        )
                    w.ensure(ExternalId, clinic=r["clinic_id"], patient=p["id"], source=source, value=value)
        for u in plan.users:
            write_user(w, u, [c["id"] for c in plan.clinics])
        return (
            f"onboarded {org['slug']}: {len(plan.clinics)} clinic(s), {len(plan.patients)} patient(s), "
            f"{len(plan.users)} user(s), {w.changes} change(s)"
        )


#: The file's `urgentNotices.when` and the clinic's column.
URGENT_NOTICE_WHEN = {"outsideOfficeHours": "closed", "always": "always"}


def _urgent_notices(given: dict[str, Any] | None, at: str) -> dict[str, Any]:
    """The urgent notices' columns the file sets (those it leaves out stay as they are)."""
    values: dict[str, Any] = {}
    if not given:
        return values
    if "staff" in given:
        values["urgent_notice_staff"] = given["staff"]
    if "onCallEmail" in given:
        email = (given["onCallEmail"] or "").strip().lower()
        local, _, domain = email.partition("@")
        if email and (not local or "." not in domain or any(ch.isspace() for ch in email)):
            raise OnboardingError(f"{at}.urgentNotices.onCallEmail", f"not an e-mail address: {email!r}")
        values["urgent_notice_email"] = email or None
    if "when" in given:
        values["urgent_notice_when"] = URGENT_NOTICE_WHEN[given["when"]]
    return values


#: The file's retention keys and the clinic's columns.
RETENTION_COLUMNS = {
    "resolvedCallRequestsDays": "retention_call_requests_days",
    "callsWithoutRequestDays": "retention_calls_days",
    "auditDetailsDays": "retention_audit_details_days",
    "signedDocumentsDays": "retention_documents_days",
    "resolvedApiRequestsDays": "retention_api_requests_days",
    "readTrailDays": "retention_reads_days",
}


def _retention(given: dict[str, Any] | None, current: Clinic | None) -> dict[str, Any]:
    """The retention columns to write: what the file gives (null: kept); for a key it leaves
    out, the clinic's own, or for a new clinic the defaults. A file that says nothing of
    retention never changes what an existing clinic deletes (nor starts deleting)."""
    given = given or {}
    values = {}
    for key, column in RETENTION_COLUMNS.items():
        if key in given:
            values[column] = given[key]
        elif current is None:
            values[column] = Clinic.RETENTION_DEFAULTS[column]
    return values


def _write_clinic(w: RowWriter, org_id: uuid.UUID, c: dict[str, Any]) -> None:
    values = {
        k: c[k]
        for k in ("slug", "name", "timezone", "country", "subdivision", "language", "languages", "missed_call_requests")
    }
    if c["two_factor_required"] is not None:
        values["two_factor_required"] = c["two_factor_required"]
    if c["urgency_words_given"]:
        values["urgency_words"] = c["urgency_words"]
    values |= c["urgent_notices"]
    values["organization"] = org_id
    current = Clinic.get_or_none(Clinic.id == c["id"])
    values |= _retention(c["retention"], current)
    sb = c["switchboard"]
    if sb is None:
        values |= {
            "platform_api_url": None,
            "platform_username": None,
            "platform_password_encrypted": None,
            "platform_source_markers": None,
        }
    else:
        markers = [word.strip().lower() for word in sb.get("sourceMarkers", []) if word.strip()]
        values |= {
            "platform_api_url": sb["apiUrl"],
            "platform_username": sb["username"],
            "platform_source_markers": json.dumps(markers) if markers else None,
        }
        stored = current.platform_password_encrypted if current else None
        try:
            same = stored is not None and crypto.decrypt(stored, w.secret_key) == sb["password"]
        except crypto.InvalidToken:
            same = False  # encrypted under another SECRET_KEY: re-encrypt
        if not same:
            values["platform_password_encrypted"] = crypto.encrypt(sb["password"], w.secret_key)
    w.upsert(Clinic, c["id"], values)

    w.replace(
        OfficeHours,
        OfficeHours.clinic == c["id"],
        set(c["hours"]),
        ("weekday", "opens", "closes", "weeks"),
        {"clinic": c["id"]},
    )
    for t in c["tags"].values():
        existing = Tag.get_or_none(Tag.id == t["id"])
        deleted_at = None
        if t["deleted"]:
            deleted_at = existing.deleted_at if existing and existing.deleted_at else w.now
        w.upsert(
            Tag,
            t["id"],
            {"clinic": c["id"], "type": t["type"], "name": t["name"], "color": t["color"], "deleted_at": deleted_at},
        )
    for k in c["calendars"]:
        w.upsert(Calendar, k["id"], {"clinic": c["id"], "name": k["name"], "ignore_holidays": k["ignore_holidays"]})
        wanted = {v["id"] for v in k["vacations"]}
        for row in Vacation.select().where(
            (Vacation.calendar == k["id"]) & Vacation.id.not_in(list(wanted) or [uuid.UUID(int=0)])
        ):
            w.changes += 1
            row.delete_instance()
        for v in k["vacations"]:
            w.upsert(
                Vacation,
                v["id"],
                {
                    "calendar": k["id"],
                    "name": v["name"],
                    "starts_at": v["starts_at"],
                    "ends_at": v["ends_at"],
                    "applies_to_switchboard": v["applies_to_switchboard"],
                },
            )
    for t in c["types"]:
        fields = {k: v for k, v in t.items() if k not in ("id", "default_tags")}
        w.upsert(RequestType, t["id"], {"clinic": c["id"], **fields})
        w.replace(
            RequestTypeDefaultTag,
            RequestTypeDefaultTag.request_type == t["id"],
            {(tag_id,) for tag_id in t["default_tags"]},
            ("tag",),
            {"request_type": t["id"]},
        )
