"""The console's session and CSRF middleware: only `/console` paths, never the API's.

It reads the session cookie into `req.context.console_session` (and the session's one-time
messages, `req.context.flash`), parses a form body into `req.context.form`, refuses (403)
every POST whose `csrf_token` does not match, answers a form sent again (its `once` token
used already: console/once.py) with the first answer's redirect instead of writing again,
and sends a resource that declares `login_required` to the login page when there is no
session.
The API's TokenAuth reads only the Authorization header, so a session cookie opens
nothing there; and this reads only the cookie, so a token opens nothing here."""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

import falcon
import redis

from console import pages
from console.flash import Flash
from console.once import OnceOnly
from console.rendering import DEFAULT_LANGUAGE, Renderer, cookie
from plumbing.clock import Clock
from staff import sessions

log = logging.getLogger(__name__)
PREFIX = pages.PREFIX
_FORM = "application/x-www-form-urlencoded"
# Forms sent before there is a session: checked against the pre-login cookie (double submit).
PRELOGIN_FORMS = (pages.LOGIN, pages.PASSWORD + "/", pages.FORGOT)
# Where a half-done login (StaffSession.pending) is finished; it opens nothing else.
PENDING_PAGES = {"code": pages.LOGIN_CODE, "enrol": pages.TWO_FACTOR}


def is_console(req: falcon.Request) -> bool:
    return req.path == PREFIX or req.path.startswith(PREFIX + "/")


def back_to(req: falcon.Request, default: str = pages.INBOX) -> str:
    """The console page the request came from (the browser's Referer, same origin), else
    `default`: only ever a console path, never an open redirect."""
    referer = urllib.parse.urlsplit(req.get_header("Referer") or "")
    back = referer.path + ("?" + referer.query if referer.query else "")
    same_site = referer.netloc in ("", req.host if req.port in (80, 443) else f"{req.host}:{req.port}")
    return back if same_site and back.startswith(PREFIX + "/") and "//" not in back else default


class ConsoleSession:
    def __init__(
        self,
        clock: Clock,
        lifetime: sessions.Lifetime,
        renderer: Renderer,
        once: OnceOnly,
        flash: Flash,
    ) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.renderer = renderer
        self.once = once
        self.flash = flash

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.console_session = None
        req.context.form = {}
        req.context.flash = None
        req.context.once_key = None
        if not is_console(req) or req.path.startswith(pages.STATIC + "/"):
            return
        token = cookie(req, sessions.COOKIE)
        session = sessions.find(token, self.clock(), self.lifetime)
        req.context.console_session = session
        if session is not None and token:
            req.context.flash = self.flash.bound(token, session.id)
        if req.method != "POST":
            return
        if (req.content_type or "").split(";")[0].strip().lower() == _FORM:
            body = req.bounded_stream.read().decode("utf-8", "replace")
            req.context.form = {k: v[0] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True).items()}
        # The login form is checked against the pre-login cookie (there is no session yet);
        # every other form against the session's own token.
        if req.path in (PRELOGIN_FORMS[0], PRELOGIN_FORMS[2]) or req.path.startswith(PRELOGIN_FORMS[1]):
            expected = cookie(req, sessions.PRELOGIN_COOKIE)
        else:
            expected = session.csrf_token if session else None
        if not sessions.same(req.context.form.get("csrf_token"), expected):
            language = session.user.language if session else DEFAULT_LANGUAGE
            tr = self.renderer.translations[language]
            resp.status = falcon.HTTP_403
            resp.content_type = "text/html; charset=utf-8"
            resp.text = self.renderer.render(
                "console/refused.html",
                language,
                user=None,
                csrf_token="",
                title=tr.gettext("Forbidden"),
                message=tr.gettext("The form expired. Please try again."),
            )
            resp.complete = True  # the responder does not run
            return
        if session is not None:
            self._once(req, resp, session.id)

    def _once(self, req: falcon.Request, resp: falcon.Response, session_id: str) -> None:
        """A form's second POST (reload, double click) is sent where its first was sent."""
        key = self.once.key(session_id, req.context.form.get("once"))
        if key is None:
            return
        try:
            outcome, location = self.once.claim(key)
        except redis.RedisError as exc:
            log.warning("console write not checked for a repeat (Redis: %s)", type(exc).__name__)
            return
        if outcome == "go":
            req.context.once_key = key
            return
        resp.status = falcon.HTTP_303
        resp.location = location or back_to(req)  # "busy": the first is still writing; back to the form
        resp.cache_control = ["no-store"]
        resp.complete = True

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool) -> None:
        key = getattr(req.context, "once_key", None)
        if key is None:
            return
        # A redirect: the write was done (post/redirect/get). Anything else (a refused form,
        # an error): nothing written, the token is given back.
        location = resp.get_header("Location") if resp.status_code == 303 else None
        try:
            self.once.finish(key, location)
        except redis.RedisError as exc:
            log.warning("console write's outcome not kept (Redis: %s)", type(exc).__name__)

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict) -> None:
        admin_only = getattr(resource, "admin_required", False)
        session = req.context.console_session
        if (admin_only or getattr(resource, "login_required", False)) and session is None:
            raise falcon.HTTPSeeOther(pages.LOGIN)
        if session is not None and session.pending is not None:
            # A half-done login opens only the page that finishes it (`finishes` names it).
            if session.pending not in getattr(resource, "finishes", ()):
                if admin_only or getattr(resource, "login_required", False):
                    raise falcon.HTTPSeeOther(PENDING_PAGES[session.pending])
                req.context.console_session = None  # the login page, help: as if logged out
            return
        if getattr(resource, "finishes", ()) and not getattr(resource, "login_required", False):
            # The second-factor page without a half-done login: nothing to finish.
            raise falcon.HTTPSeeOther(pages.LOGIN if session is None else pages.INBOX)
        if admin_only:
            # The clinic an admin page acts on: ?clinic=slug among the user's admin clinics,
            # or the first of them. A staff member (or an admin of another clinic) gets 403.
            req.context.admin_clinic, req.context.admin_clinics = admin_clinic(
                req, ("admin", "officer") if getattr(resource, "officer_allowed", False) else ("admin",)
            )
            if req.context.admin_clinic is None:
                session = req.context.console_session
                language = session.user.language
                tr = self.renderer.translations[language]
                resp.status = falcon.HTTP_403
                resp.content_type = "text/html; charset=utf-8"
                resp.cache_control = ["no-store"]
                resp.text = self.renderer.render(
                    "console/refused.html",
                    language,
                    user=session.user,
                    csrf_token=session.csrf_token,
                    title=tr.gettext("Forbidden"),
                    message=tr.gettext("Only the clinic's administrators can open this page."),
                )
                resp.complete = True


def admin_clinic(req: falcon.Request, roles: tuple[str, ...] = ("admin",)) -> tuple[Any, list]:
    """(the clinic an admin page acts on or None, the user's clinics of those roles: an
    admin page the data-protection officer opens too names `officer` beside `admin`)."""
    user = req.context.console_session.user
    clinics = user.clinics(role=roles)
    wanted = req.get_param("clinic") or req.context.form.get("clinic")
    if wanted:
        return next((c for c in clinics if c.slug == wanted), None), clinics
    return (clinics[0] if clinics else None), clinics
