"""Messages flagged "may be urgent" reach someone (the clinic's choice, console settings or
the onboarding file's `urgentNotices`): its staff who opted in on their account page and/or
an on-call address, always or only outside office hours (in them the inbox shows the
message first, and someone is looking).

The request's transaction wrote `request.urgent` (patient_requests/changes.py); `fan_out`
turns it into one e-mail per recipient, gathered: a recipient's e-mail waits
`URGENT_NOTICE_GATHER_SECONDS` for more flagged messages of the clinic, and a recipient gets
at most one every `URGENT_NOTICE_EVERY_MINUTES`; what is flagged meanwhile joins the e-mail
not sent yet. So a burst is one e-mail, sent within a minute of its first message."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

from config import Config
from models import Clinic, Outbox, PatientRequest, StaffMembership, StaffUser
from notices import people
from plumbing.clock import as_utc
from plumbing.database import db, is_postgresql
from switchboard.schedules import is_clinic_open

TEMPLATE = "urgent"


def recipients(clinic: Clinic) -> list[dict[str, str]]:
    """Whom the clinic tells: its opted-in staff (when it tells its staff) and its on-call address."""
    found: list[dict[str, str]] = []
    if clinic.urgent_notice_staff:
        rows = (
            StaffMembership.select(StaffMembership.user)
            .join(StaffUser)
            .where(
                (StaffMembership.clinic == clinic.id) & StaffMembership.urgent_notices & StaffUser.disabled_at.is_null()
            )
            .order_by(StaffUser.email)
        )
        found += [people.staff(row.user_id) for row in rows]
    if clinic.urgent_notice_email:
        found.append(people.on_call(clinic.id))
    return found


def group_key(clinic_id: uuid.UUID, to: dict[str, str]) -> str:
    return f"urgent:{clinic_id}:{people.key_of(to)}"


def fan_out(event: Outbox, config: Config, now: datetime) -> str:
    """The e-mails of one flagged request (run in the transaction that marks the event
    done); a short word for what came of it."""
    request = PatientRequest.get_or_none(PatientRequest.id == uuid.UUID(event.data["request"]))
    if request is None or not request.urgent or request.urgent_cleared_at is not None:
        return "gone"
    clinic = Clinic.get_by_id(request.clinic_id)
    if clinic.urgent_notice_when != "always" and is_clinic_open(
        clinic, None, as_utc(request.created_at).replace(tzinfo=UTC)
    ):
        return "office_hours"
    everyone = recipients(clinic)
    if not everyone:
        return "nobody"
    if is_postgresql():  # two flagged at once: the second joins the first's e-mails
        db.execute_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"urgent-notice:{clinic.id}",))
    gather = timedelta(seconds=config.urgent_notice_gather_seconds)
    every = timedelta(minutes=config.urgent_notice_every_minutes)
    now = as_utc(now)
    for to in everyone:
        key = group_key(clinic.id, to)
        waiting = (
            Outbox.select()
            .where((Outbox.group_key == key) & (Outbox.state == "pending") & Outbox.queued_at.is_null())
            .order_by(Outbox.id)
            .first()
        )
        if waiting is not None:
            data = waiting.data
            if str(request.id) not in data["requests"]:
                data["requests"].append(str(request.id))
            # Only while no relay has claimed it: one claimed meanwhile is left as it is and a
            # new e-mail follows it.
            joined = (
                Outbox.update(payload=json.dumps(data, sort_keys=True))
                .where((Outbox.id == waiting.id) & Outbox.queued_at.is_null() & (Outbox.state == "pending"))
                .execute()
            )
            if joined:
                continue
        last = (
            Outbox.select(Outbox.done_at)
            .where((Outbox.group_key == key) & (Outbox.state == "done"))
            .order_by(Outbox.done_at.desc())
            .first()
        )
        # Counted from the message, not from this fan-out: a worker late by a minute does
        # not make the e-mail a minute later.
        due = as_utc(request.created_at) + gather
        if last is not None and last.done_at is not None:
            due = max(due, as_utc(last.done_at) + every)
        Outbox.add(
            "mail",
            {"template": TEMPLATE, "to": to, "clinic": str(clinic.id), "requests": [str(request.id)]},
            now,
            clinic_id=clinic.id,
            due_at=due,
            group_key=key,
        )
    return "gathered"
