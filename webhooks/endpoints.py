"""A clinic's webhook endpoints: added with an https URL the server may call (the rules of
every server-side fetch: safe_fetch), the event types wanted, and a signing secret shown
once; the secret rotated with an overlap (both sign meanwhile); disabled and enabled again.
Every change is audited in its transaction. The secret is stored encrypted with SECRET_KEY's
key ring, never in clear, and never logged."""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from config import Config
from models import Actor, AuditEvent, Clinic, Outbox, WebhookEndpoint
from models.change_events import TOPIC, TYPES
from plumbing.clock import as_utc
from plumbing.database import db
from plumbing.errors import Invalid, NotFound
from safe_fetch import UnsafeURL, validate_url

#: A rotation's overlap: the previous secret still signs this long.
OVERLAP = timedelta(hours=24)
#: Endpoints a clinic may have.
PER_CLINIC = 10


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def check_url(url: str, config: Config) -> str:
    """The URL as it will be called, or `Invalid`: https, a public host name (no address,
    no internal name, no odd port), as for a recording's link."""
    try:
        return validate_url(url.strip(), allow_loopback=config.unsafe_allow_loopback_fetch)
    except UnsafeURL as exc:
        raise Invalid(f"url: {exc.reason}") from None


def check_types(types: Sequence[str]) -> list[str]:
    unknown = sorted(set(types) - set(TYPES))
    if unknown:
        raise Invalid(f"eventTypes: unknown: {', '.join(unknown)} (known: {', '.join(TYPES)})")
    return sorted(set(types))


def add(
    clinic: Clinic,
    url: str,
    types: Sequence[str],
    config: Config,
    actor: Actor,
    now: datetime,
    *,
    description: str = "",
) -> tuple[WebhookEndpoint, str]:
    """A new endpoint of the clinic and its secret (shown once: only its encryption is kept)."""
    checked = check_url(url, config)
    wanted = check_types(types)
    if WebhookEndpoint.select().where(WebhookEndpoint.clinic == clinic).count() >= PER_CLINIC:
        raise Invalid(f"a clinic has at most {PER_CLINIC} webhook endpoints")
    secret = new_secret()
    with db.atomic():
        endpoint = WebhookEndpoint.create(
            clinic=clinic,
            url=checked,
            event_types=json.dumps(wanted),
            description=description[:200],
            secret_encrypted=config.secret_keys.encrypt(secret),
            created_at=as_utc(now),
        )
        AuditEvent.record(
            actor, clinic, "webhook.add", ("webhook_endpoint", endpoint.id), {"eventTypes": wanted}, at=now
        )
    return endpoint, secret


def of_clinic(clinic: Clinic, endpoint_id: uuid.UUID | str) -> WebhookEndpoint:
    try:
        wanted = uuid.UUID(str(endpoint_id))
    except ValueError:
        raise NotFound("No such webhook endpoint.", code="NOT_FOUND") from None
    endpoint = WebhookEndpoint.get_or_none((WebhookEndpoint.id == wanted) & (WebhookEndpoint.clinic == clinic))
    if endpoint is None:
        raise NotFound("No such webhook endpoint.", code="NOT_FOUND")
    return endpoint


def rotate(endpoint: WebhookEndpoint, config: Config, actor: Actor, now: datetime) -> str:
    """A new secret (shown once); the current one keeps signing beside it for `OVERLAP`."""
    secret = new_secret()
    with db.atomic():
        WebhookEndpoint.update(
            secret_encrypted=config.secret_keys.encrypt(secret),
            previous_secret_encrypted=endpoint.secret_encrypted,
            previous_until=as_utc(now) + OVERLAP,
        ).where(WebhookEndpoint.id == endpoint.id).execute()
        AuditEvent.record(actor, endpoint.clinic_id, "webhook.rotate", ("webhook_endpoint", endpoint.id), {}, at=now)
    return secret


def set_enabled(endpoint: WebhookEndpoint, enabled: bool, actor: Actor, now: datetime) -> None:
    with db.atomic():
        WebhookEndpoint.update(
            disabled_at=None if enabled else as_utc(now),
            disabled_reason=None if enabled else "by_admin",
            failures=0,
            failing_since=None,
            paused_until=None,
        ).where(WebhookEndpoint.id == endpoint.id).execute()
        AuditEvent.record(
            actor,
            endpoint.clinic_id,
            "webhook.enable" if enabled else "webhook.disable",
            ("webhook_endpoint", endpoint.id),
            {},
            at=now,
        )


def remove(endpoint: WebhookEndpoint, actor: Actor, now: datetime) -> None:
    with db.atomic():
        WebhookEndpoint.delete().where(WebhookEndpoint.id == endpoint.id).execute()
        AuditEvent.record(actor, endpoint.clinic_id, "webhook.remove", ("webhook_endpoint", endpoint.id), {}, at=now)


def send_again(clinic: Clinic, delivery_id: int, actor: Actor, now: datetime) -> bool:
    """A delivery of the clinic's (delivered or failed) written again as a new one of the
    same event to the same endpoint, due now ("Send again"); False when it or its endpoint
    is gone."""
    row = Outbox.get_or_none((Outbox.id == delivery_id) & (Outbox.topic == TOPIC) & (Outbox.clinic_id == clinic.id))
    if row is None or WebhookEndpoint.get_or_none(WebhookEndpoint.id == row.data.get("endpoint")) is None:
        return False
    with db.atomic():
        Outbox.add(TOPIC, row.data, now, clinic_id=row.clinic_id, group_key=row.group_key)
        AuditEvent.record(
            actor,
            clinic,
            "webhook.send_again",
            ("webhook_endpoint", row.data.get("endpoint")),
            {"event": row.data.get("event")},
            at=now,
        )
    return True
