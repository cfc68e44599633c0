"""Logging in (the password, then the second factor where the user has one or a clinic
requires it) and out, the user's language, their own account (password, sessions,
two-factor) and the set-password link's page."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

import falcon
import redis

from console import accounts as words
from console import audit, sessions
from console.flash import Flash
from console.middleware import PENDING_PAGES, PREFIX, back_to
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
from models import StaffSession, StaffUser
from plumbing.crypto import Keys
from plumbing.database import db
from plumbing.errors import DomainError, Gone
from staff import accounts, passwords, two_factor

log = logging.getLogger(__name__)
ACCOUNT = PREFIX + "/account"
TWO_FACTOR = PENDING_PAGES["enrol"]
CODE = PENDING_PAGES["code"]


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
    resp.set_cookie(sessions.PRELOGIN_COOKIE, token, path=PREFIX, http_only=True, secure=secure, same_site="Lax")
    resp.set_cookie(
        LANGUAGE_COOKIE, language, path=PREFIX, http_only=True, secure=secure, same_site="Lax", max_age=365 * 86400
    )
    return token


def _set_session_cookie(resp: falcon.Response, token: str, secure: bool) -> None:
    # A browser-session cookie (no Max-Age): closing the browser on a shared reception
    # computer ends it; the server's idle and absolute limits end it in any case.
    resp.set_cookie(sessions.COOKIE, token, path=PREFIX, http_only=True, secure=secure, same_site="Lax")


def _finish_login(
    req: falcon.Request, resp: falcon.Response, user: StaffUser, now: datetime, trust: bool
) -> tuple[str, str]:
    """Start the user's full session (ending the half-done one, whose token the browser had:
    a new token at each step of a login) and set its cookie. Returns the token and the id."""
    with db.atomic():
        sessions.end(cookie(req, sessions.COOKIE))
        token, session_id = sessions.start(user, now, req.context.client_address, req.user_agent)
        audit.logged_in(user)
    _set_session_cookie(resp, token, is_secure(req, trust))
    return token, session_id


class ConsoleLogin:
    def __init__(
        self, renderer: Renderer, throttle: LoginThrottle, clock: Callable, trust_forwarded_proto: bool
    ) -> None:
        self.renderer = renderer
        self.throttle = throttle
        self.clock = clock
        self.trust = trust_forwarded_proto

    def _form(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        language: str,
        status: str = falcon.HTTP_200,
        message: str = "",
        email: str = "",
        notice: str = "",
        **values: object,
    ) -> None:
        token = _prelogin_token(req, resp, is_secure(req, self.trust), language)
        tr = self.renderer.translations[language]
        html(
            resp,
            self.renderer.render(
                "console/login.html",
                language,
                user=None,
                csrf_token=token,
                message=tr.gettext(message) % values if message else "",
                notice=tr.gettext(notice) if notice else "",
                email=email,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.context.console_session is not None:
            raise see_other(PREFIX + "/")
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
        resp.unset_cookie(sessions.PRELOGIN_COOKIE, path=PREFIX)  # a fresh one for the next login
        # The password is right. With a second factor to give (or to enrol, a clinic requiring
        # it), the session opens only the page that asks for it; the failure counts stay until
        # the login is whole (a right password must not reset the count of wrong codes).
        pending = "code" if user.two_factor else ("enrol" if user.two_factor_required() else None)
        if pending is None:
            self.throttle.succeeded(email)
            _finish_login(req, resp, user, self.clock(), self.trust)
            raise see_other(PREFIX + "/")
        token, _ = sessions.start(user, self.clock(), address, req.user_agent, pending=pending)
        _set_session_cookie(resp, token, is_secure(req, self.trust))
        raise see_other(PENDING_PAGES[pending])


class ConsoleLoginCode:
    """The second step of a login: the code from the authenticator app, or a recovery code.
    Wrong codes count with wrong passwords (the same throttle, per account and address)."""

    finishes = ("code",)

    def __init__(
        self, renderer: Renderer, throttle: LoginThrottle, clock: Callable, secret_key: Keys, trust: bool, flash: Flash
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
            minutes = -(-wait // 60)
            self._form(
                req,
                resp,
                falcon.HTTP_429,
                tr.gettext("Too many failed logins. Try again in %(minutes)d min.") % {"minutes": minutes},
            )
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
            audit.login_failed(user, second_factor=True)
            self._form(req, resp, falcon.HTTP_401, tr.gettext(two_factor.WRONG_CODE))
            return
        self.throttle.succeeded(user.email)
        token, session_id = _finish_login(req, resp, user, now, self.trust)
        if left is not None:
            _notice(
                self.flash.bound(token, session_id),
                "account",
                N_("You logged in with a recovery code. Recovery codes left: %(count)d."),
                left,
            )
            raise see_other(ACCOUNT)
        raise see_other(PREFIX + "/")


def _said(tr: object, notice: dict | None) -> str:
    """A one-time notice in the user's language (its text is one of the N_ messages here)."""
    if not notice:
        return ""
    text, count = notice.get("notice") or "", notice.get("count")
    return tr.gettext(text) % {"count": count}  # type: ignore[attr-defined]


def _notice(flash: object, page: str, text: str, count: int | None = None) -> None:
    """A one-time notice for the next page (lost if Redis is down: it is only a notice)."""
    try:
        flash.put(page, {"notice": text, "count": count})  # type: ignore[attr-defined]
    except redis.RedisError as exc:
        log.warning("console notice not kept (Redis: %s)", type(exc).__name__)


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


class AccountPage:
    """/console/account: the user's own password, language and sessions, and the state of
    their two-factor login. Every write answers 303 back here with a one-time notice."""

    login_required = True

    def __init__(self, renderer: Renderer, throttle: LoginThrottle) -> None:
        self.renderer = renderer
        self.throttle = throttle

    def _render(
        self, req: falcon.Request, resp: falcon.Response, status: str = falcon.HTTP_200, error: str = ""
    ) -> None:
        session: StaffSession = req.context.console_session
        user = session.user
        tr = self.renderer.translations[user.language]
        notice = req.context.flash.take("account") if req.context.flash and status == falcon.HTTP_200 else None
        html(
            resp,
            self.renderer.render(
                "console/account.html",
                user.language,
                user=user,
                csrf_token=session.csrf_token,
                error=error,
                notice=_said(tr, notice),
                current=session.id,
                sessions=[
                    {
                        "id": s.id,
                        "row": s,
                        "browser": words.browser(s.user_agent),
                        "this": s.id == session.id,
                        "started": words.when(s.created_at, user),
                        "seen": words.when(s.last_seen_at, user),
                    }
                    for s in accounts.own_sessions(user)
                ],
                codes_left=two_factor.recovery_codes_left(user) if user.two_factor else 0,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._render(req, resp)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        session: StaffSession = req.context.console_session
        user, form = session.user, req.context.form
        tr = self.renderer.translations[user.language]
        action = form.get("action", "")
        address = req.context.client_address or "unknown"
        try:
            if action == "password":
                if wait := self.throttle.blocked(user.email, address):
                    resp.set_header("Retry-After", str(wait))
                    message = tr.gettext("Too many failed logins. Try again in %(minutes)d min.")
                    self._render(req, resp, falcon.HTTP_429, message % {"minutes": -(-wait // 60)})
                    return
                try:
                    ended = accounts.change_password(
                        user, form.get("current", ""), form.get("new", ""), form.get("repeat", ""), session.id
                    )
                except DomainError as error:
                    if error.code == "WRONG_PASSWORD":
                        self.throttle.failed(user.email, address)
                    raise
                notice = N_("Your password is changed. Sessions ended elsewhere: %(count)d.")
                _notice(req.context.flash, "account", notice, ended)
            elif action == "language":
                accounts.set_language(user, form.get("language", ""))
            elif action in ("end-session", "end-others"):
                which = form.get("session") if action == "end-session" else None
                ended = accounts.end_sessions(user, session.id, which)
                _notice(req.context.flash, "account", N_("Sessions ended: %(count)d."), ended)
                if which == session.id:  # this very session: logged out
                    resp.unset_cookie(sessions.COOKIE, path=PREFIX)
                    raise see_other(PREFIX + "/login")
            else:
                raise falcon.HTTPBadRequest()
        except DomainError as error:
            self._render(req, resp, falcon.HTTP_400, words.refusal(tr, error))
            return
        raise see_other(ACCOUNT)


class TwoFactorPage:
    """/console/account/two-factor: enrolment (a QR code and the secret as text, then the
    first code confirms it), the recovery codes shown once, turning it off (password and a
    code), new recovery codes. Also the page a half-done login is held at while a clinic
    requires two-factor the user has not enrolled (`finishes` "enrol"); confirming the first
    code there finishes the login."""

    login_required = True
    finishes = ("enrol",)

    def __init__(self, renderer: Renderer, clock: Callable, secret_key: Keys, trust: bool, flash: Flash) -> None:
        self.renderer = renderer
        self.clock = clock
        self.secret_key = secret_key
        self.trust = trust
        self.flash = flash

    def _render(
        self, req: falcon.Request, resp: falcon.Response, status: str = falcon.HTTP_200, error: str = ""
    ) -> None:
        session: StaffSession = req.context.console_session
        user = StaffUser.get_by_id(session.user_id)  # as it is now (the flash or a write changed it)
        tr = self.renderer.translations[user.language]
        shown = req.context.flash.take("two-factor") if req.context.flash and status == falcon.HTTP_200 else None
        context: dict[str, object] = {"codes": (shown or {}).get("codes"), "error": error}
        if not user.two_factor:
            secret = two_factor.enrolment_secret(user, self.secret_key)
            uri = two_factor.provisioning_uri(user, secret, words.ISSUER)
            context |= {
                "secret": two_factor.grouped(secret),
                "qr": two_factor.qr_svg(uri, tr.gettext("QR code for the authenticator app")),
            }
        else:
            context["codes_left"] = two_factor.recovery_codes_left(user)
        html(
            resp,
            self.renderer.render(
                "console/two_factor.html",
                user.language,
                user=user,
                pending=session.pending is not None,
                required=user.two_factor_required(),
                csrf_token=session.csrf_token,
                **context,
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._render(req, resp)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        session: StaffSession = req.context.console_session
        user, form, now = session.user, req.context.form, self.clock()
        tr = self.renderer.translations[user.language]
        action = form.get("action", "")
        flash = req.context.flash
        try:
            if action == "enable":
                codes = two_factor.enable(user, form.get("code", "").strip()[:64], now, self.secret_key)
                if session.pending is not None:  # the login is whole now: its own session
                    token, session_id = _finish_login(req, resp, user, now, self.trust)
                    flash = self.flash.bound(token, session_id)
                _codes(flash, codes)
            elif action == "disable":
                if session.pending is not None or user.two_factor_required():
                    raise falcon.HTTPForbidden()
                two_factor.disable(
                    user, form.get("password", ""), form.get("code", "").strip()[:64], now, self.secret_key
                )
            elif action == "codes":
                _codes(flash, two_factor.new_recovery_codes(user, form.get("password", "")))
            else:
                raise falcon.HTTPBadRequest()
        except DomainError as error:
            self._render(req, resp, falcon.HTTP_400, words.refusal(tr, error))
            return
        raise see_other(TWO_FACTOR)


def _codes(flash: object, codes: list[str]) -> None:
    """The recovery codes for the next view of the page, once. Without Redis they cannot be
    shown: the user makes new ones from the page (the old ones were never seen)."""
    try:
        flash.put("two-factor", {"codes": codes})  # type: ignore[attr-defined]
    except redis.RedisError as exc:
        log.warning("recovery codes not kept for the next page (Redis: %s)", type(exc).__name__)


class SetPasswordPage:
    """/console/password/{token}: the set-password link an admin handed over. The user chooses
    a password (the same rules as everywhere); then logs in with it (and enrols two-factor
    there if a clinic requires it). A used, expired or unknown link: 410."""

    def __init__(self, renderer: Renderer, clock: Callable, trust_forwarded_proto: bool) -> None:
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
        raise see_other(PREFIX + "/login?password=set")
