"""What the console writes to the audit trail about logins, and what its audit page
reads from it. A login event goes to every clinic the user works for (each clinic's
admins see who entered); the address is the request's (AuditEvent.record reads it)."""
from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import peewee as pw

from models import Actor, AuditEvent, Clinic, StaffUser
from plumbing.clock import as_utc
from plumbing.database import db
from web.keyset import Keyset

PAGE_SIZE = 50
ORDER = Keyset(AuditEvent.at, AuditEvent.id, descending=True)  # newest first
# The verbs the filter offers (AuditEvent.action), in the order a reader looks for them.
ACTIONS = ("staff.login", "staff.login_failed", "token.create", "token.rotate", "token.revoke",
           "patient_request.create", "patient_request.patch", "attachment.upload_link", "attachment.register",
           "patient.import", "patient.import_bulk", "call.receive", "staff_user.create",
           # The settings pages' changes (onboarding/clinic_settings.py).
           "settings.office_hours.add", "settings.office_hours.remove", "settings.calendar.create",
           "settings.calendar.update", "settings.vacation.add", "settings.vacation.remove", "settings.calls.update",
           "settings.tag.create", "settings.request_type.create", "settings.request_type.update",
           "onboarding.file")


def logged_in(user: StaffUser) -> None:
    """Call inside the transaction that starts the session."""
    for clinic in user.clinics():
        AuditEvent.record(Actor.staff(user), clinic, "staff.login", user)


def login_failed(user: StaffUser | None) -> None:
    """A failed login: for a known account, in each of its clinics; for an unknown e-mail,
    one event of no clinic naming nobody (what was typed may be a password: never stored)."""
    with db.atomic():
        if user is None:
            AuditEvent.record(Actor("staff", "unknown"), None, "staff.login_failed", None, {"knownAccount": False})
            return
        for clinic in user.clinics():
            AuditEvent.record(Actor.staff(user), clinic, "staff.login_failed", user,
                              {"knownAccount": True, "disabled": user.disabled_at is not None})


def day_start(day: str, clinic: Clinic, later_days: int = 0) -> datetime | None:
    """00:00 of an ISO date (plus `later_days`) in the clinic's timezone, as naive UTC;
    None if not a date."""
    try:
        date = datetime.strptime(day, "%Y-%m-%d").date() + timedelta(days=later_days)
        local = datetime.combine(date, time(0), ZoneInfo(clinic.timezone))
    except ValueError:
        return None
    return as_utc(local)


def events(clinic: Clinic, who: str = "", what: str = "", since: datetime | None = None,
           until: datetime | None = None, cursor: str | None = None) -> tuple[list[AuditEvent], str | None]:
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

