"""The switchboard's routing checks: POST .../switchboard/{is-clinic-opened,...}."""
from __future__ import annotations

import time
import uuid
from typing import Callable
from urllib.parse import urlsplit

import falcon

from web import schemas, validation
from config import Config
from web.errors import APIError, validation_failed
from switchboard.intake import GroupCommit
from plumbing.row_cache import RowCache
from models import CallSidConflict, PatientRequest
from safe_fetch import FetchError, ResolutionCache, UnsafeURL, validate_url
from plumbing.phones import to_e164
from switchboard.schedules import is_clinic_open, schedule_of
from switchboard.vacations import on_vacation
from voicemail.platform import names_its_recording


class IsClinicOpened:
    scopes = {"POST": "read"}

    def __init__(self, clock: Callable, cache: RowCache | None = None) -> None:
        self.clock = clock
        self.cache = cache

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        validation.body(req, schemas.EMPTY_REQUEST, optional=True)
        resp.media = {"isOpen": is_clinic_open(req.context.clinic, self.cache, self.clock())}


class IsOnVacation:
    scopes = {"POST": "read"}

    def __init__(self, clock: Callable, cache: RowCache | None = None) -> None:
        self.clock = clock
        self.cache = cache

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        data = validation.body(req, schemas.VACATION_REQUEST, optional=True)
        clinic = req.context.clinic
        schedule = schedule_of(clinic, self.cache)
        wanted = None
        if "calendarIds" in data:
            wanted = frozenset(uuid.UUID(i) for i in data["calendarIds"])
            foreign = wanted - {c.id for c in schedule.calendars}
            if foreign:
                raise validation_failed(
                    f"calendarIds: not calendars of this clinic: {', '.join(sorted(map(str, foreign)))}"
                )
        resp.media = {"isOnVacation": on_vacation(clinic, schedule, wanted, self.clock())}


class HasActiveRequest:
    scopes = {"POST": "read"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        data = validation.body(req, schemas.ACTIVE_REQUEST_REQUEST)
        clinic = req.context.clinic
        if not data.get("callFrom") and not data.get("patientId"):
            raise validation_failed("body: callFrom or patientId is required")
        phone = None
        if data.get("callFrom"):
            phone = to_e164(data["callFrom"], clinic.country)
            if phone is None:
                raise validation_failed("callFrom: not a phone number")
        patient_id = uuid.UUID(data["patientId"]) if data.get("patientId") else None
        resp.media = {"hasActiveRequest": PatientRequest.open_for_caller(clinic, phone, patient_id)}


class RecordingComplete:
    """Call hand-off: store the call (idempotent per CallSid) and answer at once.

    Concurrent hand-offs share one commit (`intake.GroupCommit`); each is answered once
    its own row is stored.

    The committed call row is the queue's outbox: the worker's relay (jobs/relay.py)
    hands it to RQ. So this answer never waits on Redis, and a call is never lost
    between the commit and an enqueue that failed.
    """

    scopes = {"POST": "write"}
    rate_limit = "handoffs"  # its own budget per token, apart from document writes (web/rate_limit.py)

    def __init__(self, config: Config, calls: GroupCommit) -> None:
        self.config = config
        self.calls = calls

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        data = validation.body(req, schemas.RECORDING_COMPLETE)
        if data.get("RecordingUrl"):
            check_recording_url(data["RecordingUrl"], allow_loopback=self.config.unsafe_allow_loopback_fetch)
            if data.get("RecordingSid") and not names_its_recording(data["RecordingSid"], data["RecordingUrl"]):
                raise validation_failed("RecordingSid: must be the file name of RecordingUrl (with or without "
                                        "its extension)")
        fields = {column: data.get(name) for name, column in _CALL_FIELDS.items()}
        try:
            self.calls.receive(req.context.clinic, fields, req.context.token)
        except CallSidConflict:
            raise APIError(409, "CALL_SID_CONFLICT", "This CallSid is already used by another clinic.") from None
        resp.media = {"success": True}


_CALL_FIELDS = {
    "CallSid": "call_sid", "CallFrom": "call_from", "CallTo": "call_to", "Status": "status",
    "HasRecording": "has_recording", "RecordingUrl": "recording_url", "RecordingSid": "recording_sid",
    "Source": "source", "Extra": "extra",
}


_resolutions = ResolutionCache(ttl=60)


def check_recording_url(url: str, *, allow_loopback: bool) -> None:
    """400 unless https to a public host name (no IP literal, no internal name) that does
    not resolve to a non-public address. A name that does not resolve right now is
    accepted: the ingest job resolves again, retries, and records why it failed."""
    try:
        host = urlsplit(validate_url(url, allow_loopback=allow_loopback)).hostname or ""
        _resolutions.check(host, allow_loopback=allow_loopback, deadline=time.monotonic() + 2)
    except UnsafeURL as exc:
        raise validation_failed(f"RecordingUrl: {exc}") from None
    except FetchError:
        pass
