"""The audit trail in words, for the clinic's admins (the audit page) and for the request
page's history: each event's verb, who made it (a staff user by name, the e-mail in a
tooltip; an API key by its service account; the operator's command line), what it changed
(named, with a link to its page where there is one) and its details as named fields with
values in words, in the user's language and the clinic's time zone. The trail itself keeps
the raw values: `manage.py audit` prints them.

Everything an action says is an entry in `ACTIONS`: its verb, the detail fields it shows
(each with its label and its kind of value) and, for an event that names no row, the
settings page it is about. A new action is a new entry; a new kind of value or of object
is a new entry in `KINDS`' neighbours below (`LOADERS`, `OBJECTS`). Names are read for a
whole page at once, one query per kind of object, and only within the page's clinic."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from gettext import NullTranslations
from typing import Any

from babel.dates import format_date
from babel.numbers import format_decimal

from console import pages
from console.inbox import language_name, local_time, phone
from console.rendering import N_
from models import (
    ApiToken,
    ApiTokenClinic,
    AuditEvent,
    Calendar,
    Call,
    Clinic,
    MedicalRecord,
    Patient,
    PatientRequest,
    RequestType,
    StaffUser,
)


@dataclass(frozen=True)
class Named:
    """Something the page names: its words, a link to it (if it has a page) and a tooltip."""

    text: str
    url: str | None = None
    title: str | None = None


class Words:
    """One page's language, clinic and the names its events refer to (read once)."""

    def __init__(self, tr: NullTranslations, clinic: Clinic, language: str) -> None:
        self.tr = tr
        self.clinic = clinic
        self.language = language
        self.names: dict[tuple[str, str], Named] = {}

    def _(self, message: str, **values: Any) -> str:
        text = self.tr.gettext(message)
        return text % values if values else text

    def name(self, kind: str, key: Any) -> Named | None:
        return self.names.get((kind, str(key)))


Ref = tuple[str, str]  # (a kind of `LOADERS`, the key it is read by)


@dataclass(frozen=True)
class Kind:
    """A kind of detail value: how it is said, and which names it needs read first."""

    show: Callable[[Any, Words], Named]
    refs: Callable[[Any], Iterable[Ref]] = lambda value: ()
    says_none: bool = False  # whether None means something (else it is shown as "–")


def _text(value: Any, w: Words) -> Named:
    return Named(str(value))


def _yes_no(value: Any, w: Words) -> Named:
    return Named(w._("yes") if value else w._("no"))


def _on_off(value: Any, w: Words) -> Named:
    return Named(w._("on") if value else w._("off"))


def _moment(value: Any, w: Words) -> Named:
    """An ISO date ("2026-12-24": a whole day) or instant, in the clinic's time zone."""
    if value in (None, "never"):
        return Named(w._("never"))
    text = str(value)
    try:
        if len(text) == 10:
            return Named(format_date(datetime.fromisoformat(text).date(), "medium", locale=w.language))
        return Named(local_time(datetime.fromisoformat(text), w.clinic, w.language))
    except ValueError:
        return Named(text)


def _count(value: Any, w: Words) -> Named:
    return Named(format_decimal(value, locale=w.language) if isinstance(value, int) else str(value))


def _days(value: Any, w: Words) -> Named:
    return Named(w._("kept") if value is None else str(value))


def _bytes(value: Any, w: Words) -> Named:
    return Named(w._("%(count)s bytes", count=_count(value, w).text))


def _one_of(words: dict[str, str]) -> Kind:
    """A value from a fixed set (a code), said with its words."""
    return Kind(lambda value, w: Named(w._(words[value]) if value in words else str(value)))


def _list_of(kind: Kind) -> Kind:
    """A list (or a space-separated text) of values of one kind, said as one line."""

    def items(value: Any) -> list[Any]:
        return value.split() if isinstance(value, str) else list(value or [])

    return Kind(
        lambda value, w: Named(", ".join(kind.show(item, w).text for item in items(value))),
        lambda value: [ref for item in items(value) for ref in kind.refs(item)],
    )


def _ref(kind: str, unknown_as_is: bool = False) -> Kind:
    """The key of a row, said as its name (with a link when it has a page); one not found
    is "no longer exists", or the key itself when it is words already (a clinic's slug)."""

    def show(value: Any, w: Words) -> Named:
        return w.name(kind, value) or Named(str(value) if unknown_as_is else w._("(no longer exists)"))

    return Kind(show, lambda value: [(kind, str(value))] if value else [])


def _word_counts(value: Any, w: Words) -> Named:
    """Words per language ({"cs": 40, "en": 31}): "čeština 40, angličtina 31"."""
    if not isinstance(value, dict):
        return Named(str(value))
    return Named(", ".join(f"{language_name(k, w.language) or k} {_count(v, w).text}" for k, v in value.items()))


def _type_or_other(value: Any, w: Words) -> Named:
    """A request type by its name; None is "other" (no type)."""
    if not value:
        return Named(w._("other"))
    return w.name("request_type", value) or Named(w._("(no longer exists)"))


def _languages(value: Any, w: Words) -> Named:
    if not value:
        return Named(w._("any language"))
    return Named(", ".join(language_name(code, w.language) or code for code in value))


TEXT = Kind(_text)
YES_NO = Kind(_yes_no)
ON_OFF = Kind(_on_off)
MOMENT = Kind(_moment)
COUNT = Kind(_count)
DAYS = Kind(_days, says_none=True)  # None: kept
BYTES = Kind(_bytes)
LANGUAGES = Kind(_languages, says_none=True)  # None: any language
CLINICS = _list_of(_ref("clinic", unknown_as_is=True))
SCOPES = _list_of(_one_of({"read": N_("read"), "write": N_("write")}))
ROLE = _one_of({"admin": N_("administrator"), "staff": N_("staff member")})
WEEKDAY = _one_of(
    {
        "mon": N_("Monday"),
        "tue": N_("Tuesday"),
        "wed": N_("Wednesday"),
        "thu": N_("Thursday"),
        "fri": N_("Friday"),
        "sat": N_("Saturday"),
        "sun": N_("Sunday"),
    }
)
WEEKS = _one_of({"every": N_("every week"), "odd": N_("odd weeks"), "even": N_("even weeks")})
KEY = _ref("api_token")
REQUEST = _ref("patient_request")
REQUEST_TYPE = _ref("request_type")
PATIENT = _ref("patient")
TYPE_OR_OTHER = Kind(_type_or_other, lambda value: [("request_type", str(value))] if value else [], says_none=True)
WORD_COUNTS = Kind(_word_counts)


@dataclass(frozen=True)
class Field:
    """A detail the page shows: the key in the event's details, its label, its kind."""

    key: str
    label: str
    kind: Kind = TEXT


@dataclass(frozen=True)
class Action:
    """What an action's events say: `words` (the verb, also the filter's), the detail
    `fields` shown, the settings page (`section`: label, path) an event that names no row
    is about, and `refine`: better words from the event's details, when they tell more."""

    words: str
    fields: tuple[Field, ...] = ()
    section: tuple[str, str] | None = None
    refine: Callable[[dict[str, Any], Words], str | None] | None = None


_PATCHED = {
    "userNote": N_("note"),
    "addTagIds": N_("tag added"),
    "removeTagIds": N_("tag removed"),
    "done": N_("resolution"),
}


def _patch(details: dict[str, Any], w: Words) -> str | None:
    """A request change by what it changed: resolved, reopened, its note, its tags."""
    if "done" in details:
        return w._("Marked resolved") if details["done"] else w._("Reopened")
    fields = details.get("fields") or []
    alone = {"userNote": N_("Note changed"), "addTagIds": N_("Tag added"), "removeTagIds": N_("Tag removed")}
    if len(fields) == 1 and fields[0] in alone:
        return w._(alone[fields[0]])
    if fields:
        return w._("Request changed: %(what)s", what=", ".join(w._(_PATCHED.get(f, f)) for f in fields))
    return None


def _confirmed(details: dict[str, Any], w: Words) -> str | None:
    """A type confirmed as the transcript suggested it, or chosen instead."""
    if details.get("asSuggested") is False:
        return w._("Request type chosen instead of the suggestion")
    return None


def _imported(details: dict[str, Any], w: Words) -> str | None:
    if "created" not in details:
        return None
    return w._("Patient imported (new)") if details["created"] else w._("Patient updated by an import")


_HOURS = (
    Field("weekday", N_("Day"), WEEKDAY),
    Field("opens", N_("Opens")),
    Field("closes", N_("Closes")),
    Field("weeks", N_("Weeks"), WEEKS),
)
_VACATION = (
    Field("name", N_("Vacation")),
    Field("start", N_("From"), MOMENT),
    Field("end", N_("Until"), MOMENT),
    Field("switchboard", N_("Applies to the switchboard"), YES_NO),
)
_TYPE = (Field("name", N_("Name")), Field("ecrfId", N_("Code")))
_OFFICE_HOURS = (N_("Office hours"), pages.OFFICE_HOURS)
_CALENDARS = (N_("Calendars and vacations"), pages.CALENDARS)
_REQUEST_TYPES = (N_("Request types"), pages.REQUEST_TYPES)

# Every action the trail holds, in the order the audit page's filter offers them.
ACTIONS: dict[str, Action] = {
    "staff.login": Action(N_("Logged in")),
    "staff.login_failed": Action(
        N_("Failed login"),
        (
            Field("disabled", N_("Account disabled"), YES_NO),
            Field("secondFactor", N_("Wrong two-factor code"), YES_NO),
        ),
    ),
    "token.create": Action(
        N_("API key created"),
        (
            Field("clinics", N_("Clinics"), CLINICS),
            Field("scopes", N_("Scopes"), SCOPES),
            Field("expiresAt", N_("Valid until"), MOMENT),
        ),
    ),
    "token.rotate": Action(
        N_("API key replaced by a new one"),
        (Field("newKey", N_("New key"), KEY), Field("oldValidUntil", N_("Old key works until"), MOMENT)),
    ),
    "token.revoke": Action(N_("API key revoked")),
    "patient_request.create": Action(
        N_("Request created"),
        (Field("patientId", N_("Patient"), PATIENT), Field("requestTypeId", N_("Request type"), REQUEST_TYPE)),
    ),
    "patient_request.patch": Action(N_("Request changed"), refine=_patch),
    # The inbox's reading of voice messages (triage/inbox.py): staff confirm or clear it.
    "patient_request.confirm_type": Action(
        N_("Request type confirmed"),
        (
            Field("requestTypeId", N_("Request type"), TYPE_OR_OTHER),
            Field("suggestedRequestTypeId", N_("Suggested from the transcript"), TYPE_OR_OTHER),
        ),
        refine=_confirmed,
    ),
    "patient_request.clear_urgent": Action(N_("“May be urgent” flag cleared")),
    "attachment.upload_link": Action(N_("Upload link issued"), (Field("contentType", N_("File type")),)),
    "attachment.register": Action(
        N_("Document stored"),
        (
            Field("patientRequestId", N_("Request"), REQUEST),
            Field("contentType", N_("File type")),
            Field("sha256", N_("SHA-256 checksum")),
        ),
    ),
    "patient.import": Action(N_("Patient imported"), refine=_imported),
    "patient.import_bulk": Action(
        N_("Patients imported in bulk"),
        (
            Field("created", N_("New"), COUNT),
            Field("updated", N_("Updated"), COUNT),
            Field("failed", N_("Failed"), COUNT),
        ),
    ),
    "call.receive": Action(N_("Call received")),
    "call.recording_mismatch": Action(
        N_("Recording did not match the call"),
        (
            Field("expectedBytes", N_("Size handed off"), BYTES),
            Field("receivedBytes", N_("Size the platform gave"), BYTES),
            Field("expectedSha256", N_("Checksum handed off")),
            Field("receivedSha256", N_("Checksum the platform gave")),
        ),
    ),
    "staff_user.create": Action(
        N_("Staff user created"),
        (Field("role", N_("Role"), ROLE), Field("existingAccount", N_("Existing account"), YES_NO)),
    ),
    "staff_user.reset_password": Action(
        N_("Staff user's password reset"), (Field("sessionsEnded", N_("Logins ended"), COUNT),)
    ),
    "staff_user.disable": Action(N_("Staff user disabled"), (Field("sessionsEnded", N_("Logins ended"), COUNT),)),
    # Staff accounts run in the console (staff/accounts.py, staff/two_factor.py).
    "staff_user.role": Action(
        N_("Staff user's role changed"), (Field("from", N_("From"), ROLE), Field("to", N_("To"), ROLE))
    ),
    "staff_user.enable": Action(N_("Staff user enabled")),
    "staff_user.password_link": Action(
        N_("Set-password link made"),
        (Field("validHours", N_("Valid for (hours)"), COUNT), Field("firstPassword", N_("First password"), YES_NO)),
    ),
    "staff_user.password_set": Action(
        N_("Password set through a link"),
        (Field("firstPassword", N_("First password"), YES_NO), Field("sessionsEnded", N_("Logins ended"), COUNT)),
    ),
    "staff_user.password_change": Action(
        N_("Own password changed"), (Field("sessionsEnded", N_("Logins ended"), COUNT),)
    ),
    "staff_user.sessions_end": Action(
        N_("Sessions ended"),
        (Field("sessionsEnded", N_("Logins ended"), COUNT), Field("others", N_("All other sessions"), YES_NO)),
    ),
    "staff_user.two_factor_enable": Action(N_("Two-factor login turned on")),
    "staff_user.two_factor_disable": Action(N_("Two-factor login turned off")),
    "staff_user.two_factor_reset": Action(
        N_("Two-factor login reset by the operator"),
        (Field("wasOn", N_("Was on"), YES_NO), Field("sessionsEnded", N_("Logins ended"), COUNT)),
    ),
    "staff_user.recovery_code_used": Action(
        N_("Recovery code used"), (Field("left", N_("Recovery codes left"), COUNT),)
    ),
    "staff_user.recovery_codes_new": Action(N_("New recovery codes made")),
    # The settings pages' changes (onboarding/clinic_settings.py).
    "settings.office_hours.add": Action(N_("Office hours added"), _HOURS, _OFFICE_HOURS),
    "settings.office_hours.remove": Action(N_("Office hours removed"), _HOURS, _OFFICE_HOURS),
    "settings.calendar.create": Action(N_("Calendar created"), (Field("name", N_("Name")),), _CALENDARS),
    "settings.calendar.update": Action(
        N_("Calendar changed"),
        (Field("name", N_("Name")), Field("ignoreHolidays", N_("Ignore public holidays"), YES_NO)),
        _CALENDARS,
    ),
    "settings.vacation.add": Action(N_("Vacation added"), _VACATION, _CALENDARS),
    "settings.vacation.remove": Action(N_("Vacation removed"), _VACATION, _CALENDARS),
    "settings.calls.update": Action(
        N_("Call settings changed"),
        (
            Field("missedCallRequests", N_("Missed-call requests"), ON_OFF),
            Field("languages", N_("Caller languages"), LANGUAGES),
        ),
        (N_("Calls"), pages.CALLS),
    ),
    "settings.urgency_words.update": Action(
        N_("Words that may mean urgency changed"),
        (
            Field("shipped", N_("The shipped words"), YES_NO),
            Field("counts", N_("Words per language"), WORD_COUNTS),
        ),
        (N_("Calls"), pages.CALLS),
    ),
    "settings.two_factor.update": Action(
        N_("Two-factor requirement changed"),
        (Field("twoFactorRequired", N_("Two-factor login required"), ON_OFF),),
        (N_("Staff"), pages.STAFF),
    ),
    "settings.tag.create": Action(N_("Tag created"), (Field("name", N_("Tag")),), _REQUEST_TYPES),
    "settings.request_type.create": Action(N_("Request type created"), _TYPE, _REQUEST_TYPES),
    "settings.request_type.update": Action(N_("Request type changed"), _TYPE, _REQUEST_TYPES),
    "settings.retention.update": Action(
        N_("Data retention changed"),
        (
            Field("resolvedCallRequestsDays", N_("Resolved requests from calls (days)"), DAYS),
            Field("callsWithoutRequestDays", N_("Calls without a request (days)"), DAYS),
            Field("auditDetailsDays", N_("Addresses in the audit trail (days)"), DAYS),
            Field("signedDocumentsDays", N_("Signed documents (days)"), DAYS),
        ),
        (N_("Data retention"), pages.RETENTION),
    ),
    # Personal data's lifecycle (privacy/).
    "retention.delete": Action(
        N_("Deleted after the retention period"),
        (
            Field("call_requests", N_("Requests from calls"), COUNT),
            Field("calls", N_("Calls"), COUNT),
            Field("patients", N_("Patients"), COUNT),
            Field("documents", N_("Signed documents"), COUNT),
        ),
        (N_("Data retention"), pages.RETENTION),
    ),
    "patient.erase": Action(
        N_("Patient erased"),
        (
            Field("requests", N_("Requests"), COUNT),
            Field("requests_kept", N_("Requests kept for their signed documents"), COUNT),
            Field("calls", N_("Calls"), COUNT),
            Field("documents", N_("Signed documents erased"), COUNT),
            Field("documents_kept", N_("Signed documents kept"), COUNT),
        ),
    ),
    "patient.copy": Action(
        N_("Copy of a patient's data made"),
        (
            Field("requests", N_("Requests"), COUNT),
            Field("calls", N_("Calls"), COUNT),
            Field("documents", N_("Signed documents"), COUNT),
        ),
    ),
    # The operator's file (onboarding/from_file.py).
    "onboarding.file": Action(
        N_("Onboarding file applied"),
        (Field("overwroteConsoleChanges", N_("Console changes overwritten"), YES_NO),),
        (N_("Settings"), pages.SETTINGS),
    ),
}


# --- names of rows, read a page at a time, within the page's clinic --------------------------


def _uuids(keys: Iterable[str]) -> list[uuid.UUID]:
    found = []
    for key in keys:
        try:
            found.append(uuid.UUID(key))
        except ValueError:
            continue  # not a row of a table keyed by uuid: named "no longer exists"
    return found


def _person(first: str, last: str, w: Words) -> str:
    return f"{first} {last}".strip() or w._("unknown caller")


def _request_words(request: PatientRequest, w: Words) -> str:
    kinds = {"voice_message": N_("Voice message"), "missed_call": N_("Missed call")}
    what = w._(kinds[request.kind]) if request.kind in kinds else request.title
    return f"{what} – {_person(request.patient.first_name, request.patient.last_name, w)}"


def _api_tokens(keys: set[str], w: Words) -> dict[str, Named]:
    rows = (
        ApiToken.select(ApiToken.id, ApiToken.name)
        .join(ApiTokenClinic)
        .where(ApiToken.id.in_(_uuids(keys)) & (ApiTokenClinic.clinic == w.clinic))
    )
    return {str(t.id): Named(t.name, pages.of_clinic(pages.API_KEYS, w.clinic.slug, f"key-{t.id}")) for t in rows}


def _clinics(keys: set[str], w: Words) -> dict[str, Named]:
    return {c.slug: Named(c.name, title=c.slug) for c in Clinic.select().where(Clinic.slug.in_(list(keys)))}


def _request_types(keys: set[str], w: Words) -> dict[str, Named]:
    rows = RequestType.select().where(RequestType.id.in_(_uuids(keys)) & (RequestType.clinic == w.clinic))
    return {str(t.id): Named(t.name, pages.of_clinic(pages.REQUEST_TYPES, w.clinic.slug, f"type-{t.id}")) for t in rows}


def _patients(keys: set[str], w: Words) -> dict[str, Named]:
    rows = Patient.select().where(Patient.id.in_(_uuids(keys)) & (Patient.organization == w.clinic.organization_id))
    named = {}
    for p in rows:
        shown = phone(p.phone, w.clinic)
        words = f"{p.first_name} {p.last_name}".strip() or (shown["text"] if shown else "") or w._("unknown caller")
        named[str(p.id)] = Named(str(words))
    return named


def _requests(keys: set[str], w: Words) -> dict[str, Named]:
    rows = (
        PatientRequest.select(PatientRequest, Patient)
        .join(Patient)
        .where(PatientRequest.id.in_(_uuids(keys)) & (PatientRequest.clinic == w.clinic))
    )
    return {str(r.id): Named(_request_words(r, w), pages.request(r.id)) for r in rows}


def _calls(keys: set[str], w: Words) -> dict[str, Named]:
    """A call by the request it made; a call that made none by its caller's number."""
    ids = _uuids(keys)
    made = (
        PatientRequest.select(PatientRequest, Patient)
        .join(Patient)
        .where(PatientRequest.call.in_(ids) & (PatientRequest.clinic == w.clinic))
    )
    named = {str(r.call_id): Named(_request_words(r, w), pages.request(r.id)) for r in made}
    for call in Call.select(Call.id, Call.call_from).where(Call.id.in_(ids) & (Call.clinic == w.clinic)):
        if str(call.id) not in named:
            shown = phone(call.call_from, w.clinic)
            named[str(call.id)] = Named(w._("call from %(number)s", number=shown["text"] if shown else "–"))
    return named


def _calendars(keys: set[str], w: Words) -> dict[str, Named]:
    rows = Calendar.select().where(Calendar.id.in_(_uuids(keys)) & (Calendar.clinic == w.clinic))
    return {str(k.id): Named(k.name, pages.of_clinic(pages.CALENDARS, w.clinic.slug, f"calendar-{k.id}")) for k in rows}


def _staff(users: Iterable[StaffUser]) -> dict[str, Named]:
    return {u.email: Named(u.name, title=u.email) for u in users}


def _staff_users(keys: set[str], w: Words) -> dict[str, Named]:
    users = list(StaffUser.select().where(StaffUser.id.in_(_uuids(keys))))
    return {str(u.id): Named(u.name, title=u.email) for u in users}


def _staff_emails(keys: set[str], w: Words) -> dict[str, Named]:
    return _staff(StaffUser.select().where(StaffUser.email.in_(list(keys))))


def _documents(keys: set[str], w: Words) -> dict[str, Named]:
    rows = (
        MedicalRecord.select(MedicalRecord, PatientRequest)
        .join(PatientRequest)
        .where(MedicalRecord.id.in_(_uuids(keys)) & (PatientRequest.clinic == w.clinic))
    )
    return {str(d.id): Named(d.description, pages.request(d.request_id)) for d in rows}


#: Reading names: a kind of `Ref` -> (keys -> their names). Rows of other clinics are not read.
LOADERS: dict[str, Callable[[set[str], Words], dict[str, Named]]] = {
    "api_token": _api_tokens,
    "clinic": _clinics,
    "request_type": _request_types,
    "patient": _patients,
    "patient_request": _requests,
    "call": _calls,
    "calendar": _calendars,
    "staff_user": _staff_users,
    "staff_email": _staff_emails,
    "medical_record": _documents,
}
#: What an event's target (AuditEvent.target_type, a table) is called on the page; its name
#: is read by the loader of the same name.
OBJECTS: dict[str, str] = {
    "api_token": N_("API key"),
    "patient_request": N_("Request"),
    "call": N_("Call"),
    "calendar": N_("Calendar"),
    "request_type": N_("Request type"),
    "patient": N_("Patient"),
    "staff_user": N_("User"),
    "medical_record": N_("Document"),
}
assert set(OBJECTS) <= set(LOADERS)


# --- the page's entries ------------------------------------------------------------------------


@dataclass
class Entry:
    """One event as a page shows it."""

    time: str
    action: str
    what: str
    who: Named
    subject: Named | None
    subject_kind: str
    address: str
    details: list[tuple[str, Named]] = field(default_factory=list)


def who_refs(kind: str, name: str, token_id: Any = None) -> list[Ref]:
    """The names `who` needs read."""
    if kind == "staff":
        return [("staff_email", name)]
    return [("api_token", str(token_id))] if kind == "token" and token_id else []


def who(kind: str, name: str, token_id: Any, w: Words) -> Named:
    """An author in words: a staff user by name (the e-mail in the tooltip), an API key by
    its service account (a link to it), the operator's command line (its system account in
    the tooltip), the service's own background work."""
    if kind == "staff":
        return w.name("staff_email", name) or Named(name)
    if kind == "token":
        key = w.name("api_token", token_id) if token_id else None
        return Named(w._("API key %(name)s", name=name), key.url if key else None)
    if kind == "operator":
        if name == "worker":  # the background worker's own writes (jobs/refetch.py)
            return Named(w._("the service (automatically)"))
        return Named(w._("operator (command line)"), title=name)
    return Named(name)


def parse_created_by(text: str | None) -> tuple[str, str]:
    """ApiToken.created_by ("staff:anna@…", "operator:root") as (kind, name)."""
    kind, _, name = (text or "").partition(":")
    return kind, name


def read_names(w: Words, refs: Iterable[Ref]) -> None:
    """Read the names `refs` need into `w`, one query per kind."""
    wanted: dict[str, set[str]] = defaultdict(set)
    for kind, key in refs:
        if (kind, key) not in w.names:
            wanted[kind].add(key)
    for kind, keys in wanted.items():
        for key, named in LOADERS[kind](keys, w).items():
            w.names[(kind, key)] = named


def _refs(event: AuditEvent, details: dict[str, Any]) -> Iterable[Ref]:
    if event.target_type in OBJECTS and event.target_id:
        yield event.target_type, event.target_id
    yield from who_refs(event.actor_kind, event.actor_name, event.token_id)
    action = ACTIONS.get(event.action)
    for f in action.fields if action else ():
        if details.get(f.key) is not None:
            yield from f.kind.refs(details[f.key])


def describe(events: list[AuditEvent], clinic: Clinic, language: str, tr: NullTranslations) -> list[Entry]:
    """The events in words (see the module's docstring), in their order."""
    w = Words(tr, clinic, language)
    parsed = [(e, json.loads(e.details or "{}")) for e in events]
    read_names(w, (ref for e, details in parsed for ref in _refs(e, details)))
    return [_entry(e, details, w) for e, details in parsed]


def _entry(event: AuditEvent, details: dict[str, Any], w: Words) -> Entry:
    action = ACTIONS.get(event.action)
    what = (action.refine(details, w) if action and action.refine else None) or (
        w._(action.words) if action else event.action
    )
    subject: Named | None = None
    subject_kind = ""
    if event.target_type in OBJECTS and event.target_id:
        subject_kind = w._(OBJECTS[event.target_type])
        subject = w.name(event.target_type, event.target_id) or Named(w._("(no longer exists)"))
    elif action and action.section:
        label, path = action.section
        subject_kind = w._("Settings")
        subject = Named(w._(label), pages.of_clinic(path, w.clinic.slug))
    shown = [
        (w._(f.label), f.kind.show(value, w) if value is not None or f.kind.says_none else Named("–"))
        for f in (action.fields if action else ())
        if f.key in details
        for value in (details[f.key],)
    ]
    return Entry(
        time=local_time(event.at, w.clinic, w.language),
        action=event.action,
        what=what,
        who=who(event.actor_kind, event.actor_name, event.token_id, w),
        subject=subject,
        subject_kind=subject_kind,
        address=event.address or "",
        details=shown,
    )
