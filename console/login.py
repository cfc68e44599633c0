"""Logging in (the password, then the second factor where the user has one or a clinic
requires it) and out, and the set-password link's page: the console's pages before a
session is whole. The own account's pages are console/account.py."""

from __future__ import annotations

import logging
from datetime import datetime

import falcon
import redis

from console import account_words as words
from console import audit, pages
from console.flash import Flash
from console.middleware import PENDING_PAGES
from console.rendering import (
    DEFAULT_LANGUAGE,
    LANGUAGE_COOKIE,
    LANGUAGES,
    N_,
    Renderer,
    cookie,
    html,
    see_other,
)
from console.throttle import LoginThrottle, ResetThrottle
from models import StaffSession, StaffUser
from plumbing import catalogue
from plumbing.clock import Clock
from plumbing.crypto import Keys
from plumbing.database import db
from plumbing.errors import DomainError, Gone
from plumbing.forwarded import is_secure
from staff import accounts, passwords, sessions, two_factor

log = logging.getLogger(__name__)


def _language(req: falcon.Request, chosen: str | None = None) -> str:
    for candidate in (chosen, req.get_param("lang"), cookie(req, LANGUAGE_COOKIE)):
        if candidate in LANGUAGES:
            return candidate
    return DEFAULT_LANGUAGE


def _prelogin_token(req: falcon.Request, resp: falcon.Response, secure: bool, language: str) -> str:
    """The CSRF token of a form sent before there is a session (double submit: the cookie and
    the form's field must match), and the language cookie of the pages before login."""
    token = cookie(req, sessions.PRELOGIN_COOKIE)
    if not token or len(token) > 100:
        token = sessions.new_token()
    resp.set_cookie(sessions.PRELOGIN_COOKIE, token, path=pages.PREFIX, http_only=True, secure=secure, same_site="Lax")
    resp.set_cookie(
        LANGUAGE_COOKIE,
        language,
        path=pages.PREFIX,
        http_only=True,
        secure=secure,
        same_site="Lax",
        max_age=365 * 86400,
    )
    return token


def _set_session_cookie(resp: falcon.Response, token: str, secure: bool) -> None:
    # A browser-session cookie (no Max-Age): closing the browser on a shared reception
    # computer ends it; the server's idle and absolute limits end it in any case.
    resp.set_cookie(sessions.COOKIE, token, path=pages.PREFIX, http_only=True, secure=secure, same_site="Lax")


def finish_login(
    req: falcon.Request, resp: falcon.Response, user: StaffUser, now: datetime, trust: bool
) -> tuple[str, str]:
    """Start the user's full session (ending the half-done one, whose token the browser had:
    a new token at each step of a login) and set its cookie. Returns the token and the id."""
    with db.atomic():
        sessions.end(cookie(req, sessions.COOKIE))
        token, session_id = sessions.start(user, now, req.context.client_address, req.user_agent)
        audit.logged_in(user, now)
    _set_session_cookie(resp, token, is_secure(req, trust))
    return token, session_id


def flash_notice(flash: object, page: str, text: str, count: int | None = None) -> None:
    """A one-time notice for the next page (lost if Redis is down: it is only a notice)."""
    try:
        flash.put(page, {"notice": text, "count": count})  # type: ignore[attr-defined]
    except redis.RedisError as exc:
        log.warning("console notice not kept (Redis: %s)", type(exc).__name__)


class ConsoleLogin:
    def __init__(
        self, renderer: Renderer, throttle: LoginThrottle, clock: Clock, trust_forwarded_proto: bool, mail: bool
    ) -> None:
        self.renderer = renderer
        self.throttle = throttle
        self.clock = clock
        self.trust = trust_forwarded_proto
        self.mail = mail  # e-mail on: the page offers "forgot password"

    def _form(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        language: str,
        status: str = falcon.HTTP_200,
        message: str = "",
        email: str = "",
        notice: str = "",
        said: str = "",
        **values: object,
    ) -> None:
        """`message` a msgid (translated here, `values` filled in); `said` already in words."""
        token = _prelogin_token(req, resp, is_secure(req, self.trust), language)
        tr = self.renderer.translations[language]
        html(
            resp,
            self.renderer.render(
                "console/login.html",
                language,
                user=None,
                csrf_token=token,
                message=said or (tr.gettext(message) % values if message else ""),
                notice=tr.gettext(notice) if notice else "",
                email=email,
                forgot=self.mail,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.context.console_session is not None:
            raise see_other(pages.INBOX)
        notice = N_("Your password is set. Log in with it.") if req.get_param("password") == "set" else ""
        self._form(req, resp, _language(req), notice=notice)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form = req.context.form
        email, password = form.get("email", "")[:254], form.get("password", "")[:1024]
        language = _language(req, form.get("lang"))
        address = req.context.client_address or "unknown"
        wait = self.throttle.blocked(email, address)
        if wait:
            resp.set_header("Retry-After", str(wait))
            self._form(
                req,
                resp,
                language,
                falcon.HTTP_429,
                email=email,
                said=words.too_many_logins(self.renderer.translations[language], wait, language),
            )
            return
        user = StaffUser.by_email(email) if email else None
        # An unknown e-mail is checked against a dummy hash: the same answer in the same time.
        ok = passwords.verify(user.password_hash if user else None, password)
        if not ok or user is None or user.disabled_at is not None:
            self.throttle.failed(email, address)
            audit.login_failed(user, self.clock())
            self._form(req, resp, language, falcon.HTTP_401, N_("Wrong e-mail or password."), email)
            return
        resp.unset_cookie(sessions.PRELOGIN_COOKIE, path=pages.PREFIX)  # a fresh one for the next login
        # The password is right. With a second factor to give (or to enrol, a clinic requiring
        # it), the session opens only the page that asks for it; the failure counts stay until
        # the login is whole (a right password must not reset the count of wrong codes).
        pending = "code" if user.two_factor else ("enrol" if user.two_factor_required() else None)
        if pending is None:
            self.throttle.succeeded(email)
            finish_login(req, resp, user, self.clock(), self.trust)
            raise see_other(pages.INBOX)
        token, _ = sessions.start(user, self.clock(), address, req.user_agent, pending=pending)
        _set_session_cookie(resp, token, is_secure(req, self.trust))
        raise see_other(PENDING_PAGES[pending])


class ConsoleLoginCode:
    """The second step of a login: the code from the authenticator app, or a recovery code.
    Wrong codes count with wrong passwords (the same throttle, per account and address)."""

    finishes = ("code",)

    def __init__(
        self, renderer: Renderer, throttle: LoginThrottle, clock: Clock, secret_key: Keys, trust: bool, flash: Flash
    ) -> None:
        self.renderer = renderer
        self.throttle = throttle
        self.clock = clock
        self.secret_key = secret_key
        self.trust = trust
        self.flash = flash

    def _form(
        self, req: falcon.Request, resp: falcon.Response, status: str = falcon.HTTP_200, message: str = ""
    ) -> None:
        session = req.context.console_session
        html(
            resp,
            self.renderer.render(
                "console/login_code.html",
                session.user.language,
                user=session.user,
                pending=True,
                csrf_token=session.csrf_token,
                message=message,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._form(req, resp)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        session: StaffSession = req.context.console_session
        user: StaffUser = session.user
        tr = self.renderer.translations[user.language]
        address = req.context.client_address or "unknown"
        wait = self.throttle.blocked(user.email, address)
        if wait:
            resp.set_header("Retry-After", str(wait))
            self._form(req, resp, falcon.HTTP_429, words.too_many_logins(tr, wait, user.language))
            return
        code, now = req.context.form.get("code", "").strip()[:64], self.clock()
        left = None
        with db.atomic():
            ok = two_factor.check_code(user, code, now, self.secret_key)
            if not ok:
                left = two_factor.use_recovery_code(user, code, now)
                ok = left is not None
        if not ok:
            self.throttle.failed(user.email, address)
            audit.login_failed(user, now, second_factor=True)
            self._form(req, resp, falcon.HTTP_401, tr.gettext(two_factor.WRONG_CODE))
            return
        self.throttle.succeeded(user.email)
        token, session_id = finish_login(req, resp, user, now, self.trust)
        if left is not None:
            flash_notice(
                self.flash.bound(token, session_id),
                "account",
                N_("You logged in with a recovery code. Recovery codes left: %(count)d."),
                left,
            )
            raise see_other(pages.ACCOUNT)
        raise see_other(pages.INBOX)


class ConsoleLogout:
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        sessions.end(cookie(req, sessions.COOKIE))
        resp.unset_cookie(sessions.COOKIE, path=pages.PREFIX)
        raise see_other(pages.LOGIN)


class SetPasswordPage:
    """/console/password/{token}: the set-password link an admin handed over. The user chooses
    a password (the same rules as everywhere); then logs in with it (and enrols two-factor
    there if a clinic requires it). A used, expired or unknown link: 410."""

    def __init__(self, renderer: Renderer, clock: Clock, trust_forwarded_proto: bool) -> None:
        self.renderer = renderer
        self.clock = clock
        self.trust = trust_forwarded_proto

    def _render(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        user: StaffUser | None,
        status: str = falcon.HTTP_200,
        error: str = "",
    ) -> None:
        # The page's own choice (?lang=, the login pages' cookie) first, then the account's.
        chosen = req.get_param("lang") or cookie(req, LANGUAGE_COOKIE)
        language = chosen if chosen in LANGUAGES else (user.language if user else DEFAULT_LANGUAGE)
        token = _prelogin_token(req, resp, is_secure(req, self.trust), language)
        tr = self.renderer.translations[language]
        html(
            resp,
            self.renderer.render(
                "console/set_password.html",
                language,
                user=None,
                csrf_token=token,
                person=user,
                gone=tr.gettext(accounts.LINK_GONE) if user is None else "",
                error=error,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response, token: str) -> None:
        try:
            user = accounts.link_user(token, self.clock())
        except Gone:
            self._render(req, resp, None, falcon.HTTP_410)
            return
        self._render(req, resp, user)

    def on_post(self, req: falcon.Request, resp: falcon.Response, token: str) -> None:
        form, now = req.context.form, self.clock()
        try:
            accounts.use_link(token, form.get("password", "")[:2000], form.get("repeat", "")[:2000], now)
        except Gone:
            self._render(req, resp, None, falcon.HTTP_410)
            return
        except DomainError as error:
            user = accounts.link_user(token, now)
            self._render(
                req, resp, user, falcon.HTTP_400, words.refusal(self.renderer.translations[_language(req)], error)
            )
            return
        raise see_other(pages.with_query(pages.LOGIN, password="set"))


class ForgotPassword:
    """/console/login/forgot: "forgot password". With e-mail on, the form sends a link to
    set a new password to the account of the address typed, if there is one; the answer is
    the same either way (never whether the address exists), and the requests are limited
    per address and per client (console/throttle.py). Without e-mail: who to ask instead."""

    def __init__(
        self, renderer: Renderer, throttle: ResetThrottle, clock: Clock, trust: bool, mail: bool, minutes: float
    ) -> None:
        self.renderer = renderer
        self.throttle = throttle
        self.clock = clock
        self.trust = trust
        self.mail = mail
        self.minutes = minutes

    def _page(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        language: str,
        status: str = falcon.HTTP_200,
        notice: str = "",
        message: str = "",
    ) -> None:
        token = _prelogin_token(req, resp, is_secure(req, self.trust), language)
        html(
            resp,
            self.renderer.render(
                "console/forgot.html",
                language,
                user=None,
                csrf_token=token,
                mail=self.mail,
                notice=notice,
                message=message,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.context.console_session is not None:
            raise see_other(pages.ACCOUNT)
        self._page(req, resp, _language(req))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        if not self.mail:
            raise falcon.HTTPNotFound()
        form = req.context.form
        email = form.get("email", "").strip()[:254]
        language = _language(req, form.get("lang"))
        tr = self.renderer.translations[language]
        try:
            wait = self.throttle.take(email, req.context.client_address or "unknown")
        except redis.RedisError as exc:
            log.warning("password reset not throttled: refused (Redis: %s)", type(exc).__name__)
            resp.set_header("Retry-After", "60")
            self._page(req, resp, language, falcon.HTTP_503, message=tr.gettext(N_("Try again in a minute.")))
            return
        if wait:
            resp.set_header("Retry-After", str(wait))
            text = words.too_many_requests(tr, wait, language)
            self._page(req, resp, language, falcon.HTTP_429, message=text)
            return
        if email:
            accounts.request_reset(email, self.clock())
        text, minutes = catalogue.plural(
            tr,
            "If an account has this address, a link to set a new password is on its way to it. "
            "It works once, for %(num)s minute. Nothing came? Check the spam folder, or ask "
            "an administrator of your clinic.",
            "If an account has this address, a link to set a new password is on its way to it. "
            "It works once, for %(num)s minutes. Nothing came? Check the spam folder, or ask "
            "an administrator of your clinic.",
            self.minutes,
            language,
        )
        notice = text % {"num": minutes}
        self._page(req, resp, language, notice=notice)
