"""One request's page and its writes (note, tags, resolution), and its recording's player."""

from __future__ import annotations

import json
import urllib.parse
import uuid

import falcon

from console import audit, audit_words, inbox, pages
from console.inbox import OTHER_TYPE, own_request, rows_of
from console.rendering import Renderer, html, see_other
from jobs.playback import RecordingPlayer
from models import Actor, Call, Patient, PatientRequest, StaffUser
from patient_requests import changes, queries
from plumbing.clock import Clock
from privacy import read_trail
from storage.links import LinkCache


class RequestPage:
    """One request: its row (with what its recording is now), type, notes, tags, signed
    documents (the API detail's presigned links) and its history from the audit trail, in
    the audit page's words. Another clinic's id: 404."""

    login_required = True

    def __init__(self, renderer: Renderer, links: LinkCache, player: RecordingPlayer, clock: Clock) -> None:
        self.renderer = renderer
        self.links = links
        self.player = player
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        session = req.context.console_session
        user, request = own_request(req, request_id)
        clinic, language = request.clinic, user.language
        tr = self.renderer.translations[language]
        documents = [
            {
                "description": d.description,
                "category": d.category_type,
                "sha256": d.sha256,
                "visible": d.visible_to_patient,
                # Through the console, so that opening one is in the read trail.
                "url": pages.document(request.id, d.id),
                "registered": inbox.local_time(d.created_at, clinic, language),
            }
            for d in queries.attachments_of(request)
        ]
        tags = queries.tags_of([request]).get(request.id, [])
        # What was odd about the call's hand-off, said beside its "Call received".
        call = request.call if request.call_id else None
        odd = (
            [tr.gettext(audit.ANOMALIES.get(name, name)) for name in json.loads(call.anomalies or "[]")]
            if call is not None
            else []
        )
        events = [
            (entry, odd if entry.action == "call.receive" else [])
            for entry in audit_words.describe(inbox.history(request), clinic, language, tr)
        ]
        now = self.clock()
        (row,) = rows_of([request], clinic, language, self.player, now)
        held = {tag.id for tag in tags}
        read_trail.record(user, clinic.id, "request", [(request.patient_id, request.id)], now)
        html(
            resp,
            self.renderer.render(
                "console/request.html",
                language,
                user=user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                row=row,
                page_of_request=True,
                title=row["name"] or tr.gettext("unknown caller"),
                type_name=request.request_type.name if request.request_type is not None else None,
                clinic_note=request.clinic_note,
                user_note=request.user_note,
                tags=tags,
                other_tags=[t for t in queries.clinic_tags(clinic, "patient_request") if t.id not in held],
                documents=documents,
                events=events,
                # The patient's page (a copy of their data, their erasure): the clinic's admins.
                patient_url=(
                    pages.of_clinic(pages.patient(request.patient_id), clinic.slug)
                    if user.role_in(clinic) == "admin"
                    and request.patient_id != Patient.erased_id(clinic.organization_id)
                    else None
                ),
            ),
        )


class RequestResolution:
    """Resolve (done=1) or reopen (done=0) from a row's button; back to the inbox (PRG)."""

    login_required = True

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        done = req.context.form.get("done")
        if done not in ("0", "1"):
            raise falcon.HTTPBadRequest()
        (changes.resolve if done == "1" else changes.reopen)(request, Actor.staff(user), self.clock())
        raise see_other(pages.INBOX + "?" + urllib.parse.urlencode({"clinic": request.clinic.slug}))


def _back(req: falcon.Request, request: PatientRequest) -> str:
    """Where a row's form returns: the request's page when sent from it, else the inbox."""
    if req.context.form.get("back") == "request":
        return pages.request(request.id)
    return pages.INBOX + "?" + urllib.parse.urlencode({"clinic": request.clinic.slug})


class RequestTypeChoice:
    """Confirm the type the transcript suggests, or choose another (`type`: a request type's
    id, or "other"), in one click; audited with what was suggested."""

    login_required = True

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        chosen = req.context.form.get("type", "")
        try:
            type_id = None if chosen == OTHER_TYPE else uuid.UUID(chosen)
        except ValueError:
            raise falcon.HTTPBadRequest() from None
        # Another clinic's type, or an inactive one: refused by confirm_type's own check (400).
        changes.confirm_type(request, type_id, Actor.staff(user), self.clock())
        raise see_other(_back(req, request))


class RequestUrgentClear:
    """Take the "may be urgent" flag off a request (staff read it); audited."""

    login_required = True

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        changes.clear_urgent(request, Actor.staff(user), self.clock())
        raise see_other(_back(req, request))


class RequestNote:
    """Set the request's note (the API's PATCH `userNote`), audited as the staff user."""

    login_required = True
    MAX_LENGTH = 5000

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        note = req.context.form.get("note", "").replace("\r\n", "\n")[: self.MAX_LENGTH]
        changes.set_note(request, note, Actor.staff(user), self.clock())
        raise see_other(pages.request(request.id))


class RequestTranscript:
    """Staff's correction of the transcript (what was really said), audited as the staff
    user; the machine's text is kept beside it. Back to the request page (PRG)."""

    login_required = True

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        text = req.context.form.get("transcript", "")
        changes.correct_transcript(request, text, Actor.staff(user), self.clock())  # none: 400 (Invalid)
        raise see_other(pages.request(request.id))


class RequestTags:
    """Add one of the clinic's request tags (the API's PATCH `addTagIds`) or remove one,
    audited as the staff user; back to the request page (PRG)."""

    login_required = True

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        form = req.context.form
        try:
            added, removed = (uuid.UUID(form[k]) if form.get(k) else None for k in ("add", "remove"))
        except ValueError:
            raise falcon.HTTPBadRequest() from None
        if added is not None:  # another clinic's tag: refused by add_tag's own check (400)
            changes.add_tag(request, added, Actor.staff(user), self.clock())
        if removed is not None:
            changes.remove_tag(request, removed, Actor.staff(user), self.clock())
        raise see_other(pages.request(request.id))


class ConsoleRecording:
    """The <audio> element's source: the API's play logic (RecordingPlayer) behind the
    session: 302 to a working link, 410 when the recording is gone (the transcript stays),
    503 while the platform does not give it. And (`/state`) what the recording is now, as its
    row says it (JSON: `state`, `text`), for console.js when a play fails after the page was
    drawn: asked instead of playing again, so it costs no second round trip to the platform."""

    login_required = True

    def __init__(self, renderer: Renderer, player: RecordingPlayer, clock: Clock) -> None:
        self.renderer = renderer
        self.player = player
        self.clock = clock

    @staticmethod
    def _call_of(req: falcon.Request, request_id: str) -> tuple[StaffUser, Call]:
        user, request = own_request(req, request_id)
        call = request.call if request.call_id else None
        if call is None:
            raise falcon.HTTPNotFound()
        return user, call

    def on_get(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        call = request.call if request.call_id else None
        if call is None:
            raise falcon.HTTPNotFound()
        now = self.clock()
        answer = self.player.play(call, now)
        if answer.kind == "link":
            read_trail.record_recording(user, request.clinic_id, request.patient_id, request.id, now)
            resp.status = falcon.HTTP_302
            resp.location = answer.url
            resp.cache_control = ["no-store"]
            return
        tr = self.renderer.translations[user.language]
        gone = answer.kind == "gone"
        if not gone:
            resp.set_header("Retry-After", str(answer.retry_after))
        said = inbox.GONE if gone else inbox.TRY_AGAIN
        html(
            resp,
            self.renderer.render(
                "console/refused.html",
                user.language,
                user=user,
                csrf_token=req.context.console_session.csrf_token,
                title=tr.gettext("Recording"),
                message=tr.gettext(said),
            ),
            falcon.HTTP_410 if gone else falcon.HTTP_503,
        )

    def on_get_state(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, call = self._call_of(req, request_id)
        tr = self.renderer.translations[user.language]
        state = self.player.states([call], self.clock())[call.id]
        if state.state == "gone":
            why = inbox.WHY_GONE.get(state.reason or "")
            text = tr.gettext(inbox.GONE) + (" " + tr.gettext(why) if why else "")
        elif state.state == "none":
            text = tr.gettext(inbox.NO_RECORDING)
        else:  # it may play again later: the failed play was the platform's or the network's
            text = tr.gettext(inbox.TRY_AGAIN)
        resp.media = {"state": state.state, "text": text}
        resp.cache_control = ["no-store"]


class ConsoleDocument:
    """A signed document of a request, opened from its page: recorded in the read trail,
    then 302 to a short-lived presigned link (the storage's, never shown on the page)."""

    login_required = True

    def __init__(self, links: LinkCache, clock: Clock) -> None:
        self.links = links
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, request_id: str, document_id: str) -> None:
        user, request = own_request(req, request_id)
        try:
            wanted = uuid.UUID(document_id)
        except ValueError:
            raise falcon.HTTPNotFound() from None
        document = next((d for d in queries.attachments_of(request) if d.id == wanted), None)
        if document is None:
            raise falcon.HTTPNotFound()
        read_trail.record(user, request.clinic_id, "document", [(request.patient_id, request.id)], self.clock())
        resp.status = falcon.HTTP_302
        resp.location = self.links.url(document, "attachment")
        resp.cache_control = ["no-store"]
