"""What the console writes to the audit trail about logins, and what its audit page
reads from it. A login event goes to every clinic the user works for (each clinic's
admins see who entered); the address is the request's (AuditEvent.record reads it)."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import peewee as pw

from console.rendering import N_
from models import Actor, AuditEvent, Clinic, StaffUser
from plumbing.clock import as_utc
from plumbing.database import db
from plumbing.keyset import Keyset

PAGE_SIZE = 50
ORDER = Keyset(AuditEvent.at, AuditEvent.id, descending=True)  # newest first
# The verbs the filter offers (AuditEvent.action), in the order a reader looks for them,
# with the words the page shows for them (translated where shown).
ACTIONS: dict[str, str] = {
    "staff.login": N_("Logged in"),
    "staff.login_failed": N_("Failed login"),
    "token.create": N_("API key created"),
    "token.rotate": N_("API key replaced by a new one"),
    "token.revoke": N_("API key revoked"),
    "patient_request.create": N_("Request created"),
    "patient_request.patch": N_("Request changed"),
    "attachment.upload_link": N_("Upload link issued"),
    "attachment.register": N_("Document stored"),
    "patient.import": N_("Patient imported"),
    "patient.import_bulk": N_("Patients imported in bulk"),
    "call.receive": N_("Call received"),
    "staff_user.create": N_("Staff user added"),
    "staff_user.role": N_("Staff user's role changed"),
    "staff_user.disable": N_("Staff user disabled"),
    "staff_user.enable": N_("Staff user enabled"),
    "staff_user.password_link": N_("Set-password link made"),
    "staff_user.password_set": N_("Password set through a link"),
    "staff_user.password_change": N_("Own password changed"),
    "staff_user.reset_password": N_("Password reset by the operator"),
    "staff_user.sessions_end": N_("Sessions ended"),
    "staff_user.two_factor_enable": N_("Two-factor login turned on"),
    "staff_user.two_factor_disable": N_("Two-factor login turned off"),
    "staff_user.two_factor_reset": N_("Two-factor login reset by the operator"),
    "staff_user.recovery_code_used": N_("Recovery code used"),
    "staff_user.recovery_codes_new": N_("New recovery codes made"),
    "call.recording_mismatch": N_("Recording did not match the call"),
    # The settings pages' changes (onboarding/clinic_settings.py).
    "settings.office_hours.add": N_("Office hours added"),
    "settings.office_hours.remove": N_("Office hours removed"),
    "settings.calendar.create": N_("Calendar created"),
    "settings.calendar.update": N_("Calendar changed"),
    "settings.vacation.add": N_("Vacation added"),
    "settings.vacation.remove": N_("Vacation removed"),
    "settings.calls.update": N_("Call settings changed"),
    "settings.two_factor.update": N_("Two-factor requirement changed"),
    "settings.tag.create": N_("Tag created"),
    "settings.request_type.create": N_("Request type created"),
    "settings.request_type.update": N_("Request type changed"),
    # The operator's file (onboarding/from_file.py).
    "onboarding.file": N_("Onboarding file applied"),
}
# What was odd about a call's hand-off (switchboard.handoff.ANOMALIES), as the request page
# says it beside "Call received".
ANOMALIES: dict[str, str] = {
    "callFromWithheld": N_("the caller's number was withheld"),
    "callFromUnparseable": N_("the caller's number is not a phone number"),
    "callFromMissing": N_("the switchboard sent no caller number"),
    "callToMissing": N_("the switchboard sent no dialled number"),
    "recordingSidNotInUrl": N_("the recording's id differs from its link's file name"),
    "hasRecordingNotBoolean": N_("HasRecording was not true or false"),
    "hasRecordingWithoutUrl": N_("the switchboard reported a recording but sent no link to it"),
    "notText": N_("a text field held a number or a yes/no value"),
    "extraNotString": N_("the switchboard's extra data was not text (stored as JSON)"),
    "valueTruncated": N_("a value was too long and was shortened"),
    "callSidHashed": N_("the call id was too long and is stored as its hash"),
    "unstorableCharacters": N_("a value held characters that cannot be stored (replaced)"),
    "fieldNameCase": N_("a field name differed from the contract in letter case"),
}
# Who wrote, by AuditEvent.actor_kind.
WHO = {"token": N_("API key"), "staff": N_("staff"), "operator": N_("operator")}


def logged_in(user: StaffUser) -> None:
    """Call inside the transaction that starts the session."""
    for clinic in user.clinics():
        AuditEvent.record(Actor.staff(user), clinic, "staff.login", user)


def login_failed(user: StaffUser | None, second_factor: bool = False) -> None:
    """A failed login: for a known account, in each of its clinics; for an unknown e-mail,
    one event of no clinic naming nobody (what was typed may be a password: never stored).
    `second_factor`: the password was right, the code was not."""
    with db.atomic():
        if user is None:
            AuditEvent.record(Actor("staff", "unknown"), None, "staff.login_failed", None, {"knownAccount": False})
            return
        for clinic in user.clinics():
            AuditEvent.record(
                Actor.staff(user),
                clinic,
                "staff.login_failed",
                user,
                {"knownAccount": True, "disabled": user.disabled_at is not None}
                | ({"secondFactor": True} if second_factor else {}),
            )


def day_start(day: str, clinic: Clinic, later_days: int = 0) -> datetime | None:
    """00:00 of an ISO date (plus `later_days`) in the clinic's timezone, as naive UTC;
    None if not a date."""
    try:
        date = datetime.strptime(day, "%Y-%m-%d").date() + timedelta(days=later_days)
        local = datetime.combine(date, time(0), ZoneInfo(clinic.timezone))
    except ValueError:
        return None
    return as_utc(local)


def events(
    clinic: Clinic,
    who: str = "",
    what: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
) -> tuple[list[AuditEvent], str | None]:
    """A page of the clinic's events, newest first, and the next page's cursor. `who`
    matches the actor's name in part, any case; `what` is an action; `since` inclusive,
    `until` exclusive (naive UTC)."""
    query = AuditEvent.select().where(AuditEvent.clinic_id == clinic.id)
    if who:
        query = query.where(pw.fn.LOWER(AuditEvent.actor_name).contains(who.lower()))
    if what:
        query = query.where(AuditEvent.action == what)
    if since is not None:
        query = query.where(AuditEvent.at >= since)
    if until is not None:
        query = query.where(AuditEvent.at < until)
    return ORDER.page(query, cursor, PAGE_SIZE)
