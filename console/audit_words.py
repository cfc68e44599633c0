"""The audit trail in words, for the clinic's admins (the audit page) and for the request
page's history: each event's verb, who made it (a staff user by name, the e-mail in a
tooltip; an API key by its service account; the operator's command line), what it changed
(named, with a link to its page where there is one) and its details as named fields with
values in words, in the user's language and the clinic's time zone. The trail itself keeps
the raw values: `manage.py audit` prints them.

Everything an action says is an entry in `console.audit_actions.ACTIONS`; the kinds of
value are `console.audit_kinds`'; a new kind of object is an entry in `LOADERS` and
`OBJECTS` below. Names are read for a whole page at once, one query per kind of object,
and only within the page's clinic."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from gettext import NullTranslations
from typing import Any

from console import pages
from console.audit_actions import ACTIONS
from console.audit_kinds import Named, Ref, Words
from console.inbox import local_time, phone
from console.patient_words import shown_name
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
    WebhookEndpoint,
)

# --- names of rows, read a page at a time, within the page's clinic --------------------------


def _uuids(keys: Iterable[str]) -> list[uuid.UUID]:
    found = []
    for key in keys:
        try:
            found.append(uuid.UUID(key))
        except ValueError:
            continue  # not a row of a table keyed by uuid: named "no longer exists"
    return found


def _person(patient: Patient, w: Words) -> str:
    return shown_name(patient, w.language) or w._("unknown caller")


def _request_words(request: PatientRequest, w: Words) -> str:
    kinds = {"voice_message": N_("Voice message"), "missed_call": N_("Missed call")}
    what = w._(kinds[request.kind]) if request.kind in kinds else request.title
    return f"{what} – {_person(request.patient, w)}"


def _api_tokens(keys: set[str], w: Words) -> dict[str, Named]:
    rows = (
        ApiToken.select(ApiToken.id, ApiToken.name)
        .join(ApiTokenClinic)
        .where(ApiToken.id.in_(_uuids(keys)) & (ApiTokenClinic.clinic == w.clinic))
    )
    return {str(t.id): Named(t.name, pages.of_clinic(pages.API_KEYS, w.clinic.slug, f"key-{t.id}")) for t in rows}


def _webhook_endpoints(keys: set[str], w: Words) -> dict[str, Named]:
    rows = WebhookEndpoint.select(WebhookEndpoint.id, WebhookEndpoint.url).where(
        WebhookEndpoint.id.in_(_uuids(keys)) & (WebhookEndpoint.clinic == w.clinic)
    )
    return {str(e.id): Named(e.url, pages.of_clinic(pages.WEBHOOKS, w.clinic.slug, f"endpoint-{e.id}")) for e in rows}


def _clinics(keys: set[str], w: Words) -> dict[str, Named]:
    return {c.slug: Named(c.name, title=c.slug) for c in Clinic.select().where(Clinic.slug.in_(list(keys)))}


def _request_types(keys: set[str], w: Words) -> dict[str, Named]:
    rows = RequestType.select().where(RequestType.id.in_(_uuids(keys)) & (RequestType.clinic == w.clinic))
    return {str(t.id): Named(t.name, pages.of_clinic(pages.REQUEST_TYPES, w.clinic.slug, f"type-{t.id}")) for t in rows}


def _patients(keys: set[str], w: Words) -> dict[str, Named]:
    rows = Patient.select().where(Patient.id.in_(_uuids(keys)) & (Patient.organization == w.clinic.organization_id))
    named = {}
    for p in rows:
        shown = phone(p.phone, w.clinic, w.language)
        words = shown_name(p, w.language) or (shown["text"] if shown else "") or w._("unknown caller")
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
            shown = phone(call.call_from, w.clinic, w.language)
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
    "webhook_endpoint": _webhook_endpoints,
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
    "webhook_endpoint": N_("Webhook endpoint"),
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
