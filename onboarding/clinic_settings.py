"""A clinic's settings changed from the console, through onboarding itself.

One validator, not two: every change reads the clinic back as an onboarding document
(`clinic_document`), edits that document, and writes it with the onboarding writer
(`onboarding/writer.py`), so the schema, the meaning checks (time zones, languages,
references, "closes equals opens", ...) and the cache invalidation are exactly the
onboarding file's. The change and its audit event commit together or not at all.

A change names what it edits by the row's id; a row of another clinic is `NotFound`.
Errors are `SettingsError`: the onboarding error's path, relative to the clinic
("officeHours[2].closes"), and its message.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from models import (
    Actor,
    AuditEvent,
    Calendar,
    Clinic,
    OfficeHours,
    Organization,
    RequestType,
    RequestTypeDefaultTag,
    Tag,
    Vacation,
)
from onboarding.writer import RETENTION_COLUMNS, URGENT_NOTICE_WHEN, OnboardingError, onboard
from plumbing import crypto
from plumbing.crypto import Keys
from plumbing.database import db, is_postgresql
from switchboard.office_hours import WEEKDAYS

_PREFIX = "clinics[0]."


class SettingsError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


class NotFound(LookupError):
    """The row named is not this clinic's (or does not exist)."""


def _iso(moment: datetime) -> str:
    return moment.isoformat() + "+00:00"  # stored naive UTC


def clinic_document(clinic: Clinic, secret_key: Keys) -> dict[str, Any]:
    """The clinic's configuration as the onboarding document that would write it as it is
    (its organization and this clinic only; no patients: onboarding never removes them)."""
    org = Organization.get_by_id(clinic.organization_id)
    tags = list(Tag.select().where(Tag.clinic == clinic).order_by(Tag.type, Tag.name))
    tag_names = {t.id: t.name for t in tags}
    calendars = list(Calendar.select().where(Calendar.clinic == clinic).order_by(Calendar.name))
    vacations: dict[uuid.UUID, list[dict[str, Any]]] = {k.id: [] for k in calendars}
    for v in (
        Vacation.select().join(Calendar).where(Calendar.clinic == clinic).order_by(Vacation.starts_at, Vacation.id)
    ):
        vacations[v.calendar_id].append(
            {
                "name": v.name,
                "start": _iso(v.starts_at),
                "end": _iso(v.ends_at),
                "switchboard": v.applies_to_switchboard,
            }
        )
    types = list(RequestType.select().where(RequestType.clinic == clinic).order_by(RequestType.name))
    defaults: dict[uuid.UUID, list[str]] = {t.id: [] for t in types}
    for d in RequestTypeDefaultTag.select().join(RequestType).where(RequestType.clinic == clinic):
        if d.tag_id in tag_names:
            defaults[d.request_type_id].append(tag_names[d.tag_id])
    c: dict[str, Any] = {
        "slug": clinic.slug,
        "name": clinic.name,
        "timezone": clinic.timezone,
        "country": clinic.country,
        "subdivision": clinic.subdivision,
        "language": clinic.language,
        "languages": clinic.language_list or None,
        "missedCallRequests": clinic.missed_call_requests,
        "twoFactorRequired": clinic.two_factor_required,
        "retention": {key: getattr(clinic, column) for key, column in RETENTION_COLUMNS.items()},
        "officeHours": [
            {
                "weekday": WEEKDAYS[h.weekday - 1],
                "opens": h.opens.strftime("%H:%M"),
                "closes": h.closes.strftime("%H:%M"),
                "weeks": h.weeks,
            }
            for h in OfficeHours.select().where(OfficeHours.clinic == clinic).order_by(OfficeHours.id)
        ],
        "calendars": [
            {"id": str(k.id), "name": k.name, "ignoreHolidays": k.ignore_holidays, "vacations": vacations[k.id]}
            for k in calendars
        ],
        "tags": [
            {"id": str(t.id), "type": t.type, "name": t.name, "color": t.color, "deleted": t.deleted_at is not None}
            for t in tags
        ],
        "requestTypes": [
            {
                "id": str(t.id),
                **t.public_fields(),
                "active": t.active,
                "defaultPatientTags": sorted(defaults[t.id]),
                **({"transcriptWords": json.loads(t.transcript_words)} if t.transcript_words else {}),
            }
            for t in types
        ],
    }
    if clinic.urgency_words is not None:
        c["urgencyWords"] = json.loads(clinic.urgency_words)
    c["urgentNotices"] = {
        "staff": clinic.urgent_notice_staff,
        "onCallEmail": clinic.urgent_notice_email,
        "when": next(k for k, v in URGENT_NOTICE_WHEN.items() if v == clinic.urgent_notice_when),
    }
    if clinic.platform_api_url:
        try:
            password = crypto.decrypt(clinic.platform_password_encrypted or "", secret_key)
        except crypto.InvalidToken:
            # Written under another SECRET_KEY: only the operator's onboarding file can say it again.
            raise SettingsError(
                "switchboard.password",
                "cannot be read with this SECRET_KEY; the operator must onboard the clinic's switchboard again",
            ) from None
        c["switchboard"] = {
            "apiUrl": clinic.platform_api_url,
            "username": clinic.platform_username,
            "password": password,
        }
        if clinic.platform_source_markers:
            c["switchboard"]["sourceMarkers"] = json.loads(clinic.platform_source_markers)
    return {"organization": {"slug": org.slug, "name": org.name, "patientSharing": org.patient_sharing}, "clinics": [c]}


class ClinicSettings:
    """The settings of one clinic, changed by one console user at `now`."""

    def __init__(self, clinic: Clinic, actor: Actor, secret_key: Keys, now: datetime) -> None:
        self.clinic = clinic
        self.actor = actor
        self.secret_key = secret_key
        self.now = now

    def _change(
        self,
        action: str,
        edit: Callable[[dict[str, Any]], None],
        target: tuple[str, object] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Read the clinic as a document, `edit` its clinic, write it through onboarding
        and record `action`, all in one transaction."""
        try:
            with db.atomic():
                if is_postgresql():
                    # Two admins at once: each change reads the whole clinic and writes it back,
                    # so they take turns or the later one would undo the earlier.
                    db.execute_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"settings:{self.clinic.id}",))
                document = clinic_document(self.clinic, self.secret_key)
                edit(document["clinics"][0])
                onboard(document, secret_key=self.secret_key, now=self.now)
                AuditEvent.record(self.actor, self.clinic, action, target, details, at=self.now)
        except OnboardingError as exc:
            path = exc.path.removeprefix(_PREFIX) if exc.path.startswith(_PREFIX) else exc.path
            raise SettingsError(path, str(exc).split(": ", 1)[-1]) from None
        self.clinic = Clinic.get_by_id(self.clinic.id)

    def _own(self, model: Any, row_id: Any, *where: Any) -> Any:
        try:
            key = uuid.UUID(str(row_id)) if model is not OfficeHours else int(row_id)
        except (TypeError, ValueError):
            raise NotFound(row_id) from None
        if isinstance(key, int) and not 0 < key < 2**31:  # beyond the column: nobody's row
            raise NotFound(row_id)
        query = model.select().where(model._meta.primary_key == key, *where)
        if model in (OfficeHours, Calendar, Tag, RequestType):
            query = query.where(model.clinic == self.clinic)
        elif model is Vacation:
            query = query.join(Calendar).where(Calendar.clinic == self.clinic)
        row = query.first()
        if row is None:
            raise NotFound(row_id)
        return row

    # Office hours

    def add_office_hours(self, weekday: str, opens: str, closes: str, weeks: str) -> None:
        row = {"weekday": weekday, "opens": opens, "closes": closes, "weeks": weeks}
        self._change("settings.office_hours.add", lambda c: c["officeHours"].append(row), details=row)

    def remove_office_hours(self, row_id: Any) -> None:
        h = self._own(OfficeHours, row_id)
        row = {
            "weekday": WEEKDAYS[h.weekday - 1],
            "opens": h.opens.strftime("%H:%M"),
            "closes": h.closes.strftime("%H:%M"),
            "weeks": h.weeks,
        }

        def edit(c: dict[str, Any]) -> None:
            c["officeHours"] = [r for r in c["officeHours"] if r != row]

        self._change("settings.office_hours.remove", edit, details=row)

    # Calendars and vacations

    def save_calendar(self, calendar_id: Any | None, name: str, ignore_holidays: bool) -> None:
        fields = {"name": name, "ignoreHolidays": ignore_holidays}
        if calendar_id is None:
            self._change("settings.calendar.create", lambda c: c["calendars"].append(fields), details={"name": name})
            return
        calendar = self._own(Calendar, calendar_id)
        self._change(
            "settings.calendar.update",
            _update_entry("calendars", str(calendar.id), fields),
            ("calendar", calendar.id),
            fields,
        )

    def add_vacation(self, calendar_id: Any, name: str, start: str, end: str, switchboard: bool) -> None:
        calendar = self._own(Calendar, calendar_id)
        tz = ZoneInfo(self.clinic.timezone)
        vacation = {
            "name": name,
            "start": local_instant(start, tz),
            "end": local_instant(end, tz),
            "switchboard": switchboard,
        }

        def edit(c: dict[str, Any]) -> None:
            entry = next(k for k in c["calendars"] if k["id"] == str(calendar.id))
            entry["vacations"].append(vacation)

        self._change(
            "settings.vacation.add",
            edit,
            ("calendar", calendar.id),
            {"name": name, "start": vacation["start"], "end": vacation["end"], "switchboard": switchboard},
        )

    def remove_vacation(self, vacation_id: Any) -> None:
        v = self._own(Vacation, vacation_id)
        gone = {
            "name": v.name,
            "start": _iso(v.starts_at),
            "end": _iso(v.ends_at),
            "switchboard": v.applies_to_switchboard,
        }

        def edit(c: dict[str, Any]) -> None:
            entry = next(k for k in c["calendars"] if k["id"] == str(v.calendar_id))
            entry["vacations"] = [x for x in entry["vacations"] if x != gone]

        self._change("settings.vacation.remove", edit, ("calendar", v.calendar_id), gone)

    # Calls

    def set_retention(self, days: dict[str, int | None]) -> None:
        """The clinic's retention (the onboarding file's `retention` keys; None: kept)."""
        fields = {key: days[key] for key in RETENTION_COLUMNS if key in days}
        self._change("settings.retention.update", lambda c: c["retention"].update(fields), details=fields)

    def set_calls(self, missed_call_requests: bool, languages: list[str]) -> None:
        fields = {"missedCallRequests": missed_call_requests, "languages": languages or None}
        self._change("settings.calls.update", lambda c: c.update(fields), details=fields)

    def set_urgency_words(self, words: dict[str, list[str]] | None) -> None:
        """The words that may mean a voice message is urgent, per language; None: the shipped
        ones. The open messages' flags are read again in them (onboarding's writer)."""
        details: dict[str, Any] = (
            {"shipped": True} if words is None else {"shipped": False, "counts": {k: len(v) for k, v in words.items()}}
        )
        self._change("settings.urgency_words.update", lambda c: c.update({"urgencyWords": words}), details=details)

    def set_urgent_notices(self, staff: bool, on_call_email: str, when: str) -> None:
        """Who is e-mailed of a message flagged "may be urgent" (its opted-in staff, an
        on-call address) and when ("outsideOfficeHours", "always")."""
        fields = {"staff": staff, "onCallEmail": on_call_email.strip() or None, "when": when}
        details = {"staff": staff, "onCallAddress": bool(fields["onCallEmail"]), "always": when == "always"}
        self._change("settings.urgent_notices.update", lambda c: c["urgentNotices"].update(fields), details=details)

    # Staff

    def set_two_factor(self, required: bool) -> None:
        """Whether the clinic's staff must log in with a second factor."""
        fields = {"twoFactorRequired": required}
        self._change("settings.two_factor.update", lambda c: c.update(fields), details=fields)

    # Request types and patient tags

    def add_patient_tag(self, name: str, color: str | None) -> None:
        tag = {"type": "patient", "name": name, "color": color or None}
        self._change("settings.tag.create", lambda c: c["tags"].append(tag), details={"name": name})

    def save_request_type(self, type_id: Any | None, fields: dict[str, Any], default_tag_ids: list[str]) -> None:
        """`fields` in the onboarding document's names (ecrfId, name, requiresReservation, ...);
        the default tags by id, among the clinic's patient tags."""
        names = []
        for tag_id in default_tag_ids:
            names.append(self._own(Tag, tag_id, Tag.type == "patient").name)
        entry = {**fields, "defaultPatientTags": names}
        if type_id is None:
            self._change(
                "settings.request_type.create",
                lambda c: c["requestTypes"].append(entry),
                details={"ecrfId": fields.get("ecrfId"), "name": fields.get("name")},
            )
            return
        request_type = self._own(RequestType, type_id)
        self._change(
            "settings.request_type.update",
            _update_entry("requestTypes", str(request_type.id), entry),
            ("request_type", request_type.id),
            {"ecrfId": fields.get("ecrfId"), "name": fields.get("name")},
        )


def _update_entry(collection: str, entry_id: str, fields: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(c: dict[str, Any]) -> None:
        next(e for e in c[collection] if e["id"] == entry_id).update(fields)

    return edit


#: A date as Czech pages write it ("24. 12. 2026", "24.12.2026"), with a time or without.
_CZECH_DATE = re.compile(r"^(\d{1,2})\.\s*(\d{1,2})\.\s*(\d{4})(?:\s+(\d{1,2}):(\d{2}))?$")


def as_iso(text: str) -> str:
    """A form's date or date and time as ISO 8601: typed the way the pages show it
    ("24. 12. 2026", "24. 12. 2026 8:00") or as ISO already (then as it is)."""
    text = " ".join(text.replace("\u00a0", " ").split())
    czech = _CZECH_DATE.match(text)
    if czech is None:
        return text
    day, month, year, hour, minute = czech.groups()
    date_part = f"{year}-{int(month):02d}-{int(day):02d}"
    return date_part if hour is None else f"{date_part} {int(hour):02d}:{minute}"


def local_instant(text: str, tz: ZoneInfo) -> str:
    """A form's date ("24. 12. 2026" or "2026-12-24") as an ISO date, or its local date and
    time ("24. 12. 2026 8:00", "2026-12-24T08:00", "2026-12-24 08:00") with the clinic's UTC
    offset, as the onboarding document takes it. Anything else is passed on for the
    onboarding validator to refuse."""
    text = as_iso(text)
    if len(text) <= 10:
        return text
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return moment.isoformat()


def local_moment(text: str, tz: ZoneInfo) -> datetime | None:
    """A form's local date and time in the clinic's timezone, aware; None if unreadable."""
    try:
        moment = datetime.fromisoformat(as_iso(text))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=tz)
