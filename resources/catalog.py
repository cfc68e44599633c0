"""Clinic configuration the integrator looks up: request types and tags."""

from __future__ import annotations

import falcon

from models import Tag
from patient_requests import queries
from web import schemas, shapes, validation
from web.errors import validation_failed


class RequestTypeSearch:
    """POST /patientRequestTypes/search: the clinic's active request types."""

    scopes = {"POST": "read"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        validation.body(req, schemas.EMPTY_REQUEST, optional=True)
        resp.media = {"data": [shapes.request_type(t) for t in queries.active_types(req.context.clinic)]}


class Tags:
    """GET /tags?type=patient_request: the clinic's tags that are not deleted."""

    scopes = {"GET": "read"}

    def on_get(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        tag_type = req.get_param("type")
        if tag_type is not None and tag_type not in Tag.TYPES:
            raise validation_failed(f"type: one of {', '.join(Tag.TYPES)}", param="?type")
        resp.media = {"data": [shapes.tag(t) for t in queries.clinic_tags(req.context.clinic, tag_type)]}
