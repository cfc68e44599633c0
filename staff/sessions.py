"""Server-side sessions of the staff console: the cookie carries a random token; the database holds
its SHA-256 (the session id), the user, the CSRF token and the times that expire it."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from peewee import fn

from models import ApiToken, ApiTokenClinic, StaffMembership, StaffSession, StaffUser
from plumbing.clock import as_utc

COOKIE = "console_session"
# Before login there is no session: the login form's CSRF token is a random value in its
# own cookie, repeated in the form (double submit). A cross-site page can neither read
# the cookie nor set it, so it cannot post a matching pair.
PRELOGIN_COOKIE = "console_csrf"
_TOUCH_EVERY = timedelta(minutes=1)  # spare a write per page; idle expiry is hours
# A login half done (the second factor awaited, or enrolment) is finished within this, or
# it ends: the password alone opens nothing for long.
PENDING_LIFETIME = timedelta(minutes=15)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def same(a: str | None, b: str | None) -> bool:
    """Constant-time comparison of two tokens; a missing one never matches."""
    return bool(a and b) and hmac.compare_digest((a or "").encode(), (b or "").encode())


@dataclass(frozen=True)
class Lifetime:
    idle: timedelta
    absolute: timedelta

    @classmethod
    def of(cls, idle_hours: float, max_hours: float) -> Lifetime:
        """The lifetime the settings give (CONSOLE_SESSION_IDLE_HOURS, CONSOLE_SESSION_MAX_HOURS)."""
        return cls(idle=timedelta(hours=idle_hours), absolute=timedelta(hours=max_hours))


def start(
    user: StaffUser, now: datetime, ip: str | None, user_agent: str | None, pending: str | None = None
) -> tuple[str, str]:
    """A new session for `user` (a half-done login when `pending`: "code" or "enrol"); returns
    the cookie's token (shown once, never stored) and the session's id."""
    token = new_token()
    StaffSession.create(
        id=_digest(token),
        pending=pending,
        user=user,
        created_at=as_utc(now),
        last_seen_at=as_utc(now),
        csrf_token=new_token(),
        ip=(ip or "")[:64] or None,
        user_agent=(user_agent or "")[:300] or None,
    )
    if pending is None:
        StaffUser.update(last_login_at=as_utc(now)).where(StaffUser.id == user.id).execute()
    return token, _digest(token)


def _expiring_keys(now: datetime) -> Any:
    """How many live keys of the clinics the session's user administers expire within 14
    days (not those a rotation replaced): every page's banner, in the session's one query."""
    successor = ApiToken.alias("successor")
    at = as_utc(now)
    return (
        ApiToken.select(fn.COUNT(ApiToken.id.distinct()))
        .join(ApiTokenClinic, on=(ApiTokenClinic.token == ApiToken.id))
        .join(StaffMembership, on=(StaffMembership.clinic == ApiTokenClinic.clinic))
        .where(
            (StaffMembership.user == StaffUser.id)
            & (StaffMembership.role == "admin")
            & ApiToken.revoked_at.is_null()
            & (ApiToken.expires_at > at)
            & (ApiToken.expires_at <= at + ApiToken.EXPIRY_WARNING)
            & ~fn.EXISTS(successor.select(successor.id).where(successor.rotated_from == ApiToken.id))
        )
    )


def find(token: str | None, now: datetime, lifetime: Lifetime) -> StaffSession | None:
    """The live session of a cookie's token, its user loaded; None when unknown, expired
    (idle or absolute; the row is deleted then) or its user is disabled."""
    if not token or len(token) > 100:
        return None
    # The user's admin role comes with the session, in its one query (the header's links).
    admin = fn.EXISTS(
        StaffMembership.select(StaffMembership.id).where(
            (StaffMembership.user == StaffUser.id) & (StaffMembership.role == "admin")
        )
    )
    officer = fn.EXISTS(
        StaffMembership.select(StaffMembership.id).where(
            (StaffMembership.user == StaffUser.id) & (StaffMembership.role == "officer")
        )
    )
    works = fn.EXISTS(
        StaffMembership.select(StaffMembership.id).where(
            (StaffMembership.user == StaffUser.id) & StaffMembership.role.in_(StaffMembership.WORKING_ROLES)
        )
    )
    session = (
        StaffSession.select(
            StaffSession,
            StaffUser,
            admin.alias("user_is_admin"),
            officer.alias("user_is_officer"),
            works.alias("user_works"),
            _expiring_keys(now).alias("user_expiring_keys"),
        )
        .join(StaffUser)
        .where(StaffSession.id == _digest(token))
        .get_or_none()
    )
    if session is None:
        return None
    session.user._admin = bool(session.user_is_admin)  # type: ignore[attr-defined]  # the query's extra column
    session.user._officer = bool(session.user_is_officer)  # type: ignore[attr-defined]  # the same
    session.user._works = bool(session.user_works)  # type: ignore[attr-defined]  # the same
    session.user.expiring_keys = int(session.user_expiring_keys or 0)  # type: ignore[attr-defined]  # the same
    now = as_utc(now)
    if (
        session.user.disabled_at is not None
        or now - as_utc(session.last_seen_at) > lifetime.idle
        or now - as_utc(session.created_at) > lifetime.absolute
        or (session.pending is not None and now - as_utc(session.created_at) > PENDING_LIFETIME)
    ):
        StaffSession.delete().where(StaffSession.id == session.id).execute()
        return None
    if now - as_utc(session.last_seen_at) > _TOUCH_EVERY:
        StaffSession.update(last_seen_at=now).where(StaffSession.id == session.id).execute()
    return session


def end(token: str | None) -> None:
    if token:
        StaffSession.delete().where(StaffSession.id == _digest(token)).execute()


def end_all(user: StaffUser) -> int:
    """Every session of the user (password reset, disable)."""
    return StaffSession.delete().where(StaffSession.user == user).execute()
