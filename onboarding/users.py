"""A document's `users`: staff console logins and their roles in its clinics, checked
against the document and the other organizations, then written."""

from __future__ import annotations

import uuid
from typing import Any

from models import Clinic, StaffMembership, StaffSession, StaffUser
from onboarding.base import OnboardingError, RowWriter, stable_id, unique
from staff import passwords


def plan_users(items: list[dict[str, Any]], clinics: list[dict[str, Any]], org_id: uuid.UUID) -> list[dict[str, Any]]:
    """Staff logins: e-mails unique, clinics among this document's, a password hash
    Argon2 can read (required for a new user: else nobody could log in), and no
    account that works for another organization (writing it would take it over)."""
    slugs = {c["slug"]: c["id"] for c in clinics}
    unique([StaffUser.normal_email(u["email"]) for u in items], "users", "email")
    out = []
    for i, u in enumerate(items):
        at = f"users[{i}]"
        email = StaffUser.normal_email(u["email"])
        existing = StaffUser.by_email(email)
        if existing is not None:
            foreign = (
                StaffMembership.select()
                .join(Clinic)
                .where((StaffMembership.user == existing) & (Clinic.organization != org_id))
                .exists()
            )
            if foreign:
                raise OnboardingError(f"{at}.email", f"{email} works for another organization")
        if u.get("passwordHash") is not None and not passwords.readable_hash(u["passwordHash"]):
            raise OnboardingError(f"{at}.passwordHash", "not an Argon2id hash (manage.py user hash-password)")
        if existing is None and not u.get("passwordHash"):
            raise OnboardingError(f"{at}.passwordHash", "required for a new user")
        roles: dict[uuid.UUID, str] = {}
        for j, m in enumerate(u["clinics"]):
            if m["clinic"] not in slugs:
                raise OnboardingError(f"{at}.clinics[{j}].clinic", f"no clinic {m['clinic']!r} in this document")
            roles[slugs[m["clinic"]]] = m["role"]
        out.append(
            {
                "id": existing.id if existing else stable_id("staff_user", email),
                "email": email,
                "name": u["name"],
                "language": u.get("language"),
                "password_hash": u.get("passwordHash"),
                "disabled": u.get("disabled"),
                "roles": roles,
            }
        )
    return out


def write_user(w: RowWriter, u: dict[str, Any], clinic_ids: list[uuid.UUID]) -> None:
    """A user's row and their roles in this document's clinics (the document's list is the
    truth there; memberships elsewhere are not this document's). A new password hash or a
    disable ends the user's sessions, as `manage.py user reset-password` and `disable` do."""
    before = StaffUser.get_or_none(StaffUser.id == u["id"])
    values: dict[str, Any] = {"email": u["email"], "name": u["name"]}
    if u["language"]:
        values["language"] = u["language"]
    if u["password_hash"]:
        values["password_hash"] = u["password_hash"]
    if u["disabled"] is not None:
        disabled = before.disabled_at if before and before.disabled_at else w.now
        values["disabled_at"] = disabled if u["disabled"] else None
    user = w.upsert(StaffUser, u["id"], values)
    if before is not None and (
        ("password_hash" in values and values["password_hash"] != before.password_hash)
        or (u["disabled"] and before.disabled_at is None)
    ):
        StaffSession.delete().where(StaffSession.user == user.id).execute()
    have = {
        m.clinic_id: m
        for m in StaffMembership.select().where(
            (StaffMembership.user == user.id) & StaffMembership.clinic.in_(clinic_ids)
        )
    }
    for clinic_id, membership in have.items():
        if clinic_id not in u["roles"]:
            w.changes += 1
            membership.delete_instance()
        elif membership.role != u["roles"][clinic_id]:
            w.changes += 1
            StaffMembership.update(role=u["roles"][clinic_id]).where(StaffMembership.id == membership.id).execute()
    for clinic_id, role in u["roles"].items():
        if clinic_id not in have:
            w.changes += 1
            StaffMembership.create(user=user.id, clinic=clinic_id, role=role)
