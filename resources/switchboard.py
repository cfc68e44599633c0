"""The switchboard's routing checks: POST .../switchboard/{is-clinic-opened,...}."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any
from urllib.parse import parse_qsl

import falcon

from config import Config
from models import PatientRequest
from plumbing import metrics, strict_json
from plumbing.clock import Clock
from plumbing.errors import Invalid
from plumbing.phones import to_e164
from plumbing.row_cache import RowCache
from switchboard.handoff import parse as parse_handoff
from switchboard.intake import GroupCommit
from switchboard.schedules import is_clinic_open, schedule_of
from switchboard.vacations import on_vacation
from web import schemas, validation


class IsClinicOpened:
    scopes = {"POST": "read"}
    answer_within = True  # its database uses end within ROUTING_DEADLINE_SECONDS (web.middleware.AnswerBy)

    def __init__(self, clock: Clock, cache: RowCache | None = None) -> None:
        self.clock = clock
        self.cache = cache

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        validation.body(req, schemas.EMPTY_REQUEST, optional=True)
        resp.media = {"isOpen": is_clinic_open(req.context.clinic, self.cache, self.clock())}


class IsOnVacation:
    """Calendar ids that are not calendars of this clinic (deleted since the switchboard's
    flow was set up, or another clinic's) count as calendars without vacations: the check
    answers rather than failing on every call until someone edits the flow. A value that
    is not a UUID at all is still 400."""

    scopes = {"POST": "read"}
    answer_within = True

    def __init__(self, clock: Clock, cache: RowCache | None = None) -> None:
        self.clock = clock
        self.cache = cache

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        data = validation.body(req, schemas.VACATION_REQUEST, optional=True)
        clinic = req.context.clinic
        wanted = frozenset(uuid.UUID(i) for i in data["calendarIds"]) if "calendarIds" in data else None
        resp.media = {"isOnVacation": on_vacation(clinic, schedule_of(clinic, self.cache), wanted, self.clock())}


class HasActiveRequest:
    """A `callFrom` that cannot be a phone number (withheld, `anonymous`, empty) matches no
    patient: the answer is by `patientId` when that is given too, else false. Neither field
    sent is 400 (docs/design.md).

    The answer comes from the clinic's open requests by caller (`OpenCallers`), held in
    memory while no request or patient changed (`open_requests`, a row cache on its own
    channel: each change announced by NOTIFY and counted, plumbing/row_cache.py), read again
    after a change. Never from a last known state: a read past the cache's deadline, or
    while the database is unreachable, is 503 (`Retry-After`). A clinic with more open
    callers than `OPEN_CALLERS_KEPT` is asked about the one caller each time."""

    scopes = {"POST": "read"}
    answer_within = True

    def __init__(self, cache: RowCache | None = None, open_requests: RowCache | None = None) -> None:
        self.cache = cache
        self.open_requests = open_requests

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        data = validation.body(req, schemas.ACTIVE_REQUEST_REQUEST)
        clinic = req.context.clinic
        phone = caller_phone(data.get("callFrom"), clinic.country)
        patient_id = uuid.UUID(data["patientId"]) if data.get("patientId") else None
        found = phone is not None or patient_id is not None
        if not found:
            resp.media = {"hasActiveRequest": False}
            return

        cache, open_requests = self.cache, self.open_requests
        if cache is None:
            resp.media = {"hasActiveRequest": PatientRequest.open_for_caller(clinic, phone, patient_id)}
            return
        deadline = cache.deadline  # the server ends the query then too: no backend left waiting on a lock
        if open_requests is not None and open_requests.enabled:
            callers = open_requests.current(
                clinic.id, lambda: PatientRequest.open_callers(clinic, keep=OPEN_CALLERS_KEPT, timeout=deadline)
            )
            if callers is not None:
                resp.media = {"hasActiveRequest": callers.has(phone, patient_id)}
                return

        def ask() -> bool:
            return PatientRequest.open_for_caller(clinic, phone, patient_id, timeout=deadline)

        resp.media = {"hasActiveRequest": cache.guarded(ask)}


#: The most open callers (patients with an open request, and those merged into them) of a
#: clinic that `has-active-request` holds in memory: a set of this size is read again after
#: each change in a few milliseconds and holds about a megabyte; a clinic with more is asked
#: about the one caller each time.
OPEN_CALLERS_KEPT = 10_000


def caller_phone(value: Any, country: str) -> str | None:
    """E.164 of a routing check's `callFrom` (a string, or a number a flow sent as one), or
    None when it is not a phone number. Past 64 characters nothing is one (and the parse's
    cache must not hold huge keys)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = f"{value:.0f}" if math.isfinite(value) else ""
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        return None
    return to_e164(value, country)


class RecordingComplete:
    """Call hand-off: store the call (idempotent per CallSid) and answer at once.

    Refused (400) only for what `switchboard.handoff` must refuse; everything else is
    stored, its oddities recorded on the call. The body is read as JSON whatever its
    Content-Type says (low-code flows send JSON as text/plain, or with none), or as a form
    when it is one (`application/x-www-form-urlencoded`, as some platforms post webhooks).

    Concurrent hand-offs share one commit (`intake.GroupCommit`); each is answered once
    its own row is stored. The committed call row is the queue's outbox: the worker's relay
    (jobs/relay.py) hands it to RQ. So this answer never waits on Redis, and a call is never
    lost between the commit and an enqueue that failed.
    """

    scopes = {"POST": "write"}
    rate_limit = "handoffs"  # its own budget per token, apart from document writes (web/rate_limit.py)
    records_refusals = True  # its 4xx answers are recorded (web.handoff_refusals.HandoffRefusals)

    def __init__(self, config: Config, calls: GroupCommit, recorder: metrics.Recorder) -> None:
        self.config = config
        self.calls = calls
        self.recorder = recorder  # the hand-offs' anomalies, counted

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        clinic = req.context.clinic
        body = _handoff_body(req)
        if isinstance(body, dict) and isinstance(body.get("CallSid"), (str, int)):
            req.context.call_sid = str(body["CallSid"])  # for the record of a refusal
        handoff = parse_handoff(body, clinic.country, allow_loopback=self.config.unsafe_allow_loopback_fetch)
        for anomaly in handoff.anomalies:
            self.recorder.count(metrics.HANDOFF_ANOMALIES, (anomaly,))
        fields = {**handoff.columns, "anomalies": json.dumps(handoff.anomalies) if handoff.anomalies else None}
        self.calls.receive(
            clinic, fields, req.context.token, self.config.clock()
        )  # CallSidConflict: 409 (web/errors.py)
        resp.media = {"success": True}


def _handoff_body(req: falcon.Request) -> Any:
    """The hand-off's fields: the JSON document, whatever the Content-Type says (curl -d
    labels JSON a form); a form's (the last value of each name) when it is not JSON and is
    labelled a form."""
    raw = req.bounded_stream.read()
    text = raw.decode("utf-8-sig", "replace").strip()
    if not text:
        raise Invalid("body: a JSON object is required")
    form = (req.content_type or "").split(";")[0].strip().lower() == "application/x-www-form-urlencoded"
    if form and text[0] not in "{[":
        return dict(parse_qsl(text, keep_blank_values=True))
    try:
        return strict_json.loads(raw.decode("utf-8-sig"))
    except ValueError:  # UnicodeDecodeError included
        raise Invalid("body: not a JSON document") from None
