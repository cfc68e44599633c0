"""The audit events of staff accounts: an account's change is written to every clinic the
user works for, so each clinic's admins see it on their audit page."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from models import Actor, AuditEvent, Clinic, StaffUser


def record(
    actor: Actor,
    user: StaffUser,
    action: str,
    details: dict[str, Any] | None = None,
    clinics: list[Clinic] | None = None,
    *,
    now: datetime,
) -> None:
    """Append `action` on `user` in each of `clinics` (default: the user's); inside the
    transaction of the write it records. A user of no clinic still leaves one event (of no clinic)."""
    where: list[Clinic | None] = list(clinics if clinics is not None else user.clinics())
    for clinic in where or [None]:
        AuditEvent.record(actor, clinic, action, user, details, at=now)
