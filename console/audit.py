"""What the console writes to the audit trail about logins, and what its audit page
reads from it. A login event goes to every clinic the user works for (each clinic's
admins see who entered); the address is the request's (AuditEvent.record reads it).

The audit page, /console/audit: the clinic's audit trail for its admins, in words
(console/audit_words.py), newest first, filtered by who, what and when, a keyset page at a
time."""

from __future__ import annotations

import urllib.parse
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import falcon
import peewee as pw

from console import audit_actions, audit_words, pages
from console.rendering import N_, Renderer, html
from models import Actor, AuditEvent, Clinic, StaffUser
from plumbing.clock import as_utc
from plumbing.database import db
from plumbing.errors import Invalid
from plumbing.keyset import Keyset

PAGE_SIZE = 50
ORDER = Keyset(AuditEvent.at, AuditEvent.id, descending=True)  # newest first
# The actions the trail holds, each with its words and the details it shows (the filter
# offers them in this order): console/audit_actions.py.
ACTIONS = audit_actions.ACTIONS
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


def logged_in(user: StaffUser, now: datetime) -> None:
    """Call inside the transaction that starts the session."""
    for clinic in user.clinics():
        AuditEvent.record(Actor.staff(user), clinic, "staff.login", user, at=now)


def login_failed(user: StaffUser | None, now: datetime, second_factor: bool = False) -> None:
    """A failed login: for a known account, in each of its clinics; for an unknown e-mail,
    one event of no clinic naming nobody (what was typed may be a password: never stored).
    `second_factor`: the password was right, the code was not."""
    with db.atomic():
        if user is None:
            AuditEvent.record(
                Actor("staff", "unknown"), None, "staff.login_failed", None, {"knownAccount": False}, at=now
            )
            return
        for clinic in user.clinics():
            AuditEvent.record(
                Actor.staff(user),
                clinic,
                "staff.login_failed",
                user,
                {"knownAccount": True, "disabled": user.disabled_at is not None}
                | ({"secondFactor": True} if second_factor else {}),
                at=now,
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
    matches in part, any case, the actor's recorded name (a key's service account, a staff
    user's e-mail) or a staff user's name as the page shows it; `what` is an action;
    `since` inclusive, `until` exclusive (naive UTC)."""
    query = AuditEvent.select().where(AuditEvent.clinic_id == clinic.id)
    if who:
        named = StaffUser.select(StaffUser.email).where(pw.fn.LOWER(StaffUser.name).contains(who.lower()))
        query = query.where(
            pw.fn.LOWER(AuditEvent.actor_name).contains(who.lower())
            | ((AuditEvent.actor_kind == "staff") & AuditEvent.actor_name.in_(named))
        )
    if what:
        query = query.where(AuditEvent.action == what)
    if since is not None:
        query = query.where(AuditEvent.at >= since)
    if until is not None:
        query = query.where(AuditEvent.at < until)
    return ORDER.page(query, cursor, PAGE_SIZE)


class AuditList:
    admin_required = True
    officer_allowed = True  # the clinic's data-protection officer reads the trail too

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session, clinic = req.context.console_session, req.context.admin_clinic
        language = session.user.language
        filters = {
            "who": (req.get_param("who") or "")[:200],
            "what": what if (what := req.get_param("what") or "") in ACTIONS else "",
            "since": (req.get_param("since") or "")[:10],
            "until": (req.get_param("until") or "")[:10],
        }
        try:
            rows, cursor = events(
                clinic,
                filters["who"],
                filters["what"],
                day_start(filters["since"], clinic),
                day_start(filters["until"], clinic, later_days=1),  # the whole day
                req.get_param("after"),
            )
        except Invalid:  # a cursor that is not one of this list's
            raise falcon.HTTPBadRequest() from None
        described = audit_words.describe(rows, clinic, language, self.renderer.translations[language])
        query = {"clinic": clinic.slug, **{k: v for k, v in filters.items() if v}}
        more = pages.AUDIT + "?" + urllib.parse.urlencode({**query, "after": cursor}) if cursor else None
        html(
            resp,
            self.renderer.render(
                "console/audit.html",
                language,
                user=session.user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=req.context.admin_clinics,
                events=described,
                actions=ACTIONS,
                more=more,
                **filters,
            ),
        )
