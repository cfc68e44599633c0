"""Who an e-mail goes to, named in the outbox without an address (a staff user's id, the
clinic's on-call address, the operator) and resolved only when it is written: a user
disabled or an address removed meanwhile gets nothing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from config import Config
from models import Clinic, StaffMembership, StaffUser

#: The operator reads the operations guide, which is in English.
OPERATOR_LANGUAGE = "en"


@dataclass(frozen=True)
class Recipient:
    address: str
    language: str
    name: str = ""
    user: StaffUser | None = None


def staff(user_id: uuid.UUID | str) -> dict[str, str]:
    return {"user": str(user_id)}


def on_call(clinic_id: uuid.UUID | str) -> dict[str, str]:
    return {"on_call": str(clinic_id)}


OPERATOR: dict[str, str] = {"operator": "1"}


def key_of(to: dict[str, Any]) -> str:
    """A short stable name of a recipient (for gathering its e-mails): never an address."""
    if "user" in to:
        return f"u:{to['user']}"
    if "on_call" in to:
        return f"c:{to['on_call']}"
    return "operator"


def resolve(to: dict[str, Any], config: Config) -> Recipient | None:
    """The address and language of `to` now; None when there is nobody (any more)."""
    if "user" in to:
        user = StaffUser.get_or_none(StaffUser.id == uuid.UUID(str(to["user"])))
        if user is None or user.disabled_at is not None:
            return None
        return Recipient(user.email, user.language, user.name, user)
    if "on_call" in to:
        clinic = Clinic.get_or_none(Clinic.id == uuid.UUID(str(to["on_call"])))
        if clinic is None or not clinic.urgent_notice_email:
            return None
        return Recipient(clinic.urgent_notice_email, "en" if clinic.language == "en" else "cs")
    if "operator" in to:
        return Recipient(config.operator_email, OPERATOR_LANGUAGE) if config.operator_email else None
    return None


def admins(clinic_ids: list[uuid.UUID]) -> list[dict[str, str]]:
    """The enabled administrators of the clinics, each once."""
    rows = (
        StaffMembership.select(StaffMembership.user)
        .join(StaffUser)
        .where(
            StaffMembership.clinic.in_(clinic_ids or [uuid.UUID(int=0)])
            & (StaffMembership.role == "admin")
            & StaffUser.disabled_at.is_null()
        )
        .order_by(StaffUser.email)
    )
    return [staff(user_id) for user_id in dict.fromkeys(row.user_id for row in rows)]
