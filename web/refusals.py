"""Middleware that records every refused `recording-complete` (switchboard/refusals.py).

A resource opts in with `records_refusals = True`. Its 4xx answers given after the token was
authenticated (a 401 names nobody to attribute it to; the access log has those) are
recorded and counted, whatever refused them: the clinic (404), the scope (403), the rate
limit (429), the body's size or deadline (413, 411, 408), its content (400) or the CallSid
(409). Runs before the request's database connection is handed back.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon

from plumbing import metrics
from switchboard import refusals

log = logging.getLogger(__name__)


class HandoffRefusals:
    """Installed before the token check, so that it sees the URL's clinic slug first."""

    def __init__(self, recorder: metrics.Recorder) -> None:
        self.recorder = recorder

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict) -> None:
        if getattr(resource, "records_refusals", False):
            req.context.handoff_clinic_slug = str(params.get("clinic_slug", ""))

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool) -> None:
        if not getattr(resource, "records_refusals", False) or req.method != "POST":
            return
        status = resp.status_code
        token = getattr(req.context, "token", None)
        if not 400 <= status < 500 or token is None:
            return
        try:
            answer = json.loads(resp.text or "{}")
        except ValueError:
            answer = {}
        code = str(answer.get("code") or "ERROR")
        self.recorder.count(metrics.HANDOFFS_REFUSED, (str(status), code))
        clinic = getattr(req.context, "clinic", None)
        try:
            refusals.record(
                getattr(req.context, "handoff_clinic_slug", ""),
                clinic.id if clinic is not None else None,
                token.id,
                getattr(req.context, "call_sid", None),
                status,
                code,
                str(answer.get("error") or ""),
            )
        except Exception as exc:  # the database away: the answer stands, the counter has it
            log.warning("refused hand-off not recorded (%s)", type(exc).__name__)
