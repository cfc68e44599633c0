"""Middleware that records every refused `recording-complete` (switchboard/refusals.py).

A resource opts in with `records_refusals = True`. Its 4xx answers given after the token was
authenticated are recorded and counted, whatever refused them: the clinic (404), the scope
(403), the rate limit (429), the body's size or deadline (413, 411, 408), its content (400)
or the CallSid (409). A 401 for a key of the service that expired or was revoked (its secret
right, web/auth.py) is recorded as a refusal of that key's clinic, with the reason, and its
administrators are told (once per key per day); an unknown or forged key is only counted
(no row, no e-mail: no flood from strangers). Runs before the request's database connection
is handed back.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon

from plumbing import metrics
from plumbing.clock import Clock
from switchboard import refusals

log = logging.getLogger(__name__)


class HandoffRefusals:
    """Installed before the token check, so that it sees the URL's clinic slug first."""

    def __init__(self, recorder: metrics.Recorder, clock: Clock) -> None:
        self.recorder = recorder
        self.clock = clock

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict) -> None:
        if getattr(resource, "records_refusals", False):
            req.context.handoff_clinic_slug = str(params.get("clinic_slug", ""))

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool) -> None:
        if not getattr(resource, "records_refusals", False) or req.method != "POST":
            return
        status = resp.status_code
        token = getattr(req.context, "token", None)
        if status == 401 and hasattr(req.context, "key_refusal"):
            self._key_refused(req)
            return
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

    def _key_refused(self, req: falcon.Request) -> None:
        found = req.context.key_refusal
        reason = found[2] if found is not None else "unknown"
        self.recorder.count(metrics.HANDOFFS_REFUSED, ("401", "UNAUTHORIZED"))
        self.recorder.count(metrics.HANDOFF_KEYS_REFUSED, (reason,))
        if found is None:
            return
        token, clinic, reason = found
        try:
            refusals.record_key(clinic, token.id, reason, self.clock())
        except Exception as exc:  # the database away: the answer stands, the counters have it
            log.warning("refused key not recorded (%s)", type(exc).__name__)
