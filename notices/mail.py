"""Writing and sending one e-mail of the outbox (a `mail` row): its recipient resolved
now, its words in the recipient's language, its links to the console at PUBLIC_BASE_URL.
A set-password link is made here, as the e-mail is written (only its hash is stored, and
nothing secret waits in the outbox): a retry makes a new one, and the last sent works.

`deliver` raises `plumbing.smtp.MailError` when the server did not take the e-mail (the
worker's job retries a transient one); it returns a short word otherwise."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from config import Config
from models import Actor, ApiToken, ApiTokenClinic, AuditEvent, Clinic, Outbox, PatientRequest
from notices import console_links, people
from notices.compose import N_, Composer, Written
from plumbing import catalogue, smtp
from plumbing.clock import as_utc
from plumbing.database import db
from staff import accounts

log = logging.getLogger(__name__)

#: Why a key was refused, in the e-mail's words (after "the API key X, which ...").
REASONS = {"expired": N_("has expired"), "revoked": N_("was revoked")}
WORKER = Actor("operator", "worker")


@dataclass(frozen=True)
class Sender:
    """What a worker needs to send: its settings and the templates, loaded once."""

    config: Config
    composer: Composer

    @classmethod
    def build(cls, config: Config) -> Sender:
        return cls(config, Composer())

    def url(self, path: str) -> str:
        return self.config.public_base_url.rstrip("/") + path


def _when(moment: datetime | str, clinic: Clinic | None, language: str) -> str:
    value = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    return catalogue.local_time(value, clinic.timezone if clinic else "UTC", language)


#: Why an endpoint was disabled, as the e-mail says it.
WEBHOOK_REASONS = {
    "gone": N_("its receiver answered that it is gone (410)"),
    "failing": N_("every delivery to it failed for days"),
}


def compose(row: Outbox, sender: Sender, recipient: people.Recipient, now: datetime) -> Written | None:
    """The e-mail of `row` for `recipient`; None when what it is about is gone."""
    data: dict[str, Any] = row.data
    name, language = data["template"], recipient.language
    tr = sender.composer.tr(language)
    clinic = Clinic.get_or_none(Clinic.id == uuid.UUID(data["clinic"])) if data.get("clinic") else None
    values: dict[str, Any]
    if name == "urgent":
        if clinic is None:
            return None
        wanted = [uuid.UUID(i) for i in data["requests"]]
        requests = list(
            PatientRequest.select(PatientRequest.id, PatientRequest.created_at)
            .where(PatientRequest.id.in_(wanted) & (PatientRequest.clinic == clinic.id))
            .order_by(PatientRequest.created_at)
        )
        if not requests:
            return None
        values = {
            "clinic": clinic.name,
            "requests": [
                {"url": sender.url(console_links.request(r.id)), "at": _when(r.created_at, clinic, language)}
                for r in requests
            ],
            "inbox_url": sender.url(console_links.INBOX),
            "account_url": sender.url(console_links.ACCOUNT),
            "to_staff": "user" in data["to"],
            "subject": {"clinic": clinic.name},
        }
    elif name in ("key_expiring", "key_refused"):
        token = ApiToken.get_or_none(ApiToken.id == uuid.UUID(data["token"]))
        if token is None:
            return None
        served = list(
            Clinic.select().join(ApiTokenClinic).where(ApiTokenClinic.token == token.id).order_by(Clinic.name)
        )
        home = clinic or (served[0] if served else None)
        keys_url = sender.url(console_links.api_keys(home.slug) if home else console_links.API_KEYS)
        if name == "key_expiring":
            if token.expires_at is None:
                return None
            left = max(1, round((as_utc(token.expires_at) - as_utc(now)).total_seconds() / 86400))
            values = {
                "key": token.name,
                "days": left,
                "expires": _when(token.expires_at, home, language),
                "clinics": ", ".join(c.name for c in served) or "–",
                "keys_url": keys_url,
                "subject": {"key": token.name, "num": left},
            }
        else:
            reason = tr.gettext(REASONS.get(data.get("reason", ""), REASONS["expired"]))
            values = {
                "key": token.name,
                "reason": reason,
                "clinic": clinic.name if clinic else "–",
                "at": _when(data.get("at") or row.created_at, clinic, language),
                "keys_url": keys_url,
                "subject": {"key": token.name, "reason": reason},
            }
    elif name == "webhook_disabled":
        if clinic is None:
            return None
        reason = WEBHOOK_REASONS.get(data.get("reason", ""), WEBHOOK_REASONS["failing"])
        values = {
            "clinic": clinic.name,
            "reason": tr.gettext(reason),
            "at": _when(data.get("at") or row.created_at, clinic, language),
            "webhooks_url": sender.url(console_links.webhooks(clinic.slug)),
            "subject": {"clinic": clinic.name},
        }
    elif name in ("password_reset", "welcome", "password_link"):
        user = recipient.user
        if user is None:
            return None
        if name == "password_reset":
            lifetime = timedelta(minutes=sender.config.console_reset_link_minutes)
        else:
            lifetime = timedelta(hours=sender.config.console_password_link_hours)
        token_text = accounts.issue_mailed_link(user, lifetime, now)
        if token_text is None:
            return None
        values = {
            "url": sender.url(console_links.password_link(token_text, language)),
            "email": user.email,
            "name": user.name,
            "clinic": clinic.name if clinic else "",
            "minutes": lifetime.total_seconds() / 60,
            "hours": lifetime.total_seconds() / 3600,
            "subject": {},
        }
    else:
        raise ValueError(f"no e-mail template {name!r}")
    return sender.composer.write(name, language, **values)


def deliver(row: Outbox, sender: Sender, now: datetime) -> str:
    """Send the e-mail of a `mail` row (needs a database connection, none in a transaction)."""
    data = row.data
    config = sender.config
    if not config.mail_enabled:
        return "mail_off"
    recipient = people.resolve(data["to"], config)
    if recipient is None:
        return "nobody"
    written = compose(row, sender, recipient, now)
    if written is None:
        return "gone"
    message = smtp.message(
        config.mail_from,
        recipient.address,
        written.subject,
        written.text,
        written.html,
        language=written.language,
        # The outbox row's id: a mailbox's copy found in the worker's log (never personal data).
        headers={"X-Clinic-Notice": data["template"], "X-Clinic-Outbox-Id": str(row.id)},
    )
    smtp.send(smtp.Server.parse(config.smtp_url), message, ca_file=config.smtp_ca_bundle)
    if data["template"] == "urgent":
        # Audited that it went (to whom: staff or the on-call address, never the address).
        with db.atomic():
            AuditEvent.record(
                WORKER,
                uuid.UUID(data["clinic"]),
                "notice.urgent_sent",
                ("patient_request", data["requests"][0]),
                {"requests": len(data["requests"]), "toStaff": "user" in data["to"]},
                at=now,
            )
    return "sent"
