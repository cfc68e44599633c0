"""The events integrators are told of: the events API's items and every webhook's body (the
same object), and the events API's query."""

from __future__ import annotations

from models.change_events import TYPES
from web.schemas.common import DATE_TIME, UUID, answer, component, nullable

EVENT_TYPE = component(
    "EventType",
    {
        "enum": list(TYPES),
        "description": "request.created (API, voice message, missed call); request.updated (resolved, reopened, "
        "tags, note, type confirmed, urgency cleared: `changed` names which); attachment.added; "
        "recording.unavailable (`reason`); patient.erased.",
    },
)

EVENT_DATA = component(
    "EventData",
    answer(
        {
            "requestId": UUID,
            "patientId": nullable(
                UUID, description="The patient concerned; null for a recording whose call made no request."
            ),
            "attachmentId": UUID,
            "callId": UUID,
            "kind": {"enum": ["standard", "voice_message", "missed_call"]},
            "source": {"enum": ["api", "voicemail", "missed_call"], "description": "What made the request."},
            "changed": {
                "type": "array",
                "items": {"enum": ["done", "tags", "note", "type", "urgent"]},
                "description": "What a request.updated changed (names only: fetch the request for the values).",
            },
            "done": {"type": "boolean", "description": "With `changed` done: resolved (true) or reopened (false)."},
            "reason": {"type": "string", "description": "Why a recording is unavailable (as the request's detail)."},
        },
        optional=("requestId", "attachmentId", "callId", "kind", "source", "changed", "done", "reason"),
        description="The ids an event concerns and what changed; never patient data (fetch with your API key).",
    ),
)

EVENT = component(
    "Event",
    answer(
        {
            "id": {
                **UUID,
                "description": "Stable: the `webhook-id` of every delivery of this event. Deduplicate by it.",
            },
            "type": EVENT_TYPE,
            "occurredAt": {
                **DATE_TIME,
                "description": "When the change committed; order by it (delivery order is not guaranteed).",
            },
            "clinicSlug": nullable({"type": "string"}),
            "data": EVENT_DATA,
        },
        description="One change, as GET /events lists it and a webhook delivers it.",
    ),
)

EVENT_PAGE = component(
    "EventPage",
    answer(
        {
            "data": {"type": "array", "items": EVENT},
            "pagination": answer(
                {
                    "nextCursor": {
                        "type": "string",
                        "description": "Pass it as `after` for the events that follow; kept even when no event "
                        "follows yet, so a poller keeps its place.",
                    },
                    "hasMore": {"type": "boolean", "description": "More events follow at once."},
                },
            ),
        },
    ),
)
