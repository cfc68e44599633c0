"""API keys never expire unnoticed, and a refused key is a notice, not a 401 in the dark.

- `expiring`: 14 and 3 days before a key expires its clinics' administrators (and
  OPERATOR_EMAIL) get an e-mail, once each: the key records the last notice given
  (`ApiToken.expiry_notice_days`), set in the transaction that writes the outbox's
  `key.expiring`. A key already replaced by a rotation is left alone (its successor serves).
- a hand-off refused for a key that expired or was revoked writes `key.refused` with its
  refusal (switchboard/refusals.py), once per key per day (the outbox's dedup key).
- `fan_out`: either event becomes one e-mail per administrator of the key's clinics and
  the operator.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from peewee import fn

from config import Config
from models import ApiToken, ApiTokenClinic, Outbox
from notices import people
from plumbing.clock import as_utc
from plumbing.database import db

#: Days before expiry a notice is given, the latest last.
NOTICE_DAYS = (14, 3)
TOPICS = ("key.expiring", "key.refused")


def _live_unreplaced(now: datetime) -> object:
    replaced = ApiToken.alias("successor")
    successors = replaced.select(replaced.id).where(replaced.rotated_from == ApiToken.id)
    return (
        ApiToken.revoked_at.is_null()
        & ApiToken.expires_at.is_null(False)
        & (ApiToken.expires_at > as_utc(now))
        & ~fn.EXISTS(successors)
    )


def expiring_count(now: datetime) -> int:
    """Keys (live, not replaced) that expire within `EXPIRY_WARNING` (the metric)."""
    return (
        ApiToken.select()
        .where(_live_unreplaced(now) & (ApiToken.expires_at <= as_utc(now) + ApiToken.EXPIRY_WARNING))
        .count()
    )


def expiring(now: datetime) -> int:
    """Write the expiry notices due at `now`; returns how many keys got one. Safe in
    every worker at once: each notice is given by a conditional update, once."""
    now = as_utc(now)
    horizon = now + timedelta(days=max(NOTICE_DAYS))
    candidates = list(
        ApiToken.select(ApiToken.id, ApiToken.expires_at, ApiToken.expiry_notice_days).where(
            _live_unreplaced(now) & (ApiToken.expires_at <= horizon)
        )
    )
    given = 0
    for token in candidates:
        assert token.expires_at is not None  # the query's
        left = as_utc(token.expires_at) - now
        days = min(d for d in NOTICE_DAYS if left <= timedelta(days=d))
        if token.expiry_notice_days is not None and token.expiry_notice_days <= days:
            continue
        with db.atomic():
            taken = (
                ApiToken.update(expiry_notice_days=days)
                .where(
                    (ApiToken.id == token.id)
                    & (ApiToken.expiry_notice_days.is_null() | (ApiToken.expiry_notice_days > days))
                )
                .execute()
            )
            if taken:
                Outbox.add("key.expiring", {"token": str(token.id), "days": days}, now)
                given += 1
    return given


def fan_out(event: Outbox, config: Config, now: datetime) -> str:
    """One e-mail per administrator of the key's clinics (a refusal: of the refused
    clinic) and the operator."""
    data = event.data
    token = ApiToken.get_or_none(ApiToken.id == uuid.UUID(data["token"]))
    if token is None:
        return "gone"
    if event.topic == "key.refused":
        clinics = [uuid.UUID(data["clinic"])]
        template = "key_refused"
    else:
        clinics = [link.clinic_id for link in ApiTokenClinic.select().where(ApiTokenClinic.token == token.id)]
        template = "key_expiring"
    everyone = [*people.admins(clinics), *([people.OPERATOR] if config.operator_email else [])]
    for to in everyone:
        Outbox.add(
            "mail",
            {"template": template, "to": to, **data, "at": as_utc(event.created_at).isoformat()},
            now,
            clinic_id=event.clinic_id,
            dedup_key=f"mail:{event.id}:{people.key_of(to)}",
        )
    return "told" if everyone else "nobody"
