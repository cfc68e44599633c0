"""One request's page and its writes (note, tags, resolution), and its recording's player."""

from __future__ import annotations

import json
import urllib.parse
import uuid
from collections.abc import Callable
from datetime import datetime

import falcon

from console import audit, inbox
from console.rendering import N_, Renderer, html, see_other
from documents import patient_requests
from jobs.playback import RecordingPlayer
from models import Actor
from resources.console import own_request
from storage.links import LinkCache


class RequestPage:
    """One request: its row, type, notes, tags, signed documents (the API detail's
    presigned links) and its history from the audit trail. Another clinic's id: 404."""

    login_required = True
    _WHAT = {
        "patient_request.create": N_("Created"),
        "call.receive": N_("Call received"),
        "patient_request.patch": N_("Changed"),
        "call.recording_mismatch": N_("Recording did not match the call"),
    }

    def __init__(self, renderer: Renderer, links: LinkCache) -> None:
        self.renderer = renderer
        self.links = links

    def on_get(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        session = req.context.console_session
        user, request = own_request(req, request_id)
        clinic, language = request.clinic, user.language
        tr = self.renderer.translations[language]
        data = patient_requests.detail(request, self.links)
        documents = [
            {
                "description": d["description"],
                "category": d["categoryType"],
                "sha256": d["sha256"],
                "visible": d["visibleToPatient"],
                "url": d["downloadUrl"],
                "registered": inbox.local_time(
                    datetime.fromisoformat(d["createdAt"].replace("Z", "+00:00")), clinic, language
                ),
            }
            for d in data["medicalRecords"]
        ]
        events = []
        # What was odd about the call's hand-off, said beside its "Call received".
        call = request.call if request.call_id else None
        odd = (
            [tr.gettext(audit.ANOMALIES.get(name, name)) for name in json.loads(call.anomalies or "[]")]
            if call is not None
            else []
        )
        for event in inbox.history(request):
            details = json.loads(event.details or "{}")
            what = self._WHAT.get(event.action, event.action)
            if event.action == "patient_request.patch" and "done" in details:
                what = N_("Marked resolved") if details["done"] else N_("Reopened")
            events.append(
                {
                    "time": inbox.local_time(event.at, clinic, language),
                    "what": tr.gettext(what),
                    "who": f"{tr.gettext(audit.WHO.get(event.actor_kind, event.actor_kind))}: {event.actor_name}",
                    "notes": odd if event.action == "call.receive" else [],
                }
            )
        row = inbox.row(request, clinic, language)
        held = {tag["id"] for tag in data["tags"]}
        html(
            resp,
            self.renderer.render(
                "console/request.html",
                language,
                user=user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                row=row,
                title=row["name"] or tr.gettext("unknown caller"),
                type_name=request.request_type.name if request.request_type is not None else None,
                clinic_note=request.clinic_note,
                user_note=request.user_note,
                tags=data["tags"],
                other_tags=[t for t in patient_requests.clinic_tags(clinic, "patient_request") if t["id"] not in held],
                documents=documents,
                events=events,
            ),
        )


class RequestResolution:
    """Resolve (done=1) or reopen (done=0) from a row's button; back to the inbox (PRG)."""

    login_required = True

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        done = req.context.form.get("done")
        if done not in ("0", "1"):
            raise falcon.HTTPBadRequest()
        # The API's PATCH `done` path, recorded in the audit trail as this staff user.
        patient_requests.patch_request(request.clinic, request, {"done": done == "1"}, Actor.staff(user))
        raise see_other("/console/?" + urllib.parse.urlencode({"clinic": request.clinic.slug}))


class RequestNote:
    """Set the request's note (the API's PATCH `userNote`), audited as the staff user."""

    login_required = True
    MAX_LENGTH = 5000

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        note = req.context.form.get("note", "").replace("\r\n", "\n")[: self.MAX_LENGTH]
        patient_requests.patch_request(request.clinic, request, {"userNote": note}, Actor.staff(user))
        raise see_other(f"/console/requests/{request.id}")


class RequestTags:
    """Add one of the clinic's request tags (the API's PATCH `addTagIds`) or remove one,
    audited as the staff user; back to the request page (PRG)."""

    login_required = True

    def on_post(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        form = req.context.form
        try:
            added, removed = (uuid.UUID(form[k]) if form.get(k) else None for k in ("add", "remove"))
        except ValueError:
            raise falcon.HTTPBadRequest() from None
        if added is not None:  # another clinic's tag: refused by patch_request's own check (400)
            patient_requests.patch_request(request.clinic, request, {"addTagIds": [str(added)]}, Actor.staff(user))
        if removed is not None:
            patient_requests.remove_tag(request, removed, Actor.staff(user))
        raise see_other(f"/console/requests/{request.id}")


class ConsoleRecording:
    """The <audio> element's source: the API's play logic (RecordingPlayer) behind the
    session: 302 to a working link, 410 when the recording is gone (the transcript stays)."""

    login_required = True

    def __init__(self, renderer: Renderer, player: RecordingPlayer, clock: Callable) -> None:
        self.renderer = renderer
        self.player = player
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, request_id: str) -> None:
        user, request = own_request(req, request_id)
        call = request.call if request.call_id else None
        if call is None:
            raise falcon.HTTPNotFound()
        answer = self.player.play(call, self.clock())
        if answer.kind == "link":
            resp.status = falcon.HTTP_302
            resp.location = answer.url
            resp.cache_control = ["no-store"]
            return
        tr = self.renderer.translations[user.language]
        if answer.kind == "gone":
            html(
                resp,
                self.renderer.render(
                    "console/refused.html",
                    user.language,
                    user=user,
                    csrf_token=req.context.console_session.csrf_token,
                    title=tr.gettext("Recording"),
                    message=tr.gettext("The recording is no longer available; the transcript stays."),
                ),
                falcon.HTTP_410,
            )
            return
        resp.set_header("Retry-After", str(answer.retry_after))
        html(
            resp,
            self.renderer.render(
                "console/refused.html",
                user.language,
                user=user,
                csrf_token=req.context.console_session.csrf_token,
                title=tr.gettext("Recording"),
                message=tr.gettext("The recording is not ready yet; try again shortly."),
            ),
            falcon.HTTP_503,
        )
