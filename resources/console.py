"""The staff console's responders: thin, over console/ (sessions, passwords, throttle,
rendering). Sessions and CSRF are checked by console.middleware.ConsoleSession before
these run; a resource with `login_required` never runs without a session."""
from __future__ import annotations

import json
import urllib.parse
import uuid
from datetime import datetime
from pathlib import Path
from typing import Callable

import falcon

from console import audit, inbox, passwords, sessions
from console.middleware import PREFIX
from console.rendering import DEFAULT_LANGUAGE, LANGUAGES, N_, Renderer
from console.throttle import LoginThrottle
from documents import patient_requests
from models import Actor, Clinic, PatientRequest, StaffUser
from plumbing.database import db
from plumbing.clock import as_utc
from storage.links import LinkCache
from voicemail.player import RecordingPlayer

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
              message: str = "", email: str = "", **values: object) -> None:
        token = (req.get_cookie_values(sessions.PRELOGIN_COOKIE) or [None])[0]
        if not token or len(token) > 100:
            token = sessions.new_token()
        secure = _secure(req, self.trust)
        resp.set_cookie(sessions.PRELOGIN_COOKIE, token, path=PREFIX, http_only=True, secure=secure, same_site="Lax")
        resp.set_cookie(LANGUAGE_COOKIE, language, path=PREFIX, http_only=True, secure=secure, same_site="Lax",
                        max_age=365 * 86400)
        tr = self.renderer.translations[language]
        _html(resp, self.renderer.render("console/login.html", language, user=None, csrf_token=token,
                                         message=tr.gettext(message) % values if message else "", email=email),
              status)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.context.console_session is not None:
            raise _redirect(PREFIX + "/")
        self._form(req, resp, self._language(req))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form = req.context.form
        email, password = form.get("email", "")[:254], form.get("password", "")[:1024]
        language = self._language(req, form.get("lang"))
        address = req.context.client_address or "unknown"
        wait = self.throttle.blocked(email, address)
        if wait:
            resp.set_header("Retry-After", str(wait))
            self._form(req, resp, language, falcon.HTTP_429,
                       N_("Too many failed logins. Try again in %(minutes)d min."), email, minutes=-(-wait // 60))
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
        resp.set_cookie(sessions.COOKIE, token, path=PREFIX, http_only=True, secure=_secure(req, self.trust),
                        same_site="Lax", max_age=self.max_age)
        resp.unset_cookie(sessions.PRELOGIN_COOKIE, path=PREFIX)  # a fresh one for the next login
        raise _redirect(PREFIX + "/")


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
        # Back to the page the switch was on (the browser's Referer, same-origin), and only
        # to a console path: never an open redirect.
        referer = urllib.parse.urlsplit(req.get_header("Referer") or "")
        back = referer.path + ("?" + referer.query if referer.query else "")
        same_site = referer.netloc in ("", req.host if req.port in (80, 443) else f"{req.host}:{req.port}")
        raise _redirect(back if same_site and back.startswith(PREFIX + "/") and "//" not in back else PREFIX + "/")


class ConsoleLogout:
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        cookie = req.get_cookie_values(sessions.COOKIE)
        sessions.end(cookie[0] if cookie else None)
        resp.unset_cookie(sessions.COOKIE, path=PREFIX)
        raise _redirect(PREFIX + "/login")


def _clinic_of(req: falcon.Request, user: StaffUser) -> tuple[Clinic | None, list[Clinic]]:
    """?clinic=slug picks among the user's own clinics only; anything else: the first."""
    clinics = user.clinics()
    return next((c for c in clinics if c.slug == req.get_param("clinic")), clinics[0] if clinics else None), clinics


def _filters(req: falcon.Request) -> dict[str, str]:
    return {"state": req.get_param("state") if req.get_param("state") in inbox.STATES else "open",
            "kind": req.get_param("kind") if req.get_param("kind") in inbox.KINDS else "",
            "q": (req.get_param("q") or "")[:100]}


def _own_request(req: falcon.Request, request_id: str) -> tuple[StaffUser, PatientRequest]:
    """The session's user and the request they may see: one of their clinics', else 404."""
    user: StaffUser = req.context.console_session.user
    request = inbox.request_for(user, request_id)
    if request is None:
        raise falcon.HTTPNotFound()
    return user, request


class Inbox:
    login_required = True

    def __init__(self, renderer: Renderer, clock: Callable) -> None:
        self.renderer = renderer
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        user: StaffUser = session.user
        clinic, clinics = _clinic_of(req, user)
        filters = _filters(req)
        rows = []
        if clinic is not None:
            found = inbox.requests(clinic, state=filters["state"], kind=filters["kind"] or None, search=filters["q"])
            rows = [inbox.row(r, clinic, user.language) for r in found]
        # The live update asks for rows newer than the newest shown (or than now).
        after = rows[0]["created"] if rows else as_utc(self.clock()).isoformat()
        rows_url = "/console/rows?" + urllib.parse.urlencode({"clinic": clinic.slug if clinic else "", **filters})
        _html(resp, self.renderer.render("console/inbox.html", user.language, user=user, csrf_token=session.csrf_token,
                                         clinic=clinic, clinics=clinics, rows=rows, after=after, rows_url=rows_url,
                                         **filters))


class InboxRows:
    """The live update: the rows created after `after`, rendered by the row template."""

    login_required = True

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        user: StaffUser = session.user
        clinic, _ = _clinic_of(req, user)
        try:
            after = datetime.fromisoformat(req.get_param("after") or "")
        except ValueError:
            raise falcon.HTTPBadRequest() from None
        filters = _filters(req)
        found = inbox.requests(clinic, state=filters["state"], kind=filters["kind"] or None, search=filters["q"],
                               after=after) if clinic else []
        html = "".join(self.renderer.render("console/_row.html", user.language, row=inbox.row(r, clinic, user.language),
                                            csrf_token=session.csrf_token) for r in found)
        _html(resp, html)


class RequestPage:
    """One request: its row, type, notes, tags, signed documents (the API detail's
    presigned links) and its history from the audit trail. Another clinic's id: 404."""

    login_required = True
    _WHAT = {"patient_request.create": N_("Created"), "call.receive": N_("Call received"),
             "patient_request.patch": N_("Changed"), "call.recording_mismatch": N_("Recording did not match the call")}

    def __init__(self, renderer: Renderer, links: LinkCache) -> None:
        self.renderer = renderer
        self.links = links

    def on_get(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        session = req.context.console_session
        user, request = _own_request(req, request_id)
        clinic, language = request.clinic, user.language
        tr = self.renderer.translations[language]
        data = patient_requests.detail(request, self.links)
        documents = [{"description": d["description"], "category": d["categoryType"], "sha256": d["sha256"],
                      "visible": d["visibleToPatient"], "url": d["downloadUrl"],
                      "registered": inbox.local_time(datetime.fromisoformat(d["createdAt"].replace("Z", "+00:00")),
                                                     clinic, language)} for d in data["medicalRecords"]]
        events = []
        # What was odd about the call's hand-off, said beside its "Call received".
        odd = [tr.gettext(audit.ANOMALIES.get(name, name))
               for name in json.loads(request.call.anomalies or "[]")] if request.call_id else []
        for event in inbox.history(request):
            details = json.loads(event.details or "{}")
            what = self._WHAT.get(event.action, event.action)
            if event.action == "patient_request.patch" and "done" in details:
                what = N_("Marked resolved") if details["done"] else N_("Reopened")
            events.append({"time": inbox.local_time(event.at, clinic, language), "what": tr.gettext(what),
                           "who": f"{tr.gettext(audit.WHO.get(event.actor_kind, event.actor_kind))}: {event.actor_name}",
                           "notes": odd if event.action == "call.receive" else []})
        row = inbox.row(request, clinic, language)
        held = {tag["id"] for tag in data["tags"]}
        _html(resp, self.renderer.render(
            "console/request.html", language, user=user, csrf_token=session.csrf_token, clinic=clinic, row=row,
            title=row["name"] or tr.gettext("unknown caller"),
            type_name=request.request_type.name if request.request_type_id else None,
            clinic_note=request.clinic_note, user_note=request.user_note, tags=data["tags"],
            other_tags=[t for t in patient_requests.clinic_tags(clinic, "patient_request") if t["id"] not in held],
            documents=documents, events=events))


class RequestResolution:
    """Resolve (done=1) or reopen (done=0) from a row's button; back to the inbox (PRG)."""

    login_required = True

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = _own_request(req, request_id)
        done = req.context.form.get("done")
        if done not in ("0", "1"):
            raise falcon.HTTPBadRequest()
        # The API's PATCH `done` path, recorded in the audit trail as this staff user.
        patient_requests.patch_request(request.clinic, request, {"done": done == "1"}, Actor.staff(user))
        raise _redirect("/console/?" + urllib.parse.urlencode({"clinic": request.clinic.slug}))


class RequestNote:
    """Set the request's note (the API's PATCH `userNote`), audited as the staff user."""

    login_required = True
    MAX_LENGTH = 5000

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = _own_request(req, request_id)
        note = req.context.form.get("note", "").replace("\r\n", "\n")[:self.MAX_LENGTH]
        patient_requests.patch_request(request.clinic, request, {"userNote": note}, Actor.staff(user))
        raise _redirect(f"/console/requests/{request.id}")


class RequestTags:
    """Add one of the clinic's request tags (the API's PATCH `addTagIds`) or remove one,
    audited as the staff user; back to the request page (PRG)."""

    login_required = True

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = _own_request(req, request_id)
        form = req.context.form
        try:
            added, removed = (uuid.UUID(form[k]) if form.get(k) else None for k in ("add", "remove"))
        except ValueError:
            raise falcon.HTTPBadRequest() from None
        if added is not None:  # another clinic's tag: refused by patch_request's own check (400)
            patient_requests.patch_request(request.clinic, request, {"addTagIds": [str(added)]}, Actor.staff(user))
        if removed is not None:
            patient_requests.remove_tag(request, removed, Actor.staff(user))
        raise _redirect(f"/console/requests/{request.id}")


class ConsoleRecording:
    """The <audio> element's source: the API's play logic (RecordingPlayer) behind the
    session: 302 to a working link, 410 when the recording is gone (the transcript stays)."""

    login_required = True

    def __init__(self, renderer: Renderer, player: RecordingPlayer, clock: Callable) -> None:
        self.renderer = renderer
        self.player = player
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = _own_request(req, request_id)
        if request.call_id is None:
            raise falcon.HTTPNotFound()
        answer = self.player.play(request.call, self.clock())
        if answer.kind == "link":
            resp.status = falcon.HTTP_302
            resp.location = answer.url
            resp.cache_control = ["no-store"]
            return
        tr = self.renderer.translations[user.language]
        if answer.kind == "gone":
            _html(resp, self.renderer.render("console/refused.html", user.language, user=user,
                                             csrf_token=req.context.console_session.csrf_token,
                                             title=tr.gettext("Recording"),
                                             message=tr.gettext("The recording is no longer available; the transcript stays.")),
                  falcon.HTTP_410)
            return
        resp.set_header("Retry-After", str(answer.retry_after))
        _html(resp, self.renderer.render("console/refused.html", user.language, user=user,
                                         csrf_token=req.context.console_session.csrf_token,
                                         title=tr.gettext("Recording"),
                                         message=tr.gettext("The recording is not ready yet; try again shortly.")),
              falcon.HTTP_503)


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
