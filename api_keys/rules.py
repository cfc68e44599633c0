"""The one place that holds the API key rules, used by the console's key pages
(console/keys.py) and by `manage.py token`:

- a key belongs to a service account (its name) and grants clinics and scopes (read, write);
- an expiry is required: 90 days unless chosen, at most a year; a key that never expires
  only when the operator asks for it explicitly (`--never-expires`), never from the console;
- rotation issues a new key with the same grants; the old one keeps working until a chosen
  time at most 7 days ahead (never longer than it would have anyway);
- revocation works at once (every web process drops the key within a second: the token
  trigger bumps the cache generation, plumbing/row_cache.py);
- every issue, rotation and revocation is an audit event in each clinic the key grants.

`now` is the caller's clock (the service's `Config.clock`), the one token checks use."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from models import Actor, ApiToken, ApiTokenClinic, AuditEvent, Clinic
from plumbing.clock import as_utc, iso_utc
from plumbing.database import db, is_postgresql

DEFAULT_LIFETIME = timedelta(days=90)
MAX_LIFETIME = timedelta(days=365)
MAX_OVERLAP = timedelta(days=7)  # how long a rotated key may keep working
EXPIRY_WARNING = ApiToken.EXPIRY_WARNING  # a key expiring sooner is flagged in the list
NAME_MAX = 200


class KeyRuleError(ValueError):
    """A key request that breaks a rule; the message is English, the console translates it."""


@dataclass(frozen=True)
class KeyView:
    """A key as the lists show it (never its secret: only its hash is stored)."""

    token: ApiToken
    clinics: list[str]  # slugs
    state: str  # active, expired, revoked
    expiring_soon: bool
    never_expires: bool


def lifetime(days: int | None) -> timedelta:
    """The lifetime of `days` (None: the default), within the rules."""
    if days is None:
        return DEFAULT_LIFETIME
    if days < 1 or timedelta(days=days) > MAX_LIFETIME:
        raise KeyRuleError("The expiry must be between 1 and 365 days ahead.")
    return timedelta(days=days)


def _check_grants(name: str, clinics: list[Clinic], scopes: list[str]) -> str:
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise KeyRuleError("The service account needs a name of at most 200 characters.")
    if not clinics:
        raise KeyRuleError("Choose at least one clinic.")
    if not scopes or not set(scopes) <= set(ApiToken.SCOPES):
        raise KeyRuleError("Choose the scopes: read, write or both.")
    return name


def _created_by(actor: Actor) -> str:
    return f"{actor.kind}:{actor.name}"[:220]


def issue(
    actor: Actor,
    name: str,
    clinics: list[Clinic],
    scopes: list[str],
    now: datetime,
    expires_in: timedelta | None = DEFAULT_LIFETIME,
    never_expires: bool = False,
    replacing: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """A new key (the row, and its text shown once). `expires_in` None is refused unless
    `never_expires` says so explicitly; `replacing`: the key a rotation replaces."""
    name = _check_grants(name, clinics, scopes)
    if never_expires != (expires_in is None):
        raise KeyRuleError("An expiry is required (a key that never expires only by the explicit flag).")
    if expires_in is not None and not timedelta(0) < expires_in <= MAX_LIFETIME:
        raise KeyRuleError("The expiry must be between 1 and 365 days ahead.")
    expires_at = as_utc(now) + expires_in if expires_in is not None else None
    with db.atomic():
        token, text = ApiToken.issue(
            name,
            clinics,
            scopes,
            now,
            created_by=_created_by(actor),
            expires_at=expires_at,
            rotated_from=replacing.id if replacing else None,
        )
        for clinic in clinics:
            AuditEvent.record(
                actor,
                clinic,
                "token.create",
                token,
                {
                    "name": token.name,
                    "clinics": [c.slug for c in clinics],
                    "scopes": token.scopes,
                    "expiresAt": iso_utc(expires_at) if expires_at else "never",
                },
                at=now,
            )
    return token, text


def clinics_of(token: ApiToken) -> list[Clinic]:
    return list(Clinic.select().join(ApiTokenClinic).where(ApiTokenClinic.token == token).order_by(Clinic.slug))


def is_live(token: ApiToken, now: datetime) -> bool:
    return token.revoked_at is None and (token.expires_at is None or as_utc(token.expires_at) > as_utc(now))


def may_rotate(token: ApiToken | KeyView, admin_clinics: list[Clinic]) -> bool:
    """A rotation grants the key's clinics again: only an admin of every one of them."""
    slugs = token.clinics if isinstance(token, KeyView) else [c.slug for c in clinics_of(token)]
    return set(slugs) <= {c.slug for c in admin_clinics}


def may_revoke(token: ApiToken, admin_clinics: list[Clinic]) -> bool:
    """A key that may have leaked is stopped by an admin of any clinic it opens."""
    mine = {c.id for c in admin_clinics}
    return any(c.id in mine for c in clinics_of(token))


def rotate(
    actor: Actor, token: ApiToken, old_until: datetime, now: datetime, expires_in: timedelta = DEFAULT_LIFETIME
) -> tuple[ApiToken, str]:
    """A new key with the old one's service account, clinics and scopes; the old one
    works until `old_until` (now to 7 days ahead), never past its own expiry."""
    now, old_until = as_utc(now), as_utc(old_until)
    if not is_live(token, now):
        raise KeyRuleError("Only a key that works can be rotated.")
    if not now <= old_until <= now + MAX_OVERLAP:
        raise KeyRuleError("The old key may keep working for at most 7 days.")
    clinics = clinics_of(token)
    with db.atomic():
        # Rotations of one key are serialized: the second of two at once sees the first's
        # shortened expiry (and revocation), as if they came one after the other.
        query = ApiToken.select().where(ApiToken.id == token.id)
        token = (query.for_update() if is_postgresql() else query).get()
        if not is_live(token, now):
            raise KeyRuleError("Only a key that works can be rotated.")
        until = min(old_until, as_utc(token.expires_at)) if token.expires_at else old_until
        new, text = issue(actor, token.name, clinics, sorted(token.scope_set), now, expires_in, replacing=token)
        # The cached rows of every web process are dropped (the token trigger counts the change).
        ApiToken.update(expires_at=until).where(ApiToken.id == token.id).execute()
        for clinic in clinics:
            AuditEvent.record(
                actor, clinic, "token.rotate", token, {"newKey": str(new.id), "oldValidUntil": iso_utc(until)}, at=now
            )
    return new, text


def revoke(actor: Actor, token: ApiToken, now: datetime) -> bool:
    """Stop the key at once; False when it was revoked already (nothing written)."""
    with db.atomic():
        revoked = (
            ApiToken.update(revoked_at=as_utc(now))
            .where((ApiToken.id == token.id) & ApiToken.revoked_at.is_null())
            .execute()
        )
        if revoked:
            for clinic in clinics_of(token):
                AuditEvent.record(actor, clinic, "token.revoke", token, {"name": token.name}, at=now)
    return bool(revoked)


def view(token: ApiToken, now: datetime, slugs: list[str] | None = None) -> KeyView:
    now = as_utc(now)
    expires = as_utc(token.expires_at) if token.expires_at else None
    state = "revoked" if token.revoked_at else ("expired" if expires is not None and expires <= now else "active")
    return KeyView(
        token=token,
        clinics=slugs if slugs is not None else [c.slug for c in clinics_of(token)],
        state=state,
        expiring_soon=state == "active" and expires is not None and expires - now <= EXPIRY_WARNING,
        never_expires=expires is None,
    )


def keys_of(clinic: Clinic | None, now: datetime) -> list[KeyView]:
    """The keys granting `clinic` (None: every key), newest first, with their clinics."""
    query = ApiToken.select()
    if clinic is not None:
        query = query.join(ApiTokenClinic).where(ApiTokenClinic.clinic == clinic)
    tokens = list(query.order_by(ApiToken.created_at.desc()))
    slugs: dict = {}
    for link in (
        ApiTokenClinic.select(ApiTokenClinic.token, Clinic.slug)
        .join(Clinic)
        .where(ApiTokenClinic.token.in_([t.id for t in tokens] or [None]))
    ):
        slugs.setdefault(link.token_id, []).append(link.clinic.slug)
    return [view(t, now, sorted(slugs.get(t.id, []))) for t in tokens]
