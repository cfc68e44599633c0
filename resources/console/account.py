"""Logging in and out, and the user's language."""

from __future__ import annotations

from collections.abc import Callable

import falcon

from console import audit, sessions
from console.middleware import PREFIX, back_to
from console.rendering import (
    DEFAULT_LANGUAGE,
    LANGUAGE_COOKIE,
    LANGUAGES,
    N_,
    Renderer,
    cookie,
    html,
    is_secure,
    see_other,
)
from console.throttle import LoginThrottle
from models import StaffUser
from plumbing.database import db
from staff import passwords


class ConsoleLogin:
    def __init__(
        self, renderer: Renderer, throttle: LoginThrottle, clock: Callable, trust_forwarded_proto: bool, max_age: int
    ) -> None:
        self.renderer = renderer
        self.throttle = throttle
        self.clock = clock
        self.trust = trust_forwarded_proto
        self.max_age = max_age

    def _language(self, req: falcon.Request, chosen: str | None = None) -> str:
        for candidate in (chosen, req.get_param("lang"), cookie(req, LANGUAGE_COOKIE)):
            if candidate in LANGUAGES:
                return candidate
        return DEFAULT_LANGUAGE

    def _form(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        language: str,
        status: str = falcon.HTTP_200,
        message: str = "",
        email: str = "",
        **values: object,
    ) -> None:
        token = cookie(req, sessions.PRELOGIN_COOKIE)
        if not token or len(token) > 100:
            token = sessions.new_token()
        secure = is_secure(req, self.trust)
        resp.set_cookie(sessions.PRELOGIN_COOKIE, token, path=PREFIX, http_only=True, secure=secure, same_site="Lax")
        resp.set_cookie(
            LANGUAGE_COOKIE, language, path=PREFIX, http_only=True, secure=secure, same_site="Lax", max_age=365 * 86400
        )
        tr = self.renderer.translations[language]
        html(
            resp,
            self.renderer.render(
                "console/login.html",
                language,
                user=None,
                csrf_token=token,
                message=tr.gettext(message) % values if message else "",
                email=email,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.context.console_session is not None:
            raise see_other(PREFIX + "/")
        self._form(req, resp, self._language(req))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form = req.context.form
        email, password = form.get("email", "")[:254], form.get("password", "")[:1024]
        language = self._language(req, form.get("lang"))
        address = req.context.client_address or "unknown"
        wait = self.throttle.blocked(email, address)
        if wait:
            resp.set_header("Retry-After", str(wait))
            self._form(
                req,
                resp,
                language,
                falcon.HTTP_429,
                N_("Too many failed logins. Try again in %(minutes)d min."),
                email,
                minutes=-(-wait // 60),
            )
            return
        user = StaffUser.by_email(email) if email else None
        # An unknown e-mail is checked against a dummy hash: the same answer in the same time.
        ok = passwords.verify(user.password_hash if user else None, password)
        if not ok or user is None or user.disabled_at is not None:
            self.throttle.failed(email, address)
            audit.login_failed(user)
            self._form(req, resp, language, falcon.HTTP_401, N_("Wrong e-mail or password."), email)
            return
        self.throttle.succeeded(email)
        with db.atomic():
            token = sessions.start(user, self.clock(), address, req.user_agent)
            audit.logged_in(user)
        resp.set_cookie(
            sessions.COOKIE,
            token,
            path=PREFIX,
            http_only=True,
            secure=is_secure(req, self.trust),
            same_site="Lax",
            max_age=self.max_age,
        )
        resp.unset_cookie(sessions.PRELOGIN_COOKIE, path=PREFIX)  # a fresh one for the next login
        raise see_other(PREFIX + "/")


class ConsoleLanguage:
    """The user's language (Czech or English), switched from the header; kept on the
    account, so every later page and session uses it. Back to the page it was switched on."""

    login_required = True

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        user: StaffUser = req.context.console_session.user
        language = req.context.form.get("language")
        if language not in LANGUAGES:
            raise falcon.HTTPBadRequest()
        StaffUser.update(language=language).where(StaffUser.id == user.id).execute()
        raise see_other(back_to(req))  # the page the switch was on


class ConsoleLogout:
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        sessions.end(cookie(req, sessions.COOKIE))
        resp.unset_cookie(sessions.COOKIE, path=PREFIX)
        raise see_other(PREFIX + "/login")
