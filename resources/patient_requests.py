"""Patient requests and their attachments (signed-documents flow, steps 3, 4, 6, 7)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import falcon

from documents import patient_requests
from jobs.playback import RecordingPlayer
from models import Call
from plumbing import clock
from storage import Storage
from storage.links import LinkCache
from voicemail.recordings import gone_message
from web import schemas, validation
from web.errors import APIError


class RequestCreate:
    scopes = {"POST": "write"}
    not_idempotent = {"POST"}
    idempotency_key = {"POST": "createPatientRequest"}  # web/idempotency.py

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.CREATE_REQUEST)
        resp.media = {
            "data": patient_requests.create_request(req.context.clinic, body, req.context.token, req.context.remember)
        }


class RequestSearch:
    scopes = {"POST": "read"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.REQUEST_SEARCH_REQUEST, optional=True)
        found, cursor = patient_requests.search_requests(
            req.context.clinic, body.get("filter", {}), body.get("pagination", {})
        )
        resp.media = {"data": found, "pagination": {"nextCursor": cursor}}


class RequestDetail:
    scopes = {"GET": "read", "PATCH": "write"}
    idempotency_key = {"PATCH": "updatePatientRequest"}

    def __init__(
        self, links: LinkCache, player: RecordingPlayer | None = None, clock: Callable[[], datetime] = clock.now
    ) -> None:
        self.links = links
        self.player = player
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = patient_requests.request_of(req.context.clinic, request_id)
        data = patient_requests.detail(request, self.links)
        if request.call_id is not None and self.player is not None:
            data["call"] = self.player.describe(Call.get_by_id(request.call_id), self.clock())
        resp.media = {"data": data}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = patient_requests.request_of(req.context.clinic, request_id)
        body = validation.body(req, schemas.REQUEST_PATCH)
        resp.media = {
            "data": patient_requests.patch_request(
                req.context.clinic, request, body, req.context.token, req.context.remember
            )
        }


class UploadLink:
    scopes = {"POST": "write"}
    idempotency_key = {"POST": "createUploadLink"}

    def __init__(self, storage: Storage, open_links_limit: int) -> None:
        self.storage = storage
        self.open_links_limit = open_links_limit  # Config.upload_links_per_clinic

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = patient_requests.request_of(req.context.clinic, request_id)
        body = validation.body(req, schemas.UPLOAD_LINK_REQUEST)
        resp.media = {
            "data": patient_requests.issue_upload_link(
                self.storage,
                request,
                body["contentType"],
                req.context.token,
                open_links_limit=self.open_links_limit,
                remember=req.context.remember,
            )
        }

    def replay(self, req: falcon.Request, stored: dict[str, str], clinic_slug: str, request_id: str) -> dict[str, str]:
        """A retry with the same Idempotency-Key: the same `fileHash`, a fresh URL (the
        first may have expired; URLs are never stored)."""
        request = patient_requests.request_of(req.context.clinic, request_id)
        return patient_requests.upload_link_again(self.storage, request, stored["fileHash"])


class Attachments:
    scopes = {"POST": "write"}
    not_idempotent = {"POST"}
    idempotency_key = {"POST": "registerAttachment"}

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = patient_requests.request_of(req.context.clinic, request_id)
        body = validation.body(req, schemas.ATTACHMENT_REQUEST)
        record = patient_requests.register_attachment(
            self.storage, request, body, req.context.token, req.context.remember
        )
        resp.media = {"data": patient_requests.attachment_json(record)}


class RequestRecording:
    """Play the recording of a request made from a call: 302 to a working link, 410 when
    it is gone (the transcript remains), 503 + Retry-After while the platform is not
    answering. An expired link is re-fetched within this request, bounded."""

    scopes = {"GET": "read"}

    def __init__(self, player: RecordingPlayer, clock: Callable[[], datetime] = clock.now) -> None:
        self.player = player
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = patient_requests.request_of(req.context.clinic, request_id)
        if request.call_id is None:
            raise APIError(404, "NOT_FOUND", "This request was not made from a call: it has no recording.")
        answer = self.player.play(Call.get_by_id(request.call_id), self.clock())
        if answer.kind == "gone":
            raise APIError(410, "RECORDING_UNAVAILABLE", gone_message(answer.reason or "deleted"))
        if answer.kind == "later":
            raise APIError(
                503,
                "SERVICE_UNAVAILABLE",
                "The switchboard platform has not handed out the recording yet; try again shortly.",
                headers={"Retry-After": str(answer.retry_after)},
            )
        resp.status = falcon.HTTP_302
        resp.location = answer.url
        resp.cache_control = ["no-store"]
