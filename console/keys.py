"""The API keys page, /console/settings/api-keys: list, create, rotate and revoke a
clinic's keys. Admins only (`admin_required`: ConsoleSession lets the clinic's admins in,
from `?clinic=` or the form's `clinic`). Every rule is `api_keys.rules`'s, the same
`manage.py token` follows.

Every write answers 303 (post/redirect/get: a reload never writes again). A new key's text
reaches the page it leads to through the session's one-time flash (console/flash.py):
shown once, never in a URL, gone on reload."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import falcon
import redis

from api_keys import rules
from console import audit_kinds, audit_words, pages
from console.inbox import local_time
from console.rendering import N_, Renderer, html, see_other
from models import Actor, ApiToken, Clinic
from plumbing.clock import Clock, as_utc
from switchboard import refusals

log = logging.getLogger(__name__)
URL = pages.API_KEYS
FLASH = "api-keys"  # the page's one-time messages (console/flash.py)
#: Why a hand-off was refused for its key (`RefusedHandoff.reason`), as the page says it.
REFUSAL_REASONS = {"expired": N_("the key had expired"), "revoked": N_("the key was revoked")}


def _local_input(value: datetime, clinic: Clinic) -> str:
    """A naive UTC time as a datetime-local input's value in the clinic's timezone."""
    local = as_utc(value).replace(tzinfo=ZoneInfo("UTC")).astimezone(ZoneInfo(clinic.timezone))
    return local.replace(tzinfo=None, microsecond=0).isoformat()


def _from_local_input(text: str, clinic: Clinic) -> datetime | None:
    try:
        return as_utc(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(clinic.timezone)))
    except ValueError:
        return None


def _days(text: str) -> int | None:
    try:
        return int(text) if text.strip() else None
    except ValueError:
        raise rules.KeyRuleError("The expiry must be between 1 and 365 days ahead.") from None


class _KeysPage:
    admin_required = True

    def __init__(self, renderer: Renderer, clock: Clock) -> None:
        self.renderer = renderer
        self.clock = clock

    def render(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        status: str = falcon.HTTP_200,
        error: str = "",
        created: dict[str, Any] | None = None,
    ) -> None:
        session, clinic = req.context.console_session, req.context.admin_clinic
        language, now = session.user.language, self.clock()
        tr = self.renderer.translations[language]
        if created is None and status == falcon.HTTP_200 and req.context.flash is not None:
            created = req.context.flash.take(FLASH)

        def when(value: datetime | None) -> str:
            return local_time(value, clinic, language) if value else ""

        views = rules.keys_of(clinic, now)
        words = audit_kinds.Words(tr, clinic, language)
        audit_words.read_names(
            words,
            [
                *(("clinic", slug) for key in views for slug in key.clinics),
                *(
                    ref
                    for key in views
                    for ref in audit_words.who_refs(*audit_words.parse_created_by(key.token.created_by))
                ),
            ],
        )
        keys = [
            {
                "view": key,
                "clinics": audit_kinds.CLINICS.show(key.clinics, words),
                "scopes": audit_kinds.SCOPES.show(key.token.scopes, words),
                "created_by": audit_words.who(*audit_words.parse_created_by(key.token.created_by), None, words)
                if key.token.created_by
                else None,
                "created": when(key.token.created_at),
                "last_used": when(key.token.last_used_at),
                "expires": when(key.token.expires_at),
                "rotatable": rules.may_rotate(key, req.context.admin_clinics),
            }
            for key in views
        ]
        refused = refusals.latest(20, clinic_id=clinic.id)
        names = {
            t.id: t.name
            for t in ApiToken.select(ApiToken.id, ApiToken.name).where(
                ApiToken.id.in_([r.token_id for r in refused if r.token_id] or [uuid.UUID(int=0)])
            )
        }
        html(
            resp,
            self.renderer.render(
                "console/settings/api_keys.html",
                language,
                user=session.user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=req.context.admin_clinics,
                keys=keys,
                refused=[
                    {
                        "at": when(r.at),
                        "key": names.get(r.token_id, "–") if r.token_id else "–",
                        "why": tr.gettext(REFUSAL_REASONS[r.reason]) if r.reason in REFUSAL_REASONS else None,
                        "code": f"{r.status} {r.code}",
                        "call_sid": r.call_sid,
                    }
                    for r in refused
                ],
                error=tr.gettext(error) if error else "",
                created=created,
                default_days=rules.DEFAULT_LIFETIME.days,
                max_days=rules.MAX_LIFETIME.days,
                rotate_default=_local_input(as_utc(now) + timedelta(days=1), clinic),
                rotate_max=_local_input(as_utc(now) + rules.MAX_OVERLAP, clinic),
            ),
            status,
        )

    def shown_once(self, req: falcon.Request, resp: falcon.Response, created: dict[str, Any]) -> None:
        """After a key is made: 303 to the list, which shows its text once (the session's
        flash). Should Redis fail, the text is in this answer instead (201): a key made
        and never shown would be a key nobody can use."""
        try:
            req.context.flash.put(FLASH, created)
        except redis.RedisError as exc:
            log.warning("new key shown in the POST's answer: flash not kept (Redis: %s)", type(exc).__name__)
            self.render(req, resp, falcon.HTTP_201, created=created)
            return
        raise see_other(pages.of_clinic(URL, req.context.admin_clinic.slug, "new-key-title"))

    def token(self, req: falcon.Request, token_id: str, allowed: Callable) -> ApiToken:
        """The key of the URL if this admin may act on it; 404 otherwise (another clinic's
        key is not told apart from no key)."""
        try:
            token = ApiToken.get_or_none(ApiToken.id == uuid.UUID(token_id))
        except ValueError:
            token = None
        if token is None or not allowed(token, req.context.admin_clinics):
            raise falcon.HTTPNotFound()
        return token


class ApiKeys(_KeysPage):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.render(req, resp)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form, user = req.context.form, req.context.console_session.user
        clinics = [c for c in req.context.admin_clinics if form.get(f"grant_{c.slug}") == "on"]
        scopes = [s for s in ApiToken.SCOPES if form.get(f"scope_{s}") == "on"]
        try:
            token, text = rules.issue(
                Actor.staff(user),
                form.get("name", ""),
                clinics,
                scopes,
                self.clock(),
                rules.lifetime(_days(form.get("expires_in_days", ""))),
            )
        except rules.KeyRuleError as exc:
            self.render(req, resp, falcon.HTTP_400, error=str(exc))
            return
        self.shown_once(req, resp, {"text": text, "name": token.name, "id": str(token.id), "rotated": False})


class ApiKeyRotation(_KeysPage):
    def on_post(self, req: falcon.Request, resp: falcon.Response, token_id: str) -> None:
        form, user = req.context.form, req.context.console_session.user
        token = self.token(req, token_id, rules.may_rotate)
        until = _from_local_input(form.get("old_until", ""), req.context.admin_clinic)
        try:
            if until is None:
                raise rules.KeyRuleError("The old key may keep working for at most 7 days.")
            new, text = rules.rotate(
                Actor.staff(user), token, until, self.clock(), rules.lifetime(_days(form.get("expires_in_days", "")))
            )
        except rules.KeyRuleError as exc:
            self.render(req, resp, falcon.HTTP_400, error=str(exc))
            return
        self.shown_once(
            req,
            resp,
            {
                "text": text,
                "name": new.name,
                "id": str(new.id),
                "rotated": True,
                "old_until": local_time(until, req.context.admin_clinic, user.language),
            },
        )


class ApiKeyRevocation(_KeysPage):
    def on_post(self, req: falcon.Request, resp: falcon.Response, token_id: str) -> None:
        token = self.token(req, token_id, rules.may_revoke)
        rules.revoke(Actor.staff(req.context.console_session.user), token, self.clock())
        raise see_other(pages.of_clinic(URL, req.context.admin_clinic.slug))
