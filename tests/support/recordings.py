"""pytest plugin: the switchboard platform the recordings' tests talk to (`FakePlatform`
over the HTTPS test server: its token exchange and fresh links), the app configured for it,
and stored calls of a clinic that re-fetches through it."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
import webtest

from app import create_app
from config import Config
from models import Call, Clinic, Patient, PatientRecord, PatientRequest
from plumbing.database import db
from tests.conftest import REDIS_URL, ROOT
from tests.support import bearer, clinic, load, organization
from tests.support.clocks import Clock
from tests.support.https_server import (
    FailThenSucceed,
    HTTPSTestServer,
    TestRequest,
    TestResponse,
    json_response,
    static,
)
from tests.support.worker import MARKER_WORDS

USER, PASSWORD = "clinic-api", "pbx-pa55word"


AUDIO = ROOT / "tests" / "audio"


SOURCE = "AcmeVox Cloud PBX 4.2"  # contains a marker word of the tests ("acmevox")


class FakePlatform:
    """The platform's API: token exchange and fresh recording links, on the
    default paths (`/auth/token`, `/recordings/{recording}/url`) under `/api`."""

    def __init__(self, server: HTTPSTestServer, clock: Clock) -> None:
        self.server, self.clock = server, clock
        self.tokens: set[str] = set()
        self.expire_next_token = False
        self.link_delay = 0.0
        self._lock = threading.Lock()
        server.route("/api/auth/token", self._token, methods=("POST",))

    @property
    def base_url(self) -> str:
        return self.server.url("/api")

    @property
    def token_exchanges(self) -> int:
        return self.server.request_count("/api/auth/token")

    def path(self, ref: str) -> str:
        return f"/api/recordings/{ref}/url"

    def lookups(self, ref: str) -> int:
        return self.server.request_count(self.path(ref))

    def fresh_link(self, ref: str) -> str:
        return self.server.url(f"/files/{ref}") + "?signature=FRESH-SECRET"

    def serve(self, ref: str, mode: str = "ok", recording: bytes = b"") -> None:
        """`ok`, `deleted` (404), `gone` (410) or `flaky` (503 once, then ok); the fresh
        link yields `recording` (the bytes the service checks a re-fetched link by)."""
        ok = self._link(ref)
        self.server.route(f"/files/{ref}", static(recording or (AUDIO / "msg_cancel.mp3").read_bytes(), "audio/mpeg"))
        handler = {
            "ok": ok,
            "deleted": static(b'{"error":"not found"}', "application/json", status=404),
            "gone": static(b"", "application/json", status=410),
            "flaky": FailThenSucceed(1, ok, failure=static(b"busy", "text/plain", status=503)),
        }[mode]
        self.server.route(self.path(ref), self._authorized(handler), methods=("GET",))

    def _token(self, req: TestRequest) -> TestResponse:
        if req.json() != {"username": USER, "password": PASSWORD}:
            return json_response({"error": "bad credentials"}, status=401)
        token = secrets.token_urlsafe(12)
        with self._lock:
            self.tokens.add(token)
        return json_response({"access_token": token, "token_type": "Bearer", "expires_in": 3600})

    def _authorized(self, handler):
        def check(req: TestRequest) -> TestResponse:
            token = req.headers.get("authorization", "").removeprefix("Bearer ")
            with self._lock:
                valid = token in self.tokens
                if valid and self.expire_next_token:  # the platform let this token expire early
                    self.expire_next_token, valid = False, False
                    self.tokens.discard(token)
            if not valid:
                return json_response({"error": "token expired"}, status=401)
            return handler(req)

        return check

    def _link(self, ref: str):
        def handler(req: TestRequest) -> TestResponse:
            expires = self.clock() + timedelta(minutes=30)
            return TestResponse(
                status=200,
                headers={"Content-Type": "application/json"},
                body=json_response({"url": self.fresh_link(ref), "expiresAt": expires.isoformat()}).body,
                delay_before_headers=self.link_delay,
            )

        return handler


@pytest.fixture
def platform(https_server: HTTPSTestServer, clock: Clock) -> Iterator[FakePlatform]:
    tokens = redis.Redis.from_url(REDIS_URL)
    for key in tokens.scan_iter("platform-token:*"):  # a cached token of an earlier test's platform
        tokens.delete(key)
    yield FakePlatform(https_server, clock)


@pytest.fixture(scope="module")
def rec_config(handoff_config: Config) -> Config:
    """The hand-off settings with a platform to re-fetch from: short retries and waits."""
    return replace(
        handoff_config,
        platform_retry_delays="1,1",
        platform_play_wait_seconds=8,
        platform_fetch_timeout=5,
        provider_marker_words=MARKER_WORDS,
    )


@pytest.fixture
def web(app, rec_config) -> webtest.TestApp:
    return webtest.TestApp(create_app(rec_config))


def onboard(platform: FakePlatform | None, slug: str = "clinic-rec", **switchboard: Any) -> None:
    """The clinic with its platform credentials (no marker words of its own: the
    deployment's PROVIDER_MARKER_WORDS name the platform family, as before they could be
    given per clinic)."""
    extra: dict[str, Any] = {}
    if platform is not None:
        extra["switchboard"] = {"apiUrl": platform.base_url, "username": USER, "password": PASSWORD, **switchboard}
    load(organization(clinic(slug, tz="America/New_York", country="US", language="en", **extra)))


def stored_call(
    sid: str,
    *,
    source: str | None = SOURCE,
    recording_sid: str | None = None,
    url: str = "https://files.example.com/rec/{sid}.mp3?signature=ORIGINAL-SECRET",
    slug: str = "clinic-rec",
) -> PatientRequest:
    """A call the ingest job has turned into a voice message request (the ingest itself
    is exercised end to end in the first test and in test_call_handoff.py)."""
    with db.connection_context():
        home = Clinic.by_slug(slug)
        call = Call.create(
            clinic=home,
            call_sid=sid,
            call_from="+12015550198",
            call_to="+12015550100",
            status="completed",
            has_recording=True,
            recording_url=url.format(sid=sid),
            recording_sid=recording_sid,
            source=source,
            state="done",
            outcome="voice_message",
            transcript="Please call me back about my test results.",
            transcript_language="en",
        )
        patient = Patient.create(organization=home.organization_id, phone="+12015550198")
        PatientRecord.create(patient=patient, clinic=home)
        return PatientRequest.create(
            clinic=home, patient=patient, kind="voice_message", title="Voice message", call=call.id
        )


def received_at(request: PatientRequest) -> datetime:
    with db.connection_context():
        return Call.get_by_id(request.call_id).received_at.replace(tzinfo=UTC)


def request_url(request: PatientRequest, slug: str = "clinic-rec") -> str:
    return f"/external/v1/clinics/{slug}/patientRequests/{request.id}"


def play(web: webtest.TestApp, request: PatientRequest, token: str, status: int | str = "*"):
    return web.get(request_url(request) + "/recording", headers=bearer(token), status=status)


def detail_call(web: webtest.TestApp, request: PatientRequest, token: str) -> dict[str, Any]:
    return web.get(request_url(request), headers=bearer(token), status=200).json["data"]["call"]
