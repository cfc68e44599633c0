"""The staff console's responders: thin, over console/ (sessions, passwords, throttle,
rendering). Sessions and CSRF are checked by console.middleware.ConsoleSession before
these run; a resource with `login_required` never runs without a session."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import falcon

from console import passwords, sessions
from console.middleware import PREFIX
from console.rendering import DEFAULT_LANGUAGE, LANGUAGES, Renderer
from console.throttle import LoginThrottle
from models import Clinic, StaffUser

LANGUAGE_COOKIE = "console_lang"  # the login page's language choice, before anyone is known


def _secure(req: falcon.Request, trust_forwarded_proto: bool) -> bool:
    """Whether the browser reached us over https: the WSGI scheme, or the proxy's
    X-Forwarded-Proto when the operator says the proxy sets it (TRUST_FORWARDED_PROTO)."""
    if req.scheme == "https":
        return True
    return trust_forwarded_proto and (req.get_header("X-Forwarded-Proto") or "").lower() == "https"


def _html(resp: falcon.Response, text: str, status: str = falcon.HTTP_200) -> None:
    resp.status = status
    resp.content_type = "text/html; charset=utf-8"
    # Pages carry patients' data: never kept by a shared computer's cache.
    resp.cache_control = ["no-store"]
    resp.text = text


def _redirect(to: str) -> falcon.HTTPSeeOther:
    # 303 after a POST: the browser GETs the next page (post/redirect/get).
    return falcon.HTTPSeeOther(to)


class ConsoleLogin:
    def __init__(self, renderer: Renderer, throttle: LoginThrottle, clock: Callable,
                 trust_forwarded_proto: bool, max_age: int) -> None:
        self.renderer = renderer
        self.throttle = throttle
        self.clock = clock
        self.trust = trust_forwarded_proto
        self.max_age = max_age

    def _language(self, req: falcon.Request, chosen: str | None = None) -> str:
        for candidate in (chosen, req.get_param("lang"), (req.get_cookie_values(LANGUAGE_COOKIE) or [None])[0]):
            if candidate in LANGUAGES:
                return candidate
        return DEFAULT_LANGUAGE

    def _form(self, req: falcon.Request, resp: falcon.Response, language: str, status: str = falcon.HTTP_200,
              message: str = "", email: str = "") -> None:
        token = (req.get_cookie_values(sessions.PRELOGIN_COOKIE) or [None])[0]
        if not token or len(token) > 100:
            token = sessions.new_token()
        secure = _secure(req, self.trust)
        resp.set_cookie(sessions.PRELOGIN_COOKIE, token, path=PREFIX, http_only=True, secure=secure, same_site="Lax")
        resp.set_cookie(LANGUAGE_COOKIE, language, path=PREFIX, http_only=True, secure=secure, same_site="Lax",
                        max_age=365 * 86400)
        tr = self.renderer.translations[language]
        _html(resp, self.renderer.render("console/login.html", language, user=None, csrf_token=token,
                                         message=tr.gettext(message) if message else "", email=email), status)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.context.console_session is not None:
            raise _redirect(PREFIX + "/")
        self._form(req, resp, self._language(req))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form = req.context.form
        email, password = form.get("email", "")[:254], form.get("password", "")[:1024]
        language = self._language(req, form.get("lang"))
        address = req.remote_addr or "unknown"
        if self.throttle.blocked(email, address):
            self._form(req, resp, language, falcon.HTTP_429,
                       "Too many failed logins. Wait 15 minutes and try again.", email)
            return
        user = StaffUser.by_email(email) if email else None
        # An unknown e-mail is checked against a dummy hash: the same answer in the same time.
        ok = passwords.verify(user.password_hash if user else None, password)
        if not ok or user is None or user.disabled_at is not None:
            self.throttle.failed(email, address)
            self._form(req, resp, language, falcon.HTTP_401, "Wrong e-mail or password.", email)
            return
        self.throttle.succeeded(email)
        token = sessions.start(user, self.clock(), address, req.user_agent)
        resp.set_cookie(sessions.COOKIE, token, path=PREFIX, http_only=True, secure=_secure(req, self.trust),
                        same_site="Lax", max_age=self.max_age)
        resp.unset_cookie(sessions.PRELOGIN_COOKIE, path=PREFIX)  # a fresh one for the next login
        raise _redirect(PREFIX + "/")


class ConsoleLogout:
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        cookie = req.get_cookie_values(sessions.COOKIE)
        sessions.end(cookie[0] if cookie else None)
        resp.unset_cookie(sessions.COOKIE, path=PREFIX)
        raise _redirect(PREFIX + "/login")


class Inbox:
    login_required = True

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        user: StaffUser = session.user
        clinics: list[Clinic] = user.clinics()
        # ?clinic=slug picks among the user's own clinics only; anything else: the first.
        clinic = next((c for c in clinics if c.slug == req.get_param("clinic")), clinics[0] if clinics else None)
        _html(resp, self.renderer.render("console/inbox.html", user.language, user=user,
                                         csrf_token=session.csrf_token, clinic=clinic, clinics=clinics))


class ConsoleStatic:
    """The one stylesheet. Cached a day; the console has no build step to fingerprint it,
    so a change reaches browsers within a day (or at once on reload)."""

    def __init__(self, directory: Path) -> None:
        self.files = {p.name: p for p in directory.iterdir() if p.suffix == ".css"}

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        path = self.files.get(name)
        if path is None:
            raise falcon.HTTPNotFound()
        resp.content_type = "text/css; charset=utf-8"
        resp.cache_control = ["public", "max-age=86400"]
        resp.data = path.read_bytes()
