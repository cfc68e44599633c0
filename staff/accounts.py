"""A clinic's staff as its admins run them in the console: adding a user (or giving an
existing account of the same organization a role), changing a role, disabling and enabling,
and one-time set-password links (handed over by the admin, or e-mailed when the service
sends e-mail: then the link is made as its e-mail is written, `issue_mailed_link`, and
"forgot password" asks for one, `request_reset`);
and what every user does with their own account: the password and their sessions.

Each change is audited in its own transaction (staff/events.py). A clinic keeps at least one
enabled admin. An admin acts only on users of the clinic they administer (the console checks
the admin; `member` refuses a user of another clinic as not found)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from models import (
    Actor,
    AuditEvent,
    Calendar,
    Clinic,
    Organization,
    Outbox,
    StaffMembership,
    StaffPasswordLink,
    StaffSession,
    StaffUser,
)
from plumbing.clock import as_utc
from plumbing.database import db, is_postgresql
from plumbing.errors import Conflict, Forbidden, Gone, Invalid, NotFound
from staff import events, passwords

#: Why a change is refused, in English (the console translates these).
BAD_EMAIL = "Enter an e-mail address."
BAD_NAME = "Enter the user's name."
BAD_ROLE = "Choose a role."
FOREIGN = "This e-mail belongs to an account of another organization."
ALREADY = "This user works for the clinic already."
LAST_ADMIN = "The clinic needs at least one enabled administrator."
NOT_YOURSELF = "You cannot disable your own account."
NO_SUCH_USER = "No such user in this clinic."
LINK_GONE = "This link is no longer valid: it was used, it expired, or a newer one was made."
WRONG_PASSWORD = "The current password is not right."
MISMATCH = "The two new passwords differ."
NO_SUCH_SESSION = "No such session."


@dataclass(frozen=True)
class Colleague:
    """A user of a clinic as the staff page lists them."""

    user: StaffUser
    role: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _lock(clinic: Clinic) -> None:
    """Two admins at once take turns (each checks "the last admin" against the other's change)."""
    if is_postgresql():
        db.execute_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"staff:{clinic.id}",))


def clinic_words(clinics: list[Clinic]) -> list[str]:
    """What a staff password must not be built from, of the clinics the user works for:
    their names and slugs, their organization's name, the names of their staff and of
    their calendars (a doctor's, most often). The trade's words are `passwords.TRADE_WORDS`."""
    if not clinics:
        return []
    ids = [clinic.id for clinic in clinics]
    staff = StaffUser.select(StaffUser.name).join(StaffMembership).where(StaffMembership.clinic.in_(ids))
    calendars = Calendar.select(Calendar.name).where(Calendar.clinic.in_(ids))
    organizations = Organization.select(Organization.name).where(
        Organization.id.in_([clinic.organization_id for clinic in clinics])
    )
    return [
        *(word for clinic in clinics for word in (clinic.name, clinic.slug)),
        *(o.name for o in organizations),
        *(u.name for u in staff),
        *(k.name for k in calendars),
    ]


def colleagues(clinic: Clinic) -> list[Colleague]:
    """The clinic's users, enabled first, by name."""
    rows = (
        StaffMembership.select(StaffMembership, StaffUser)
        .join(StaffUser)
        .where(StaffMembership.clinic == clinic)
        .order_by(StaffUser.disabled_at.is_null(False), StaffUser.name, StaffUser.email)
    )
    return [Colleague(m.user, m.role) for m in rows]


def member(clinic: Clinic, user_id: str | uuid.UUID | None) -> tuple[StaffUser, StaffMembership]:
    """A user of `clinic` and their membership; `NotFound` for anyone else (a user of another
    clinic is not told apart from one who does not exist)."""
    try:
        wanted = uuid.UUID(str(user_id))
    except ValueError:
        raise NotFound(NO_SUCH_USER, code="USER_NOT_FOUND") from None
    membership = (
        StaffMembership.select(StaffMembership, StaffUser)
        .join(StaffUser)
        .where((StaffMembership.clinic == clinic) & (StaffMembership.user == wanted))
        .get_or_none()
    )
    if membership is None:
        raise NotFound(NO_SUCH_USER, code="USER_NOT_FOUND")
    return membership.user, membership


def _other_admins(clinic: Clinic, user: StaffUser) -> int:
    return (
        StaffMembership.select()
        .join(StaffUser)
        .where(
            (StaffMembership.clinic == clinic)
            & (StaffMembership.role == "admin")
            & (StaffMembership.user != user)
            & StaffUser.disabled_at.is_null()
        )
        .count()
    )


def add(clinic: Clinic, actor: Actor, email: str, name: str, role: str, now: datetime) -> tuple[StaffUser, bool]:
    """Add a user to the clinic with `role`: a new account (without a password: make a link
    with `issue_link`), or an existing account of the clinic's organization. Returns the user
    and whether the account is new. Refuses an account that works for another organization,
    as onboarding does (adding it would hand it over)."""
    email, name = StaffUser.normal_email(email), " ".join(name.split())
    local, _, domain = email.partition("@")
    if not local or "." not in domain or len(email) > 254 or any(ch.isspace() for ch in email):
        raise Invalid(BAD_EMAIL)
    if not name or len(name) > 200:
        raise Invalid(BAD_NAME)
    if role not in StaffMembership.ROLES:
        raise Invalid(BAD_ROLE)
    with db.atomic():
        _lock(clinic)
        user = StaffUser.by_email(email)
        if user is not None:
            foreign = (
                StaffMembership.select()
                .join(Clinic)
                .where((StaffMembership.user == user) & (Clinic.organization != clinic.organization_id))
                .exists()
            )
            if foreign:
                raise Forbidden(FOREIGN, code="FOREIGN_ACCOUNT")
            if user.role_in(clinic) is not None:
                raise Conflict(ALREADY, code="ALREADY_MEMBER")
        created = user is None
        if user is None:
            user = StaffUser.create(email=email, name=name, password_hash=passwords.NO_PASSWORD, created_at=as_utc(now))
        StaffMembership.create(user=user, clinic=clinic, role=role)
        events.record(
            actor, user, "staff_user.create", {"role": role, "existingAccount": not created}, [clinic], now=now
        )
    return user, created


def change_role(clinic: Clinic, actor: Actor, user_id: str, role: str, now: datetime) -> None:
    if role not in StaffMembership.ROLES:
        raise Invalid(BAD_ROLE)
    with db.atomic():
        _lock(clinic)
        user, membership = member(clinic, user_id)
        if membership.role == role:
            return
        if membership.role == "admin" and not _other_admins(clinic, user):
            raise Conflict(LAST_ADMIN, code="LAST_ADMIN")
        StaffMembership.update(role=role).where(StaffMembership.id == membership.id).execute()
        events.record(actor, user, "staff_user.role", {"from": membership.role, "to": role}, [clinic], now=now)


def disable(clinic: Clinic, actor: Actor, user_id: str, by: StaffUser, now: datetime) -> int:
    """Disable the account (in every clinic: it is one login) and end its sessions at once:
    every web process reads the session from the database on each request, so the user's
    next click lands on the login page. Unused set-password links die with it. Returns the
    number of sessions ended."""
    with db.atomic():
        _lock(clinic)
        user, membership = member(clinic, user_id)
        if user.id == by.id:
            raise Forbidden(NOT_YOURSELF, code="NOT_YOURSELF")
        if user.disabled_at is not None:
            return 0
        if membership.role == "admin" and not _other_admins(clinic, user):
            raise Conflict(LAST_ADMIN, code="LAST_ADMIN")
        StaffUser.update(disabled_at=as_utc(now)).where(StaffUser.id == user.id).execute()
        ended = StaffSession.delete().where(StaffSession.user == user).execute()
        _expire_links(user, now)
        events.record(actor, user, "staff_user.disable", {"sessionsEnded": ended}, now=now)
    return ended


def enable(clinic: Clinic, actor: Actor, user_id: str, now: datetime) -> None:
    with db.atomic():
        user, _ = member(clinic, user_id)
        if user.disabled_at is None:
            return
        StaffUser.update(disabled_at=None).where(StaffUser.id == user.id).execute()
        events.record(actor, user, "staff_user.enable", now=now)


def _expire_links(user: StaffUser, now: datetime) -> None:
    StaffPasswordLink.update(expires_at=as_utc(now)).where(
        (StaffPasswordLink.user == user)
        & StaffPasswordLink.used_at.is_null()
        & (StaffPasswordLink.expires_at > as_utc(now))
    ).execute()


def issue_link(clinic: Clinic, actor: Actor, user_id: str | uuid.UUID, lifetime: timedelta, now: datetime) -> str:
    """A new set-password link's token for a user of the clinic (returned once; only its
    hash is stored); the user's earlier unused links stop working. The user's current
    password keeps working until the link is used."""
    with db.atomic():
        user, _ = member(clinic, user_id)
        if user.disabled_at is not None:
            raise Conflict(LINK_GONE, code="USER_DISABLED")
        _expire_links(user, now)
        token = secrets.token_urlsafe(32)
        StaffPasswordLink.create(
            user=user, token_hash=_digest(token), created_at=as_utc(now), expires_at=as_utc(now + lifetime)
        )
        events.record(
            actor,
            user,
            "staff_user.password_link",
            {"validHours": _hours(lifetime), "firstPassword": not user.password_hash},
            now=now,
        )
    return token


def mail_link(clinic: Clinic, actor: Actor, user_id: str | uuid.UUID, now: datetime, *, first: bool) -> StaffUser:
    """E-mail a user of the clinic a set-password link (`first`: a new account's welcome):
    the outbox's e-mail, in the transaction of its audit event. The link is made as the
    e-mail is written (`issue_mailed_link`), so nothing secret waits in the outbox; the
    user's earlier links stop working then."""
    with db.atomic():
        user, _ = member(clinic, user_id)
        if user.disabled_at is not None:
            raise Conflict(LINK_GONE, code="USER_DISABLED")
        Outbox.add(
            "mail",
            {
                "template": "welcome" if first else "password_link",
                "to": {"user": str(user.id)},
                "clinic": str(clinic.id),
            },
            now,
            clinic_id=clinic.id,
        )
        events.record(actor, user, "staff_user.password_link", {"byEmail": True, "firstPassword": first}, now=now)
    return user


def request_reset(email: str, now: datetime) -> bool:
    """ "Forgot password": an enabled account of `email` is e-mailed a link to set a new
    password (the outbox's e-mail and the audit event commit together). An unknown or
    disabled address leaves an event of no clinic naming nobody, and nothing else: the
    caller answers the same either way. Whether an e-mail will go (for the caller's tests only)."""
    user = StaffUser.by_email(email) if email.strip() else None
    with db.atomic():
        if user is None or user.disabled_at is not None:
            AuditEvent.record(
                Actor("staff", "unknown"), None, "staff.password_reset_asked", None, {"knownAccount": False}, at=now
            )
            return False
        Outbox.add("mail", {"template": "password_reset", "to": {"user": str(user.id)}}, now)
        events.record(Actor.staff(user), user, "staff.password_reset_asked", {"knownAccount": True}, now=now)
    return True


def issue_mailed_link(user: StaffUser, lifetime: timedelta, now: datetime) -> str | None:
    """A set-password link's token for the e-mail being written (None: the user is
    disabled now); the user's earlier unused links stop working. Audited where it was asked for."""
    with db.atomic():
        current = StaffUser.get_or_none(StaffUser.id == user.id)
        if current is None or current.disabled_at is not None:
            return None
        _expire_links(current, now)
        token = secrets.token_urlsafe(32)
        StaffPasswordLink.create(
            user=current, token_hash=_digest(token), created_at=as_utc(now), expires_at=as_utc(now + lifetime)
        )
    return token


def _hours(lifetime: timedelta) -> float | int:
    hours = round(lifetime.total_seconds() / 3600, 2)
    return int(hours) if hours.is_integer() else hours


def link_user(token: str, now: datetime) -> StaffUser:
    """The user a set-password link is for; `Gone` when it is unknown, used, expired or the
    user disabled (one answer for all: the link tells nothing more)."""
    link = (
        StaffPasswordLink.select(StaffPasswordLink, StaffUser)
        .join(StaffUser)
        .where(StaffPasswordLink.token_hash == _digest(token or ""))
        .get_or_none()
    )
    if (
        link is None
        or len(token) > 100
        or link.used_at is not None
        or as_utc(link.expires_at) <= as_utc(now)
        or link.user.disabled_at is not None
    ):
        raise Gone(LINK_GONE, code="LINK_GONE")
    return link.user


def use_link(token: str, password: str, repeated: str, now: datetime) -> StaffUser:
    """Set the password a link was made for (the rules of `passwords.check_new`), use the link
    up and end the user's sessions. Raises `Gone` for a dead link, `WeakPassword` (`Invalid`)."""
    user = link_user(token, now)
    if password != repeated:
        raise Invalid(MISMATCH, code="PASSWORD_MISMATCH")
    passwords.check_new(password, (user.email, user.name), clinic_words(user.clinics()))
    hashed = passwords.hash_password(password)
    with db.atomic():
        used = (
            StaffPasswordLink.update(used_at=as_utc(now))
            .where(
                (StaffPasswordLink.token_hash == _digest(token))
                & StaffPasswordLink.used_at.is_null()
                & (StaffPasswordLink.expires_at > as_utc(now))
            )
            .execute()
        )
        if used != 1:  # used up by a second tab in the meantime
            raise Gone(LINK_GONE, code="LINK_GONE")
        first = not user.password_hash
        StaffUser.update(password_hash=hashed).where(StaffUser.id == user.id).execute()
        ended = StaffSession.delete().where(StaffSession.user == user).execute()
        events.record(
            Actor.staff(user),
            user,
            "staff_user.password_set",
            {"firstPassword": first, "sessionsEnded": ended},
            now=now,
        )
    return user


def change_password(user: StaffUser, current: str, new: str, repeated: str, keep_session: str, now: datetime) -> int:
    """The user's own new password: the current one confirms it; every other session of the
    user ends (this one stays). Returns the number ended."""
    if not passwords.verify(user.password_hash, current):
        raise Invalid(WRONG_PASSWORD, code="WRONG_PASSWORD")
    if new != repeated:
        raise Invalid(MISMATCH, code="PASSWORD_MISMATCH")
    passwords.check_new(new, (user.email, user.name), clinic_words(user.clinics()))
    hashed = passwords.hash_password(new)
    with db.atomic():
        StaffUser.update(password_hash=hashed).where(StaffUser.id == user.id).execute()
        ended = StaffSession.delete().where((StaffSession.user == user) & (StaffSession.id != keep_session)).execute()
        events.record(Actor.staff(user), user, "staff_user.password_change", {"sessionsEnded": ended}, now=now)
    return ended


def notice_choices(user: StaffUser) -> list[tuple[Clinic, bool]]:
    """The user's clinics, each with whether the user asked to be e-mailed of its messages
    flagged "may be urgent"."""
    rows = (
        StaffMembership.select(StaffMembership, Clinic)
        .join(Clinic)
        .where(StaffMembership.user == user.id)
        .order_by(Clinic.name, Clinic.slug)
    )
    return [(m.clinic, m.urgent_notices) for m in rows]


def set_urgent_notices(user: StaffUser, wanted: set[str], now: datetime) -> None:
    """Be e-mailed of the messages flagged "may be urgent" of the clinics in `wanted` (ids),
    and of no other of the user's clinics; audited in each clinic whose choice changed."""
    with db.atomic():
        for clinic, before in notice_choices(user):
            after = str(clinic.id) in wanted
            if after == before:
                continue
            StaffMembership.update(urgent_notices=after).where(
                (StaffMembership.user == user.id) & (StaffMembership.clinic == clinic.id)
            ).execute()
            events.record(Actor.staff(user), user, "staff_user.urgent_notices", {"on": after}, [clinic], now=now)


def set_language(user: StaffUser, language: str) -> None:
    if language not in StaffUser.LANGUAGES:
        raise Invalid(BAD_ROLE)
    StaffUser.update(language=language).where(StaffUser.id == user.id).execute()


def own_sessions(user: StaffUser) -> list[StaffSession]:
    """The user's logins, the last used first (half-done logins left out)."""
    return list(
        StaffSession.select()
        .where((StaffSession.user == user) & StaffSession.pending.is_null())
        .order_by(StaffSession.last_seen_at.desc())
    )


def end_sessions(user: StaffUser, keep: str, now: datetime, which: str | None = None) -> int:
    """End one of the user's sessions (`which`, by id), or every one but `keep` (which=None).
    Returns the number ended; `NotFound` for a session that is not the user's."""
    query = StaffSession.delete().where(StaffSession.user == user)
    query = query.where(StaffSession.id == which) if which else query.where(StaffSession.id != keep)
    with db.atomic():
        ended = query.execute()
        if which and not ended:
            raise NotFound(NO_SUCH_SESSION)
        events.record(
            Actor.staff(user),
            user,
            "staff_user.sessions_end",
            {"sessionsEnded": ended, "others": which is None},
            now=now,
        )
    return ended
