"""The webhooks page, /console/settings/webhooks: a clinic's endpoints (added, their secret
rotated, disabled, enabled again, removed) and each one's recent deliveries (status, tries,
time taken; never a body) with "Send again". Admins only. Every rule is webhooks/endpoints.py's,
the same `manage.py webhook` follows; every write is audited in its transaction.

Every write answers 303 (post/redirect/get). A new or rotated secret reaches the page it
leads to through the session's one-time flash: shown once, never in a URL."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import falcon
import redis

from config import Config
from console import pages
from console.inbox import local_time
from console.rendering import Renderer, html, see_other
from models import Actor, ChangeEvent, Outbox, WebhookEndpoint
from models.change_events import TOPIC, TYPES, group_key
from plumbing.clock import Clock
from plumbing.errors import Invalid, NotFound
from webhooks import endpoints

log = logging.getLogger(__name__)
URL = pages.WEBHOOKS
FLASH = "webhooks"
RECENT = 10


class _WebhooksPage:
    admin_required = True

    def __init__(self, renderer: Renderer, config: Config, clock: Clock) -> None:
        self.renderer = renderer
        self.config = config
        self.clock = clock

    def render(
        self, req: falcon.Request, resp: falcon.Response, status: str = falcon.HTTP_200, error: str = ""
    ) -> None:
        session, clinic = req.context.console_session, req.context.admin_clinic
        language = session.user.language
        tr = self.renderer.translations[language]
        shown = req.context.flash.take(FLASH) if req.context.flash is not None and status == falcon.HTTP_200 else None
        views: list[dict[str, Any]] = []
        for e in WebhookEndpoint.select().where(WebhookEndpoint.clinic == clinic).order_by(WebhookEndpoint.created_at):
            rows = list(
                Outbox.select()
                .where((Outbox.topic == TOPIC) & (Outbox.group_key == group_key(e.id)))
                .order_by(Outbox.id.desc())
                .limit(RECENT)
            )
            kinds = {
                str(c.id): c.type
                for c in ChangeEvent.select(ChangeEvent.id, ChangeEvent.type).where(
                    ChangeEvent.id.in_([r.data.get("event") for r in rows] or [str(uuid.UUID(int=0))])
                )
            }
            views.append(
                {
                    "endpoint": e,
                    "types": ", ".join(e.types) or tr.gettext("all"),
                    "state": "disabled" if e.disabled_at else ("failing" if e.failures else "enabled"),
                    "deliveries": [
                        {
                            "id": r.id,
                            "when": local_time(r.done_at or r.created_at, clinic, language),
                            "type": kinds.get(r.data.get("event", ""), "–"),
                            "state": r.state,
                            "attempts": r.attempts,
                            "outcome": r.outcome or "",
                        }
                        for r in rows
                    ],
                }
            )
        html(
            resp,
            self.renderer.render(
                "console/settings/webhooks.html",
                language,
                user=session.user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=req.context.admin_clinics,
                endpoints=views,
                types=TYPES,
                error=error,
                shown=shown,
                overlap_hours=int(endpoints.OVERLAP.total_seconds() // 3600),
            ),
            status,
        )

    def show_once(self, req: falcon.Request, resp: falcon.Response, shown: dict[str, str]) -> None:
        try:
            req.context.flash.put(FLASH, shown)
        except redis.RedisError as exc:
            log.warning("webhook secret shown in the POST's answer: flash not kept (Redis: %s)", type(exc).__name__)
            resp.status = falcon.HTTP_201
            self.render(req, resp, falcon.HTTP_201)
            return
        raise see_other(pages.of_clinic(URL, req.context.admin_clinic.slug, "secret-title"))


class Webhooks(_WebhooksPage):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.render(req, resp)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form, user = req.context.form, req.context.console_session.user
        wanted = [t for t in TYPES if form.get(f"type_{t}") == "on"]
        try:
            endpoint, secret = endpoints.add(
                req.context.admin_clinic,
                form.get("url", ""),
                wanted,
                self.config,
                Actor.staff(user),
                self.clock(),
                description=form.get("description", ""),
            )
        except Invalid as exc:
            self.render(req, resp, falcon.HTTP_400, error=str(exc))
            return
        self.show_once(req, resp, {"secret": secret, "url": endpoint.url, "rotated": ""})


class WebhookAction(_WebhooksPage):
    def on_post(self, req: falcon.Request, resp: falcon.Response, endpoint_id: str) -> None:
        form, user = req.context.form, req.context.console_session.user
        try:
            endpoint = endpoints.of_clinic(req.context.admin_clinic, endpoint_id)
        except NotFound:
            raise falcon.HTTPNotFound() from None
        actor, now, do = Actor.staff(user), self.clock(), form.get("do", "")
        if do == "rotate":
            secret = endpoints.rotate(endpoint, self.config, actor, now)
            self.show_once(req, resp, {"secret": secret, "url": endpoint.url, "rotated": "yes"})
            return
        if do in ("disable", "enable"):
            endpoints.set_enabled(endpoint, do == "enable", actor, now)
        elif do == "remove":
            endpoints.remove(endpoint, actor, now)
        else:
            raise falcon.HTTPBadRequest()
        raise see_other(pages.of_clinic(URL, req.context.admin_clinic.slug))


class WebhookSendAgain(_WebhooksPage):
    def on_post(self, req: falcon.Request, resp: falcon.Response, delivery_id: str) -> None:
        clinic = req.context.admin_clinic
        try:
            wanted = int(delivery_id)
        except ValueError:
            raise falcon.HTTPNotFound() from None
        if not endpoints.send_again(clinic, wanted, Actor.staff(req.context.console_session.user), self.clock()):
            raise falcon.HTTPNotFound()
        raise see_other(pages.of_clinic(URL, clinic.slug))
