"""The clinic's staff, /console/settings/staff: its admins add users (or give an existing
account of the organization a role), change roles, disable and enable accounts, make
set-password links, and require two-factor login. Admins only (`admin_required`). A write
answers 303 back to the page (post/redirect/get); a new link is shown once, on the page the
redirect leads to, through the session's one-time message (console/flash.py), or, when the
service sends e-mail, e-mailed to the user (and the page says so)."""

from __future__ import annotations

import logging
import urllib.parse
from datetime import datetime, timedelta

import falcon
import redis

from console import account_words as words
from console import pages
from console.inbox import local_time
from console.rendering import Renderer, html, see_other
from models import Actor, Clinic
from onboarding.clinic_settings import ClinicSettings, SettingsError
from plumbing.clock import Clock
from plumbing.crypto import Keys
from plumbing.errors import DomainError
from staff import accounts

log = logging.getLogger(__name__)
URL = pages.STAFF
_FLASH = "staff"


class StaffPage:
    admin_required = True

    def __init__(
        self,
        renderer: Renderer,
        clock: Clock,
        secret_key: Keys,
        link_hours: float,
        trust_forwarded_proto: bool,
        mail: bool = False,
    ) -> None:
        self.renderer = renderer
        self.clock = clock
        self.secret_key = secret_key
        self.lifetime = timedelta(hours=link_hours)
        self.trust = trust_forwarded_proto
        self.mail = mail  # set-password links go by e-mail

    def _render(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        status: str = falcon.HTTP_200,
        error: str = "",
        issued: dict[str, object] | None = None,
    ) -> None:
        session, clinic = req.context.console_session, req.context.admin_clinic
        flash = req.context.flash
        html(
            resp,
            self.renderer.render(
                "console/settings/staff.html",
                session.user.language,
                user=session.user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=req.context.admin_clinics,
                colleagues=accounts.colleagues(clinic),
                roles=words.ROLES,
                local_time=lambda moment: local_time(moment, clinic, session.user.language) if moment else "",
                error=error,
                form=req.context.form if error else {},
                issued=issued or (flash.take(_FLASH) if flash and status == falcon.HTTP_200 else None),
                link_hours=self.lifetime.total_seconds() / 3600,
                mail=self.mail,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._render(req, resp)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        clinic: Clinic = req.context.admin_clinic
        me = req.context.console_session.user
        actor = Actor.staff(me)
        form = req.context.form
        action, target, now = form.get("action", ""), form.get("user", ""), self.clock()
        tr = self.renderer.translations[me.language]
        issued = None
        try:
            if action == "add":
                user, created = accounts.add(
                    clinic, actor, form.get("email", ""), form.get("name", ""), form.get("role", ""), now
                )
                if created:
                    issued = self._link(req, clinic, actor, user.id, user.name, now, first=True)
            elif action == "role":
                accounts.change_role(clinic, actor, target, form.get("role", ""), now)
            elif action == "disable":
                accounts.disable(clinic, actor, target, me, now)
            elif action == "enable":
                accounts.enable(clinic, actor, target, now)
            elif action == "link":
                user, _ = accounts.member(clinic, target)
                issued = self._link(req, clinic, actor, user.id, user.name, now, first=not user.password_hash)
            elif action == "two-factor":
                ClinicSettings(clinic, actor, self.secret_key, now).set_two_factor(form.get("required") == "1")
            else:
                raise falcon.HTTPBadRequest()
        except DomainError as error:
            self._render(
                req,
                resp,
                falcon.HTTP_404 if error.code == "USER_NOT_FOUND" else falcon.HTTP_400,
                words.refusal(tr, error),
            )
            return
        except SettingsError as error:
            self._render(req, resp, falcon.HTTP_400, f"{error.path}: {error.message}")
            return
        if issued is not None:
            try:
                req.context.flash.put(_FLASH, issued)
            except redis.RedisError as exc:  # the link in this answer instead: shown once all the same
                log.warning("set-password link not kept for the next page (Redis: %s)", type(exc).__name__)
                self._render(req, resp, issued=issued)
                return
        raise see_other(f"{URL}?" + urllib.parse.urlencode({"clinic": clinic.slug}))

    def _link(
        self, req: falcon.Request, clinic: Clinic, actor: Actor, user_id: object, name: str, now: datetime, first: bool
    ) -> dict[str, object]:
        if self.mail:
            accounts.mail_link(clinic, actor, str(user_id), now, first=first)
            return {"name": name, "mailed": True, "first": first}
        token = accounts.issue_link(clinic, actor, str(user_id), self.lifetime, now)
        return {"name": name, "url": words.link_url(req, self.trust, token), "first": first}
