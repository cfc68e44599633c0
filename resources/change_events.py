"""GET /events: the clinic's event log, oldest first, to catch up from (the ids the webhooks
carry; kept 30 days)."""

from __future__ import annotations

import falcon

from models import ChangeEvent
from models.change_events import TYPES
from plumbing.errors import Invalid
from plumbing.keyset import Keyset
from web.errors import validation_failed

DEFAULT_LIMIT, MAX_LIMIT = 100, 500
#: A cursor is the place in the log of the last event read.
EVENT_ORDER = Keyset(ChangeEvent.position)


class Events:
    scopes = {"GET": "read"}

    def on_get(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        clinic = req.context.clinic
        after = req.get_param("after")
        raw_limit = req.get_param("limit")
        types = req.get_param_as_list("type") or []
        try:
            limit = int(raw_limit) if raw_limit is not None else DEFAULT_LIMIT
        except ValueError:
            raise validation_failed("limit: an integer from 1 to 500", param="?limit") from None
        if not 1 <= limit <= MAX_LIMIT:
            raise validation_failed("limit: an integer from 1 to 500", param="?limit")
        unknown = sorted(set(types) - set(TYPES))
        if unknown:
            raise validation_failed(f"type: one of {', '.join(TYPES)}", param="?type")
        try:
            position = EVENT_ORDER.key(after)[0] if after else None
        except Invalid:
            raise validation_failed("after: not a cursor of this log", param="?after") from None
        ChangeEvent.place()  # what committed since the workers last placed (they do, every moment)
        found, more = ChangeEvent.page(clinic.id, position, limit, types)
        cursor = EVENT_ORDER.cursor(found[-1]) if found else (after or "")
        resp.media = {
            "data": [event.shape(clinic.slug) for event in found],
            "pagination": {"nextCursor": cursor, "hasMore": more},
        }
