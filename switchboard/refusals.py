"""Refused hand-offs: every `recording-complete` answered 4xx after its token was
authenticated is recorded, and so is a 401 for a key of the clinic that expired or was
revoked (`record_key`, with the reason: its administrators are told, once per key per day),
so that an operator and the clinic see a failing switchboard before anyone notices missing
voicemails (a switchboard does not retry a 4xx).

Recorded: when, the clinic (as the URL named it), the token, the `CallSid` when the body was
read and had one, the status, the code and the message. Never the body, and never a URL's
query string. Kept `REFUSED_HANDOFF_RETENTION_DAYS` (the worker's periodic purge), listed by
`manage.py calls --refused`, counted in /metrics (`clinic_handoffs_refused_total`).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from models import Clinic, Outbox, RefusedHandoff
from plumbing.clock import as_utc
from plumbing.database import db

#: A rate-limited token is recorded at most once per this many seconds per process (its
#: every 429 is still counted in /metrics): a flood must not become a flood of inserts.
RATE_LIMITED_EVERY = 60.0
_URL_QUERY = re.compile(r"(https?://[^\s?#'\"]*)[?#][^\s'\"]*", re.IGNORECASE)
_last_rate_limited: dict[uuid.UUID, float] = {}
_lock = threading.Lock()


def redacted(message: str) -> str:
    """`message` with any URL's query string and fragment cut (they carry signatures)."""
    return _URL_QUERY.sub(r"\1?…", message)[:500]


def record(
    clinic_slug: str,
    clinic_id: uuid.UUID | None,
    token_id: uuid.UUID | None,
    call_sid: str | None,
    status: int,
    code: str,
    message: str,
) -> bool:
    """Store one refusal (its own small transaction); False when a repeated 429 of the same
    token within `RATE_LIMITED_EVERY` is only counted."""
    if status == 429 and token_id is not None:
        now = time.monotonic()
        with _lock:
            if now - _last_rate_limited.get(token_id, -RATE_LIMITED_EVERY) < RATE_LIMITED_EVERY:
                return False
            if len(_last_rate_limited) > 10_000:
                _last_rate_limited.clear()
            _last_rate_limited[token_id] = now
    RefusedHandoff.insert(
        clinic_slug=clinic_slug[:64],
        clinic_id=clinic_id,
        token_id=token_id,
        call_sid=call_sid[:200] if call_sid else None,
        status=status,
        code=code[:40],
        message=redacted(message),
    ).execute()
    return True


#: What a refused key's hand-off says, as its answer did.
KEY_MESSAGE = "Invalid, expired or revoked token."


def record_key(clinic: Clinic, token_id: uuid.UUID, reason: str, now: datetime) -> bool:
    """A hand-off refused (401) for a key of `clinic` that expired or was revoked
    (`reason`): recorded, and its notice written in the same transaction, once per key per
    day of the clinic (the outbox's dedup key: however many calls are refused, one e-mail).
    Whether the notice was new today."""
    day = as_utc(now).replace(tzinfo=ZoneInfo("UTC")).astimezone(ZoneInfo(clinic.timezone)).date().isoformat()
    with db.atomic():
        RefusedHandoff.insert(
            at=as_utc(now),
            clinic_slug=clinic.slug,
            clinic_id=clinic.id,
            token_id=token_id,
            status=401,
            code="UNAUTHORIZED",
            message=KEY_MESSAGE,
            reason=reason,
        ).execute()
        told = Outbox.add(
            "key.refused",
            {"token": str(token_id), "reason": reason, "clinic": str(clinic.id)},
            now,
            clinic_id=clinic.id,
            dedup_key=f"key.refused:{token_id}:{day}",
        )
    return told is not None


def latest(limit: int = 20, clinic_slug: str | None = None, clinic_id: uuid.UUID | None = None) -> list[RefusedHandoff]:
    query = RefusedHandoff.select()
    if clinic_slug:
        query = query.where(RefusedHandoff.clinic_slug == clinic_slug)
    if clinic_id is not None:
        query = query.where(RefusedHandoff.clinic_id == clinic_id)
    return list(query.order_by(RefusedHandoff.at.desc(), RefusedHandoff.id.desc()).limit(limit))


def purge(now: datetime, retention_days: int) -> int:
    """Delete the refusals older than the retention; returns how many."""
    cutoff = as_utc(now) - timedelta(days=retention_days)
    return RefusedHandoff.delete().where(RefusedHandoff.at < cutoff).execute()
