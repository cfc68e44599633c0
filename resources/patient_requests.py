"""Patient requests and their attachments (signed-documents flow, steps 3, 4, 6, 7)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import falcon

from documents import attachments
from jobs.playback import RecordingPlayer
from models import Call
from patient_requests import changes, queries
from plumbing.clock import Clock
from privacy import read_trail
from storage import Storage
from storage.links import LinkCache
from voicemail.recordings import gone_message
from web import schemas, shapes, validation
from web.errors import APIError
from web.idempotency import answering


class RequestCreate:
    scopes = {"POST": "write"}
    not_idempotent = {"POST"}
    idempotency_key = {"POST": "createPatientRequest"}  # web/idempotency.py

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.CREATE_REQUEST)
        resp.media = {
            "data": changes.create(
                req.context.clinic,
                uuid.UUID(body["patientId"]),
                uuid.UUID(body["userECRFId"]),
                note=body.get("userNote", ""),
                slot=_time_slot(body.get("timeSlotInput")),
                actor=req.context.token,
                now=self.clock(),
                then=answering(req, shapes.request),
            )
        }


def _time_slot(slot: dict[str, Any] | None) -> changes.TimeSlot | None:
    if slot is None:
        return None
    start, end = (datetime.fromisoformat(slot[k].replace("Z", "+00:00")) for k in ("start", "end"))
    return changes.TimeSlot(uuid.UUID(slot["calendarId"]), start, end)


class RequestSearch:
    scopes = {"POST": "read"}

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.REQUEST_SEARCH_REQUEST, optional=True)
        flt, pagination = body.get("filter", {}), body.get("pagination", {})
        found, cursor = queries.search(
            req.context.clinic,
            patient_id=uuid.UUID(flt["patientId"]) if "patientId" in flt else None,
            kind=flt.get("kind"),
            updated_since=datetime.fromisoformat(flt["updatedSince"]) if "updatedSince" in flt else None,
            cursor=pagination.get("cursor"),
            # JSON Schema counts 9.0 as an integer (found by the fuzzer: a float slice index was a 500).
            limit=int(pagination.get("limit", queries.DEFAULT_LIMIT)),
        )
        data = shapes.requests(found)
        # The read trail: one row per request listed, in one INSERT.
        listed = [(r.patient_id, r.id) for r in found]
        read_trail.record(req.context.token, req.context.clinic.id, "request_search", listed, self.clock())
        resp.media = {"data": data, "pagination": {"nextCursor": cursor}}


class RequestDetail:
    scopes = {"GET": "read", "PATCH": "write"}
    idempotency_key = {"PATCH": "updatePatientRequest"}

    def __init__(self, links: LinkCache, player: RecordingPlayer | None, clock: Clock) -> None:
        self.links = links
        self.player = player
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = queries.request_of(req.context.clinic, request_id)
        now = self.clock()
        data = shapes.detail(request, self.links)
        if request.call_id is not None and self.player is not None:
            data["call"] = self.player.describe(Call.get_by_id(request.call_id), now)
        # The read trail: its transcript, notes, numbers and documents' links were read.
        read_trail.record(req.context.token, request.clinic_id, "request", [(request.patient_id, request.id)], now)
        resp.media = {"data": data}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = queries.request_of(req.context.clinic, request_id)
        body = validation.body(req, schemas.REQUEST_PATCH)
        wanted = changes.Changes(
            add_tags=shapes.ids(body.get("addTagIds")), note=body.get("userNote"), done=body.get("done")
        )
        resp.media = {
            "data": changes.update(request, wanted, req.context.token, self.clock(), answering(req, shapes.request))
        }


class UploadLink:
    scopes = {"POST": "write"}
    idempotency_key = {"POST": "createUploadLink"}

    def __init__(self, storage: Storage, open_links_limit: int, clock: Clock) -> None:
        self.storage = storage
        self.open_links_limit = open_links_limit  # Config.upload_links_per_clinic
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = queries.request_of(req.context.clinic, request_id)
        body = validation.body(req, schemas.UPLOAD_LINK_REQUEST)
        url, key = attachments.issue_upload_link(
            self.storage,
            request,
            body["contentType"],
            req.context.token,
            self.clock(),
            open_links_limit=self.open_links_limit,
            # The key alone: a presigned URL is a credential, never stored (`replay` presigns anew).
            then=lambda key: req.context.remember({"fileHash": key}),
        )
        resp.media = {"data": shapes.upload_link(url, key)}

    def replay(self, req: falcon.Request, stored: dict[str, str], clinic_slug: str, request_id: str) -> dict[str, str]:
        """A retry with the same Idempotency-Key: the same `fileHash`, a fresh URL (the
        first may have expired; URLs are never stored)."""
        request = queries.request_of(req.context.clinic, request_id)
        key = stored["fileHash"]
        return shapes.upload_link(attachments.upload_link_again(self.storage, request, key), key)


class Attachments:
    scopes = {"POST": "write"}
    not_idempotent = {"POST"}
    idempotency_key = {"POST": "registerAttachment"}

    def __init__(self, storage: Storage, clock: Clock) -> None:
        self.storage = storage
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = queries.request_of(req.context.clinic, request_id)
        body = validation.body(req, schemas.ATTACHMENT_REQUEST)
        resp.media = {
            "data": attachments.register_attachment(
                self.storage, request, body, req.context.token, self.clock(), answering(req, shapes.attachment)
            )
        }


class RequestRecording:
    """Play the recording of a request made from a call: 302 to a working link, 410 when
    it is gone (the transcript remains), 503 + Retry-After while the platform is not
    answering. An expired link is re-fetched within this request, bounded."""

    scopes = {"GET": "read"}

    def __init__(self, player: RecordingPlayer, clock: Clock) -> None:
        self.player = player
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = queries.request_of(req.context.clinic, request_id)
        if request.call_id is None:
            raise APIError(404, "NOT_FOUND", "This request was not made from a call: it has no recording.")
        now = self.clock()
        answer = self.player.play(Call.get_by_id(request.call_id), now)
        if answer.kind == "gone":
            raise APIError(410, "RECORDING_UNAVAILABLE", gone_message(answer.reason or "deleted"))
        if answer.kind == "later":
            raise APIError(
                503,
                "SERVICE_UNAVAILABLE",
                "The switchboard platform has not handed out the recording yet; try again shortly.",
                headers={"Retry-After": str(answer.retry_after)},
            )
        read_trail.record(req.context.token, request.clinic_id, "recording", [(request.patient_id, request.id)], now)
        resp.status = falcon.HTTP_302
        resp.location = answer.url
        resp.cache_control = ["no-store"]
