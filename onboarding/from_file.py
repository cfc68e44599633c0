"""An operator's onboarding file applied with `manage.py onboard`: it must not silently undo
what the clinic's admins changed in the staff console since the file was last applied.

The console's settings pages and the file write the same rows (`clinic_settings`), so
an old file run again would put back the office hours, vacations and default tags it
lists. Each application of a file records an `onboarding.file` event per clinic in the
audit trail; a clinic with a console change (`settings.*`) newer than its last
`onboarding.file` event is refused, naming the change, unless the operator says to
overwrite. A clinic with console changes that was never onboarded from a file since
the trail began counts as changed: the refusal is the safe side."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from models import Actor, AuditEvent, Clinic
from onboarding.base import OnboardingError
from onboarding.writer import onboard
from plumbing.clock import iso_utc
from plumbing.crypto import Keys
from plumbing.database import db

FILE_ACTION = "onboarding.file"


def console_changes(slugs: list[str]) -> list[str]:
    """For each clinic named in a file that has a console change since the file was last
    applied: a line naming the clinic and its latest change (what, who, when)."""
    found = []
    for clinic in Clinic.select().where(Clinic.slug.in_(slugs)).order_by(Clinic.slug):
        events = AuditEvent.select().where(AuditEvent.clinic_id == clinic.id)
        # By id, the trail's order of commits' inserts (not `at`: the clock may be set back).
        changed = events.where(AuditEvent.action.startswith("settings.")).order_by(AuditEvent.id.desc()).first()
        applied = events.where(AuditEvent.action == FILE_ACTION).order_by(AuditEvent.id.desc()).first()
        if changed is not None and (applied is None or changed.id > applied.id):
            found.append(
                f"{clinic.slug}: {changed.action} by {changed.actor_kind}:{changed.actor_name} at {iso_utc(changed.at)}"
            )
    return found


def apply_file(
    document: dict[str, Any], *, secret_key: Keys, actor: Actor, now: datetime, overwrite: bool = False
) -> str:
    """`onboard` the document, refusing (OnboardingError, nothing written) when one of its
    clinics was changed in the console since the file was last applied, unless
    `overwrite`; records the application for each of its clinics. Returns the summary."""
    clinics = document.get("clinics") if isinstance(document, dict) else None  # else onboard says what is wrong
    slugs = [c["slug"] for c in clinics or [] if isinstance(c, dict) and isinstance(c.get("slug"), str)]
    with db.atomic():
        changed = console_changes(slugs)
        if changed and not overwrite:
            raise OnboardingError(
                "clinics",
                "changed in the staff console since this file was last applied, and applying it "
                "would undo what it lists: " + "; ".join(changed) + ". Put those changes into the file "
                "(manage.py audit --clinic SLUG lists them) or run again with --overwrite-console-changes",
            )
        summary = onboard(document, secret_key=secret_key, now=now)
        for clinic in Clinic.select().where(Clinic.slug.in_(slugs)):
            AuditEvent.record(actor, clinic, FILE_ACTION, None, {"overwroteConsoleChanges": bool(changed)}, at=now)
    return summary
