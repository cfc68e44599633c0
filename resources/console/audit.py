"""The audit page, /console/audit: the clinic's audit trail for its admins, in words
(console/audit_words.py), newest first, filtered by who, what and when, a keyset page at a
time."""

from __future__ import annotations

import urllib.parse

import falcon

from console import audit, audit_words, pages
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
        events = audit_words.describe(rows, clinic, language, self.renderer.translations[language])
        query = {"clinic": clinic.slug, **{k: v for k, v in filters.items() if v}}
        more = pages.AUDIT + "?" + urllib.parse.urlencode({**query, "after": cursor}) if cursor else None
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
