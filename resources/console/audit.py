"""The audit page, /console/audit (issue 21, item 6): the clinic's audit trail for its
admins, newest first, filtered by who, what and when, a keyset page at a time."""

from __future__ import annotations

import json
import urllib.parse

import falcon

from console import audit
from console.inbox import local_time
from console.rendering import Renderer, html
from plumbing.errors import Invalid


class AuditList:
    admin_required = True

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session, clinic = req.context.console_session, req.context.admin_clinic
        language = session.user.language
        filters = {
            "who": (req.get_param("who") or "")[:200],
            "what": what if (what := req.get_param("what") or "") in audit.ACTIONS else "",
            "since": (req.get_param("since") or "")[:10],
            "until": (req.get_param("until") or "")[:10],
        }
        try:
            rows, cursor = audit.events(
                clinic,
                filters["who"],
                filters["what"],
                audit.day_start(filters["since"], clinic),
                audit.day_start(filters["until"], clinic, later_days=1),  # the whole day
                req.get_param("after"),
            )
        except Invalid:  # a cursor that is not one of this list's
            raise falcon.HTTPBadRequest() from None
        tr = self.renderer.translations[language]
        events = [
            {
                "time": local_time(e.at, clinic, language),
                "who": f"{tr.gettext(audit.WHO.get(e.actor_kind, e.actor_kind))}: {e.actor_name}",
                "what": tr.gettext(audit.ACTIONS.get(e.action, e.action)),
                "action": e.action,
                "target": f"{e.target_type}:{e.target_id}" if e.target_type else "",
                "address": e.address or "",
                "details": _details(e.details),
            }
            for e in rows
        ]
        query = {"clinic": clinic.slug, **{k: v for k, v in filters.items() if v}}
        more = "/console/audit?" + urllib.parse.urlencode({**query, "after": cursor}) if cursor else None
        html(
            resp,
            self.renderer.render(
                "console/audit.html",
                language,
                user=session.user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=req.context.admin_clinics,
                events=events,
                actions=audit.ACTIONS,
                more=more,
                **filters,
            ),
        )


def _details(text: str) -> str:
    """The event's details as `key=value` pairs (names, counts and ids only, never secrets)."""
    values = json.loads(text or "{}")
    return ", ".join(f"{k}={v}" for k, v in values.items())
