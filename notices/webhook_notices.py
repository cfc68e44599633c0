"""A clinic's webhook endpoint disabled (its receiver answered 410, or every delivery failed
for days: jobs/webhooks.py): one e-mail to each administrator of the clinic."""

from __future__ import annotations

import uuid
from datetime import datetime

from config import Config
from models import Outbox
from notices import people
from plumbing.clock import as_utc


def fan_out(event: Outbox, config: Config, now: datetime) -> str:
    if event.clinic_id is None:
        return "nobody"
    everyone = people.admins([uuid.UUID(str(event.clinic_id))])
    for to in everyone:
        Outbox.add(
            "mail",
            {
                "template": "webhook_disabled",
                "to": to,
                "clinic": str(event.clinic_id),
                "reason": event.data.get("reason", "failing"),
                "at": as_utc(event.created_at).isoformat(),
            },
            now,
            clinic_id=event.clinic_id,
            dedup_key=f"mail:{event.id}:{people.key_of(to)}",
        )
    return "told" if everyone else "nobody"
