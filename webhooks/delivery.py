"""One delivery of an event to one endpoint, as Standard Webhooks says: a JSON body (the
event: `id`, `type`, `occurredAt`, `clinicSlug`, `data` of ids), the headers `webhook-id`
(the event's id: the same on every try, so a receiver deduplicates by it),
`webhook-timestamp` (this try's time) and `webhook-signature` (`v1,<HMAC-SHA256>` with the
endpoint's secret, signed by the `standardwebhooks` library; during a rotation's overlap
the previous secret's signature too), POSTed by the server-side fetch (safe_fetch: a public
https address only, no redirect followed) within the timeout. 2xx is delivered."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from standardwebhooks import Webhook

from config import Config
from models import ChangeEvent, Clinic, WebhookEndpoint
from safe_fetch import FetchError, UnsafeURL, fetch

#: What a receiver's answer may hold that is read (its body is not kept).
MAX_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True)
class Attempt:
    """What came of one POST: the status (None: no answer), a short word, the time taken."""

    status: int | None
    word: str
    seconds: float

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def gone(self) -> bool:
        return self.status == 410


def body_of(event: ChangeEvent) -> str:
    clinic = Clinic.get_or_none(Clinic.id == event.clinic_id)
    return json.dumps(event.shape(clinic.slug if clinic else None), sort_keys=True, separators=(",", ":"))


def headers_of(
    event: ChangeEvent, body: str, endpoint: WebhookEndpoint, config: Config, now: datetime
) -> dict[str, str]:
    signatures = [
        Webhook(config.secret_keys.decrypt(secret)).sign(str(event.id), now, body)
        for secret in endpoint.secrets_at(now)
    ]
    return {
        "Content-Type": "application/json",
        "webhook-id": str(event.id),
        "webhook-timestamp": str(int(now.replace(tzinfo=UTC).timestamp() if now.tzinfo is None else now.timestamp())),
        "webhook-signature": " ".join(signatures),
    }


def post(event: ChangeEvent, endpoint: WebhookEndpoint, config: Config, now: datetime) -> Attempt:
    """POST the event to the endpoint once; never raises for what the receiver or the
    network did (the `Attempt` says it)."""
    body = body_of(event)
    started = time.monotonic()
    try:
        answer = fetch(
            "POST",
            endpoint.url,
            headers=headers_of(event, body, endpoint, config, now),
            body=body.encode(),
            max_bytes=MAX_ANSWER_BYTES,
            timeout=config.webhook_timeout_seconds,
            max_redirects=0,
            allow_loopback=config.unsafe_allow_loopback_fetch,
            ca_certs=config.fetch_ca_bundle or None,
            raise_for_status=False,
        )
    except UnsafeURL:
        return Attempt(None, "unsafe_address", time.monotonic() - started)
    except FetchError as exc:
        if exc.status is not None:
            word = f"http_{exc.status}"
        else:
            word = "timeout" if "time limit" in str(exc) else "no_answer"
        return Attempt(exc.status, word, time.monotonic() - started)
    return Attempt(answer.status, f"http_{answer.status}", time.monotonic() - started)
