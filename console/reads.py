"""The read trail's page, /console/reads, for the clinic's administrators and its
data-protection officer: the breach question, "everything staff member X or key Y read
between two days", as a table and as CSV (privacy/read_trail.py; `manage.py reads` asks
the same). A patient's page says who read that patient (console/patient.py)."""

from __future__ import annotations

import urllib.parse

import falcon

from console import pages
from console.audit import day_start
from console.inbox import local_time
from console.patient_words import marker_words
from console.rendering import N_, Renderer, html
from plumbing.clock import Clock
from privacy import read_trail

#: Each kind of read (models.audit.ReadEvent.KINDS) in words.
KINDS: dict[str, str] = {
    "request": N_("request opened (transcript, notes, documents' links)"),
    "recording": N_("recording played or loaded by the player"),
    "document": N_("signed document opened"),
    "patient": N_("patient's page opened"),
    "copy": N_("patient's copy made"),
    "request_search": N_("listed in a request search"),
    "patient_search": N_("listed in a patient search"),
}


class ReadsPage:
    admin_required = True
    officer_allowed = True  # console/middleware.py: the clinic's officer opens it too

    def __init__(self, renderer: Renderer, clock: Clock) -> None:
        self.renderer = renderer
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session, clinic = req.context.console_session, req.context.admin_clinic
        language = session.user.language
        filters = {
            "who": (req.get_param("who") or "").strip()[:254],
            "since": (req.get_param("since") or "")[:10],
            "until": (req.get_param("until") or "")[:10],
        }
        since, until = day_start(filters["since"], clinic), day_start(filters["until"], clinic, later_days=1)
        as_csv = req.get_param("format") == "csv"
        found = (
            read_trail.reads_by([clinic.id], filters["who"], since, until, None if as_csv else read_trail.PAGE_LIMIT)
            if filters["who"]
            else []
        )
        if as_csv:
            resp.content_type = "text/csv; charset=utf-8"
            resp.downloadable_as = f"reads-{clinic.slug}-{self.clock().date().isoformat()}.csv"
            resp.cache_control = ["no-store"]
            resp.text = read_trail.as_csv(found)
            return
        query = {"clinic": clinic.slug, **{k: v for k, v in filters.items() if v}}
        html(
            resp,
            self.renderer.render(
                "console/reads.html",
                language,
                user=session.user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=req.context.admin_clinics,
                reads=[
                    {
                        "at": local_time(r.at, clinic, language),
                        "kind": r.kind,
                        "patient": marker_words(r.patient_marker, language) if r.patient_marker else r.patient_name,
                        "patient_id": r.patient_id,
                        "request_id": r.request_id,
                        "address": r.address,
                    }
                    for r in found
                ],
                read_kinds=KINDS,
                limited=len(found) >= read_trail.PAGE_LIMIT,
                csv_url=pages.READS + "?" + urllib.parse.urlencode({**query, "format": "csv"}),
                **filters,
            ),
        )
