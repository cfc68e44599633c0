"""Patient requests and their attachments (signed-documents flow, steps 3, 4, 6, 7)."""
from __future__ import annotations

import falcon

import documents
import schemas
from documents import LinkCache
from models import PatientRequest
from storage import Storage


class RequestCreate:
    scopes = {"POST": "write"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = schemas.body(req, schemas.CREATE_REQUEST)
        request = documents.create_request(req.context.clinic, body, req.context.token)
        resp.media = {"data": documents.summaries([request])[0]}


class RequestSearch:
    scopes = {"POST": "read"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = schemas.body(req, schemas.REQUEST_SEARCH_REQUEST, optional=True)
        found, cursor = documents.search_requests(req.context.clinic, body.get("filter", {}), body.get("pagination", {}))
        resp.media = {"data": found, "pagination": {"nextCursor": cursor}}


class RequestDetail:
    scopes = {"GET": "read", "PATCH": "write"}

    def __init__(self, links: LinkCache) -> None:
        self.links = links

    def on_get(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = documents.request_of(req.context.clinic, request_id)
        resp.media = {"data": documents.detail(request, self.links)}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = documents.request_of(req.context.clinic, request_id)
        body = schemas.body(req, schemas.REQUEST_PATCH)
        documents.patch_request(req.context.clinic, request, body)
        resp.media = {"data": documents.summaries([PatientRequest.get_by_id(request.id)])[0]}


class UploadLink:
    scopes = {"POST": "write"}

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = documents.request_of(req.context.clinic, request_id)
        body = schemas.body(req, schemas.UPLOAD_LINK_REQUEST)
        resp.media = {"data": documents.issue_upload_link(self.storage, request, body["contentType"])}


class Attachments:
    scopes = {"POST": "write"}

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str, request_id: str) -> None:
        request = documents.request_of(req.context.clinic, request_id)
        body = schemas.body(req, schemas.ATTACHMENT_REQUEST)
        record = documents.register_attachment(self.storage, request, body, req.context.token)
        resp.media = {"data": documents.attachment_json(record)}
