"""The console's session and CSRF middleware: only `/console` paths, never the API's.

It reads the session cookie into `req.context.console_session`, parses a form body into
`req.context.form`, refuses (403) every POST whose `csrf_token` does not match, and sends
a resource that declares `login_required` to the login page when there is no session.
The API's TokenAuth reads only the Authorization header, so a session cookie opens
nothing there; and this reads only the cookie, so a token opens nothing here."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import falcon

from console import sessions
from console.flash import Flash
from console.rendering import DEFAULT_LANGUAGE, Renderer, cookie

PREFIX = "/console"
_FORM = "application/x-www-form-urlencoded"
# Forms sent before there is a session: checked against the pre-login cookie (double submit).
PRELOGIN_FORMS = (PREFIX + "/login", PREFIX + "/password/")
# Where a half-done login (StaffSession.pending) is finished; it opens nothing else.
PENDING_PAGES = {"code": PREFIX + "/login/code", "enrol": PREFIX + "/account/two-factor"}


def is_console(req: falcon.Request) -> bool:
    return req.path == PREFIX or req.path.startswith(PREFIX + "/")


class ConsoleSession:
    def __init__(self, clock: Callable, lifetime: sessions.Lifetime, renderer: Renderer, flash: Flash) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.renderer = renderer
        self.flash = flash

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.console_session = None
        req.context.form = {}
        req.context.flash = None
        if not is_console(req) or req.path.startswith(PREFIX + "/static/"):
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
        if req.path == PRELOGIN_FORMS[0] or req.path.startswith(PRELOGIN_FORMS[1]):
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

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict) -> None:
        admin_only = getattr(resource, "admin_required", False)
        session = req.context.console_session
        if (admin_only or getattr(resource, "login_required", False)) and session is None:
            raise falcon.HTTPSeeOther(PREFIX + "/login")
        if session is not None and session.pending is not None:
            # A half-done login opens only the page that finishes it (`finishes` names it).
            if session.pending not in getattr(resource, "finishes", ()):
                if admin_only or getattr(resource, "login_required", False):
                    raise falcon.HTTPSeeOther(PENDING_PAGES[session.pending])
                req.context.console_session = None  # the login page, help: as if logged out
            return
        if getattr(resource, "finishes", ()) and not getattr(resource, "login_required", False):
            # The second-factor page without a half-done login: nothing to finish.
            raise falcon.HTTPSeeOther(PREFIX + "/login" if session is None else PREFIX + "/")
        if admin_only:
            # The clinic an admin page acts on: ?clinic=slug among the user's admin clinics,
            # or the first of them. A staff member (or an admin of another clinic) gets 403.
            req.context.admin_clinic, req.context.admin_clinics = admin_clinic(req)
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


def admin_clinic(req: falcon.Request) -> tuple[Any, list]:
    """(the clinic an admin page acts on or None, the user's admin clinics)."""
    user = req.context.console_session.user
    clinics = user.clinics(role="admin")
    wanted = req.get_param("clinic") or req.context.form.get("clinic")
    if wanted:
        return next((c for c in clinics if c.slug == wanted), None), clinics
    return (clinics[0] if clinics else None), clinics


def lifetime_of(idle_hours: float, max_hours: float) -> sessions.Lifetime:
    return sessions.Lifetime(idle=timedelta(hours=idle_hours), absolute=timedelta(hours=max_hours))
