"""The inbox and its live update."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from datetime import datetime

import falcon

from console import inbox, pages
from console.rendering import Renderer, html
from jobs.playback import RecordingPlayer
from models import StaffUser
from plumbing.clock import as_utc
from resources.console import clinic_of, inbox_filters, rows_of


class Inbox:
    login_required = True

    def __init__(self, renderer: Renderer, clock: Callable, player: RecordingPlayer) -> None:
        self.renderer = renderer
        self.clock = clock
        self.player = player

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        user: StaffUser = session.user
        clinic, clinics = clinic_of(req, user)
        filters = inbox_filters(req)
        rows = []
        if clinic is not None:
            found = inbox.requests(
                clinic,
                state=filters["state"],
                kind=filters["kind"] or None,
                request_type=filters["type"] or None,
                search=filters["q"],
            )
            rows = rows_of(found, clinic, user.language, self.player, self.clock())
        # The live update asks for rows newer than the newest shown (or than now); the newest
        # is not the first when a flagged one is.
        after = max(str(r["created"]) for r in rows) if rows else as_utc(self.clock()).isoformat()
        rows_url = pages.ROWS + "?" + urllib.parse.urlencode({"clinic": clinic.slug if clinic else "", **filters})
        html(
            resp,
            self.renderer.render(
                "console/inbox.html",
                user.language,
                user=user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=clinics,
                rows=rows,
                types=inbox.clinic_types(clinic) if clinic else [],
                after=after,
                rows_url=rows_url,
                **filters,
            ),
        )


class InboxRows:
    """The live update: the rows created after `after`, rendered by the row template."""

    login_required = True

    def __init__(self, renderer: Renderer, clock: Callable, player: RecordingPlayer) -> None:
        self.renderer = renderer
        self.clock = clock
        self.player = player

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        user: StaffUser = session.user
        clinic, _ = clinic_of(req, user)
        try:
            after = datetime.fromisoformat(req.get_param("after") or "")
        except ValueError:
            raise falcon.HTTPBadRequest() from None
        filters = inbox_filters(req)
        if clinic is None:
            html(resp, "")
            return
        found = inbox.requests(
            clinic,
            state=filters["state"],
            kind=filters["kind"] or None,
            request_type=filters["type"] or None,
            search=filters["q"],
            after=after,
        )
        rows = "".join(
            self.renderer.render("console/_row.html", user.language, row=row, csrf_token=session.csrf_token)
            for row in (rows_of(found, clinic, user.language, self.player, self.clock()) if clinic else [])
        )
        html(resp, rows)
