"""The user's own account: language, password, sessions (/console/account) and two-factor
login (/console/account/two-factor, also where a half-done login enrols). Logging in and
out: console/login.py."""

from __future__ import annotations

import logging

import falcon
import redis

from console import account_words as words
from console import pages
from console.flash import Flash
from console.login import finish_login, flash_notice
from console.middleware import back_to
from console.rendering import LANGUAGES, N_, Renderer, html, see_other
from console.throttle import LoginThrottle
from models import StaffSession, StaffUser
from plumbing.clock import Clock
from plumbing.crypto import Keys
from plumbing.errors import DomainError
from staff import accounts, sessions, two_factor

log = logging.getLogger(__name__)


def _said(tr: object, notice: dict | None) -> str:
    """A one-time notice in the user's language (its text is one of the N_ messages here)."""
    if not notice:
        return ""
    text, count = notice.get("notice") or "", notice.get("count")
    return tr.gettext(text) % {"count": count}  # type: ignore[attr-defined]


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


class AccountPage:
    """/console/account: the user's own password, language and sessions, and the state of
    their two-factor login. Every write answers 303 back here with a one-time notice."""

    login_required = True

    def __init__(self, renderer: Renderer, throttle: LoginThrottle, clock: Clock, mail: bool = False) -> None:
        self.renderer = renderer
        self.throttle = throttle
        self.clock = clock
        self.mail = mail  # e-mail on: the user may ask for the urgent messages' notices

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
                mail=self.mail,
                notices=accounts.notice_choices(user) if self.mail else [],
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
                    self._render(req, resp, falcon.HTTP_429, words.too_many_logins(tr, wait, user.language))
                    return
                try:
                    ended = accounts.change_password(
                        user,
                        form.get("current", ""),
                        form.get("new", ""),
                        form.get("repeat", ""),
                        session.id,
                        self.clock(),
                    )
                except DomainError as error:
                    if error.code == "WRONG_PASSWORD":
                        self.throttle.failed(user.email, address)
                    raise
                notice = N_("Your password is changed. Sessions ended elsewhere: %(count)d.")
                flash_notice(req.context.flash, "account", notice, ended)
            elif action == "language":
                accounts.set_language(user, form.get("language", ""))
            elif action == "notices":
                wanted = {key[len("urgent-") :] for key in form if key.startswith("urgent-")}
                accounts.set_urgent_notices(user, wanted, self.clock())
                flash_notice(req.context.flash, "account", N_("Your e-mail notices are saved."))
            elif action in ("end-session", "end-others"):
                which = form.get("session") if action == "end-session" else None
                ended = accounts.end_sessions(user, session.id, self.clock(), which)
                flash_notice(req.context.flash, "account", N_("Sessions ended: %(count)d."), ended)
                if which == session.id:  # this very session: logged out
                    resp.unset_cookie(sessions.COOKIE, path=pages.PREFIX)
                    raise see_other(pages.LOGIN)
            else:
                raise falcon.HTTPBadRequest()
        except DomainError as error:
            self._render(req, resp, falcon.HTTP_400, words.refusal(tr, error))
            return
        raise see_other(pages.ACCOUNT)


class TwoFactorPage:
    """/console/account/two-factor: enrolment (a QR code and the secret as text, then the
    first code confirms it), the recovery codes shown once, turning it off (password and a
    code), new recovery codes. Also the page a half-done login is held at while a clinic
    requires two-factor the user has not enrolled (`finishes` "enrol"); confirming the first
    code there finishes the login."""

    login_required = True
    finishes = ("enrol",)

    def __init__(self, renderer: Renderer, clock: Clock, secret_key: Keys, trust: bool, flash: Flash) -> None:
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
                    token, session_id = finish_login(req, resp, user, now, self.trust)
                    flash = self.flash.bound(token, session_id)
                _codes(flash, codes)
            elif action == "disable":
                if session.pending is not None or user.two_factor_required():
                    raise falcon.HTTPForbidden()
                two_factor.disable(
                    user, form.get("password", ""), form.get("code", "").strip()[:64], now, self.secret_key
                )
            elif action == "codes":
                _codes(flash, two_factor.new_recovery_codes(user, form.get("password", ""), now))
            else:
                raise falcon.HTTPBadRequest()
        except DomainError as error:
            self._render(req, resp, falcon.HTTP_400, words.refusal(tr, error))
            return
        raise see_other(pages.TWO_FACTOR)


def _codes(flash: object, codes: list[str]) -> None:
    """The recovery codes for the next view of the page, once. Without Redis they cannot be
    shown: the user makes new ones from the page (the old ones were never seen)."""
    try:
        flash.put("two-factor", {"codes": codes})  # type: ignore[attr-defined]
    except redis.RedisError as exc:
        log.warning("recovery codes not kept for the next page (Redis: %s)", type(exc).__name__)
