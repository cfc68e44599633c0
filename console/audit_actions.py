"""Every action the audit trail holds, in words (console/audit_words.py): its verb, the
detail fields it shows (each with its label and its kind of value), and for an event that
names no row the settings page it is about. A new action is a new entry of `ACTIONS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from console import pages
from console.audit_kinds import (
    BYTES,
    CLINICS,
    COUNT,
    DAYS,
    KEY,
    LANGUAGES,
    MOMENT,
    ON_OFF,
    PATIENT,
    REQUEST,
    REQUEST_TYPE,
    ROLE,
    SCOPES,
    TEXT,
    TYPE_OR_OTHER,
    WEEKDAY,
    WEEKS,
    WORD_COUNTS,
    YES_NO,
    Kind,
    Words,
)
from console.rendering import N_


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
    "webhook.add": Action(N_("Webhook endpoint added"), (Field("eventTypes", N_("Events")),)),
    "webhook.rotate": Action(N_("Webhook signing secret replaced")),
    "webhook.disable": Action(N_("Webhook endpoint disabled")),
    "webhook.enable": Action(N_("Webhook endpoint enabled")),
    "webhook.remove": Action(N_("Webhook endpoint removed")),
    "webhook.send_again": Action(N_("Webhook delivery sent again")),
    "patient_request.create": Action(
        N_("Request created"),
        (Field("patientId", N_("Patient"), PATIENT), Field("requestTypeId", N_("Request type"), REQUEST_TYPE)),
    ),
    "patient_request.patch": Action(N_("Request changed"), refine=_patch),
    # The inbox's reading of voice messages (triage/clinic_words.py): staff confirm or clear it.
    "patient_request.confirm_type": Action(
        N_("Request type confirmed"),
        (
            Field("requestTypeId", N_("Request type"), TYPE_OR_OTHER),
            Field("suggestedRequestTypeId", N_("Suggested from the transcript"), TYPE_OR_OTHER),
        ),
        refine=_confirmed,
    ),
    "patient_request.clear_urgent": Action(N_("“May be urgent” flag cleared")),
    "patient_request.correct_transcript": Action(
        N_("Transcript corrected"),
        (Field("characters", N_("Characters")), Field("withdrawn", N_("Correction taken back"), YES_NO)),
    ),
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
        (
            Field("validHours", N_("Valid for (hours)"), COUNT),
            Field("firstPassword", N_("First password"), YES_NO),
            Field("byEmail", N_("Sent by e-mail"), YES_NO),
        ),
    ),
    "staff.password_reset_asked": Action(
        N_("New password asked for (forgot password)"), (Field("knownAccount", N_("Known account"), YES_NO),)
    ),
    "staff_user.urgent_notices": Action(
        N_("E-mail notices of urgent messages changed"), (Field("on", N_("E-mail notices"), ON_OFF),)
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
    "settings.urgent_notices.update": Action(
        N_("Who is told of urgent messages changed"),
        (
            Field("staff", N_("Staff who asked for it on their account page"), YES_NO),
            Field("onCallAddress", N_("On-call address"), YES_NO),
            Field("always", N_("Always, not only outside office hours"), YES_NO),
        ),
        (N_("Calls"), pages.CALLS),
    ),
    "notice.urgent_sent": Action(
        N_("Urgent messages e-mailed"),
        (
            Field("requests", N_("Messages"), COUNT),
            Field("toStaff", N_("To a staff member (not the on-call address)"), YES_NO),
        ),
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
            Field("resolvedApiRequestsDays", N_("Resolved requests made through the API (days)"), DAYS),
            Field("readTrailDays", N_("Read trail (days)"), DAYS),
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
            Field("api_requests", N_("Requests made through the API"), COUNT),
            Field("reads", N_("Read trail rows"), COUNT),
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
