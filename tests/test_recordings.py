"""Playable recordings (docs/integrators/switchboard.md), with real parts: the real RQ
worker (tests/support/worker.py) runs the re-fetch job against a fake platform API
served over real HTTPS from 127.0.0.1 (trustme CA; loopback allowed only through the
test-only setting).

The web side's clock is the settable test clock; the worker's is the wall clock, so the
play endpoint hands the job its time (`as_of`) and the fake platform answers absolute
expiries on the test clock.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
import webtest

from app import create_app
from config import Config, RetiredSetting
from models import AuditEvent, Call, PatientRequest
from plumbing.database import db
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY, bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.https_server import HTTPSTestServer, json_response, static
from tests.support.live_service import concurrently, serve, settings_of
from tests.support.recordings import (
    AUDIO,
    PASSWORD,
    SOURCE,
    USER,
    FakePlatform,
    detail_call,
    onboard,
    play,
    received_at,
    request_url,
    stored_call,
)
from tests.support.servers import wait_until
from tests.support.worker import MARKER_WORDS, processed_call
from voicemail import platform as platform_api

# --- the spec's pre-release check, end to end ----------------------------------------------


def test_pre_release_check_end_to_end(web, clock, platform, https_server, worker, worker_log):
    """A handed-off call with a recording yields a voice message request whose recording
    plays; after the original link expired play gets a fresh link through the platform
    API; after the platform deleted it play answers 410 and the transcript remains."""
    onboard(platform)
    https_server.route("/rec/CA-e2e.mp3", static((AUDIO / "msg_appointment.mp3").read_bytes(), "audio/mpeg"))
    original = https_server.url("/rec/CA-e2e.mp3") + "?signature=ORIGINAL-SECRET"
    writer, reader = issue_token(["clinic-rec"], ["write"]), issue_token(["clinic-rec"], ["read"])
    body = {
        "CallSid": "CA-e2e",
        "CallFrom": "+1 201 555 0198",
        "CallTo": "+12015550100",
        "Status": "completed",
        "HasRecording": True,
        "RecordingUrl": original,
        "RecordingSid": "CA-e2e.mp3",
        "Source": SOURCE,
    }
    assert web.post_json(switchboard_url("clinic-rec", "recording-complete"), body, headers=bearer(writer)).json == {
        "success": True
    }

    call = processed_call("CA-e2e")
    with db.connection_context():
        request = PatientRequest.get(PatientRequest.call == call.id)
    assert call.outcome == "voice_message" and request.kind == "voice_message"
    transcript = call.transcript
    assert "appointment" in transcript.lower()

    # Within the original link's lifetime: it plays as handed off.
    clock.set(received_at(request) + timedelta(minutes=5))
    shown = detail_call(web, request, reader)
    assert shown["callFrom"] == "+1 201 555 0198" and shown["callTo"] == "+12015550100"
    assert shown["status"] == "completed" and shown["transcript"] == transcript and shown["receivedAt"]
    assert shown["recording"]["state"] == "available" and shown["recording"]["url"] == original
    assert play(web, request, reader, 302).location == original
    assert platform.token_exchanges == 0

    # The original link expired (25 minutes): a fresh one through the platform API, served
    # once what it yields is checked to be the recording the hand-off delivered.
    platform.serve("CA-e2e.mp3", recording=(AUDIO / "msg_appointment.mp3").read_bytes())
    clock.set(received_at(request) + timedelta(minutes=26))
    answer = play(web, request, reader, 302)
    assert answer.location == platform.fresh_link("CA-e2e.mp3")
    assert platform.token_exchanges == 1 and platform.lookups("CA-e2e.mp3") == 1
    assert https_server.request_count("/files/CA-e2e.mp3") == 1  # checked once, then reused
    shown = detail_call(web, request, reader)
    assert shown["recording"]["state"] == "available" and shown["recording"]["url"] == platform.fresh_link("CA-e2e.mp3")
    assert play(web, request, reader, 302).location == platform.fresh_link("CA-e2e.mp3")
    assert platform.lookups("CA-e2e.mp3") == 1  # the fresh link is reused while it lives

    # The platform deleted the recording; once the fresh link expired too: 410.
    platform.serve("CA-e2e.mp3", "deleted", recording=(AUDIO / "msg_appointment.mp3").read_bytes())
    clock.set(received_at(request) + timedelta(minutes=26 + 31))
    gone = play(web, request, reader, 410).json
    assert gone["code"] == "RECORDING_UNAVAILABLE" and "transcript remains" in gone["error"]
    shown = detail_call(web, request, reader)
    assert shown["recording"]["state"] == "unavailable" and shown["recording"]["reason"] == "deleted"
    assert shown["transcript"] == transcript
    # Remembered: not asked again.
    assert play(web, request, reader, 410).json["code"] == "RECORDING_UNAVAILABLE"
    assert platform.lookups("CA-e2e.mp3") == 2 and platform.token_exchanges == 1

    # Secrets never reach the worker's log: password, token, links' signatures.
    log = worker_log.read_text()
    for secret in (PASSWORD, "FRESH-SECRET", "ORIGINAL-SECRET", *platform.tokens):
        assert secret not in log


# --- platform behaviours ---------------------------------------------------------------------


def test_token_expired_early_is_renewed_once(web, clock, platform, worker):
    onboard(platform)
    request = stored_call("CA-401", recording_sid="CA-401.mp3")
    platform.serve("CA-401.mp3")
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))
    platform.link_delay = 0
    assert play(web, request, reader, 302).location == platform.fresh_link("CA-401.mp3")
    assert platform.token_exchanges == 1

    # A second call: the cached token is reused, but the platform has expired it: 401 once.
    second = stored_call("CA-401b", recording_sid="CA-401b.mp3")
    platform.serve("CA-401b.mp3")
    platform.expire_next_token = True
    clock.set(received_at(second) + timedelta(minutes=26))
    assert play(web, second, reader, 302).location == platform.fresh_link("CA-401b.mp3")
    assert platform.token_exchanges == 2 and platform.lookups("CA-401b.mp3") == 2


def test_reference_falls_back_to_the_file_name_and_410_counts_as_deleted(web, clock, platform, worker):
    onboard(platform)
    request = stored_call(
        "CA-name", recording_sid=None, url="https://files.example.com/x/voicemail-77.wav?sig=ORIGINAL-SECRET"
    )
    platform.serve("voicemail-77.wav", "gone")
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))
    assert play(web, request, reader, 410).json["code"] == "RECORDING_UNAVAILABLE"
    assert platform.lookups("voicemail-77.wav") == 1


def test_server_error_answers_503_with_retry_after_then_the_retry_succeeds(app, rec_config, clock, platform, worker):
    # The job retries after 3 s; the play waits 1 s at most, so it answers 503 meanwhile.
    web = webtest.TestApp(
        create_app(Config(**{**rec_config.__dict__, "platform_retry_delays": "3", "platform_play_wait_seconds": 1.0}))
    )
    onboard(platform)
    request = stored_call("CA-5xx", recording_sid="CA-5xx.mp3")
    platform.serve("CA-5xx.mp3", "flaky")
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))
    busy = play(web, request, reader, 503)
    assert busy.json["code"] == "SERVICE_UNAVAILABLE" and 1 <= int(busy.headers["Retry-After"]) <= 6
    assert detail_call(web, request, reader)["recording"] == {"state": "fetching"}
    answers: list[int] = []

    def plays() -> bool:
        answer = play(web, request, reader)
        answers.append(answer.status_int)
        return answer.status_int == 302

    assert wait_until(plays, timeout=15, interval=0.3), answers
    assert set(answers) <= {302, 503}
    assert platform.lookups("CA-5xx.mp3") == 2 and platform.token_exchanges == 1


def test_without_credentials_an_expired_recording_is_unavailable(web, clock, platform, worker):
    onboard(None)
    request = stored_call("CA-nocreds", recording_sid="CA-nocreds.mp3")
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=5))
    assert play(web, request, reader, 302).location.endswith("ORIGINAL-SECRET")
    clock.set(received_at(request) + timedelta(minutes=26))
    assert play(web, request, reader, 410).json["code"] == "RECORDING_UNAVAILABLE"
    shown = detail_call(web, request, reader)
    # The Source names the deployment's platform family, but the clinic gave no credentials
    # for it: nothing is asked of any platform.
    assert shown["recording"]["state"] == "unavailable" and shown["recording"]["reason"] == "no_credentials"
    assert shown["transcript"] == "Please call me back about my test results."
    assert https_requests(platform) == 0


def test_source_without_a_marker_word_plays_the_original_link_until_it_expires(web, clock, platform, worker):
    onboard(platform)
    request = stored_call("CA-other", source="OtherVendor PBX", recording_sid="CA-other.mp3")
    platform.serve("CA-other.mp3")
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=24))
    assert play(web, request, reader, 302).location.endswith("ORIGINAL-SECRET")
    assert detail_call(web, request, reader)["recording"]["state"] == "available"
    clock.set(received_at(request) + timedelta(minutes=26))
    assert play(web, request, reader, 410).json["code"] == "RECORDING_UNAVAILABLE"
    assert detail_call(web, request, reader)["recording"]["reason"] == "expired"
    assert https_requests(platform) == 0


@pytest.mark.parametrize(
    "source, markers, refetched",
    [
        ("AcmeVox Cloud PBX 4.2", None, True),  # the deployment's PROVIDER_MARKER_WORDS alone
        ("FrogLine 7", ["frogline"], True),  # the clinic's own words add to them
        ("FrogLine 7", None, False),
        ("OtherVendor PBX", ["frogline"], False),
    ],
)
def test_marker_words_of_the_deployment_and_the_clinic_select_the_platform(
    web, clock, platform, worker, source, markers, refetched
):
    """A clinic's credentials re-fetch for calls whose Source holds a marker word of the
    platform family: the deployment's (PROVIDER_MARKER_WORDS, read again after an upgrade
    had stopped reading it) or the clinic's own `sourceMarkers`."""
    onboard(platform, **({"sourceMarkers": markers} if markers else {}))
    request = stored_call("CA-theirs", source=source, recording_sid="CA-theirs.mp3")
    platform.serve("CA-theirs.mp3")
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))
    if refetched:
        assert play(web, request, reader, 302).location == platform.fresh_link("CA-theirs.mp3")
        return
    assert play(web, request, reader, 410).json["code"] == "RECORDING_UNAVAILABLE"
    assert detail_call(web, request, reader)["recording"]["reason"] == "expired"
    assert https_requests(platform) == 0


def test_twenty_concurrent_plays_share_one_token_exchange_and_one_refetch(rec_config, app, clock, platform, worker):
    import requests as http

    onboard(platform)
    request = stored_call("CA-crowd", recording_sid="CA-crowd.mp3")
    platform.serve("CA-crowd.mp3")
    platform.link_delay = 0.3  # the platform is not instant: the plays overlap the re-fetch
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))
    with serve(**settings_of(rec_config, db_pool_size=24)) as base_url:
        url = f"{base_url}{request_url(request)}/recording"
        answers = concurrently(lambda: http.get(url, headers=bearer(reader), allow_redirects=False, timeout=30))
    assert [getattr(a, "status_code", a) for a in answers] == [302] * 20
    assert {a.headers["Location"] for a in answers} == {platform.fresh_link("CA-crowd.mp3")}
    assert platform.token_exchanges == 1 and platform.lookups("CA-crowd.mp3") == 1


def test_a_play_that_read_the_call_before_the_refetch_finished_does_not_start_another(app, rec_config, clock):
    """The race behind a second platform lookup: a play reads the call while its link is
    expired, the re-fetch job saves a fresh link and finishes, then the play asks for the
    job. The finished job is kept (the fresh link answers); no second re-fetch runs."""
    from rq import Queue
    from rq.job import JobStatus

    from jobs.refetch import ensure_refetch

    block = {"apiUrl": "https://platform.example.net/api", "username": USER, "password": PASSWORD}
    # (no platform is asked: no worker runs the jobs)
    load(organization(clinic("clinic-rec", tz="America/New_York", country="US", language="en", switchboard=block)))
    request = stored_call("CA-race")
    as_of = received_at(request) + timedelta(minutes=26)
    queue = Queue("test-refetch-race", connection=redis.Redis.from_url(REDIS_URL))  # no worker listens
    first = ensure_refetch(queue, request.call_id, as_of, rec_config)
    first.set_status(JobStatus.FINISHED)
    with db.connection_context():  # what the job did before it finished
        Call.update(
            recording_link="https://files.example.com/fresh.mp3", recording_link_expires_at=as_of + timedelta(hours=1)
        ).where(Call.id == request.call_id).execute()
        again = ensure_refetch(queue, request.call_id, as_of, rec_config)
    assert (again.get_status(refresh=True), again.enqueued_at) == (JobStatus.FINISHED, first.enqueued_at)
    with db.connection_context():  # still expired when read under the lock: a new fetch
        Call.update(recording_link_expires_at=as_of).where(Call.id == request.call_id).execute()
        third = ensure_refetch(queue, request.call_id, as_of, rec_config)
    assert third.get_status(refresh=True) == JobStatus.QUEUED
    queue.empty()


def test_platform_settings_are_read_under_their_former_pbx_names_too() -> None:
    """PLATFORM_* or, for a deployment that still sets them, PBX_* (with a warning at
    start); both set to different values: refused, naming both."""
    config = Config.from_env(
        {
            "PBX_RETRY_DELAYS": "1,1",
            "PLATFORM_FETCH_TIMEOUT": "9",
            "PBX_FETCH_TIMEOUT": "9",
            "PBX_PLAY_WAIT_SECONDS": "0.5",
        }
    )
    assert (config.platform_retry_intervals, config.platform_fetch_timeout, config.platform_play_wait_seconds) == (
        [1, 1],
        9.0,
        0.5,
    )
    assert sorted(config.notices) == [
        "PBX_PLAY_WAIT_SECONDS is the former name of PLATFORM_PLAY_WAIT_SECONDS: it is still read, but rename it "
        "to PLATFORM_PLAY_WAIT_SECONDS.",
        "PBX_RETRY_DELAYS is the former name of PLATFORM_RETRY_DELAYS: it is still read, but rename it to "
        "PLATFORM_RETRY_DELAYS.",
    ]
    with pytest.raises(RetiredSetting, match="PLATFORM_FETCH_TIMEOUT and its former name PBX_FETCH_TIMEOUT"):
        Config.from_env({"PLATFORM_FETCH_TIMEOUT": "3", "PBX_FETCH_TIMEOUT": "9"})
    assert Config.from_env({}).platform_token_path == "/auth/token"


def test_provider_marker_words_are_read_again() -> None:
    """The documented setting before marker words could be given per clinic: an upgrade that
    stopped reading it made every recording unavailable once its link expired."""
    assert Config.from_env({"PROVIDER_MARKER_WORDS": " AcmeVox, RingFrog ,"}).marker_words == ["acmevox", "ringfrog"]
    assert Config.from_env({}).marker_words == []


def test_a_retired_setting_stops_every_process_at_start(monkeypatch, tmp_path) -> None:
    """A variable the service no longer reads is never ignored silently: Config refuses it,
    and so the web process, the worker and manage.py do not start."""
    import config as config_module

    monkeypatch.setitem(config_module.RETIRED, "WHISPER_LANGUAGE", "the clinic's languages are set per clinic")
    with pytest.raises(RetiredSetting, match="WHISPER_LANGUAGE is no longer read: the clinic's languages"):
        Config.from_env({"WHISPER_LANGUAGE": "cs"})
    assert Config.from_env({}).notices == []
    # The real entry points, with a variable of the real list (none is retired today, so one is added
    # in a child process through the same dictionary).
    script = (
        "import sys, config; config.RETIRED['OLD_SETTING'] = 'use NEW_SETTING'; "
        "import manage; sys.exit(manage.main(['calls']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OLD_SETTING": "1", "DATABASE_URL": f"sqlite:///{tmp_path}/x.db"},
    )
    assert done.returncode == 2 and "OLD_SETTING is no longer read: use NEW_SETTING" in done.stderr, done.stderr


def test_the_release_step_names_clinics_whose_recordings_can_never_be_refetched(app, platform, tmp_path) -> None:
    """Platform credentials but no marker word from anywhere: the release step says so."""
    onboard(platform)
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "STORAGE_DIR": str(tmp_path / "storage"),
    }
    db.close()
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "clinic(s) clinic-rec have switchboard platform credentials but no marker words" in done.stderr
    named = subprocess.run(
        [sys.executable, "manage.py", "migrate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "PROVIDER_MARKER_WORDS": MARKER_WORDS},
    )
    assert named.returncode == 0 and "no marker words" not in named.stderr, named.stderr


# --- the recording is bound to its bytes, not to its name ---------------------------------------


def _handed_off(
    web: webtest.TestApp, https_server: HTTPSTestServer, sid: str, recording_sid: str, clip: str = "msg_appointment.mp3"
) -> PatientRequest:
    """A call handed off through the API and ingested by the real worker (its bytes hashed)."""
    https_server.route(f"/rec/{sid}.mp3", static((AUDIO / clip).read_bytes(), "audio/mpeg"))
    writer = issue_token(["clinic-rec"], ["write"])
    body = {
        "CallSid": sid,
        "CallFrom": "+1 201 555 0198",
        "CallTo": "+12015550100",
        "HasRecording": True,
        "RecordingUrl": https_server.url(f"/rec/{sid}.mp3") + "?signature=ORIGINAL-SECRET",
        "RecordingSid": recording_sid,
        "Source": SOURCE,
    }
    assert web.post_json(switchboard_url("clinic-rec", "recording-complete"), body, headers=bearer(writer)).json == {
        "success": True
    }
    call = processed_call(sid)
    assert call.recording_sha256 is not None
    with db.connection_context():
        return PatientRequest.get(PatientRequest.call == call.id)


def test_a_recording_sid_unrelated_to_the_url_plays_once_the_platform_yields_the_same_bytes(
    web, clock, platform, https_server, worker
):
    """Telnyx-style: RecordingSid is the platform's id, not the URL's file name. Accepted,
    and its re-fetched link is served because it yields the recording handed off."""
    onboard(platform)
    request = _handed_off(web, https_server, "CA-bound", "3f0c9a71-b2e4-4d06-8c55-1b2f7a9e01e1")
    platform.serve("3f0c9a71-b2e4-4d06-8c55-1b2f7a9e01e1", recording=(AUDIO / "msg_appointment.mp3").read_bytes())
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))
    assert play(web, request, reader, 302).location == platform.fresh_link("3f0c9a71-b2e4-4d06-8c55-1b2f7a9e01e1")
    scraped = web.get("/metrics").text
    assert re.search(r'clinic_recording_checks_total\{result="match"\} [1-9]', scraped), scraped


def test_a_steered_recording_sid_never_yields_another_recording(web, clock, platform, https_server, worker):
    """A write token names, as RecordingSid, another recording of the clinic's platform: the
    hand-off is accepted (200), but once the original link expires the play never sends a
    doctor to that other recording: it is "no longer available", the transcript stays, and
    the clinic's audit trail names the token whose hand-off did it."""
    onboard(platform)
    request = _handed_off(web, https_server, "CA-steer", "RE-someone-else.mp3")
    platform.serve("RE-someone-else.mp3", recording=(AUDIO / "msg_fever.mp3").read_bytes())  # another caller's
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))
    gone = play(web, request, reader, 410).json
    assert gone["code"] == "RECORDING_UNAVAILABLE" and "another recording" in gone["error"]
    shown = detail_call(web, request, reader)
    assert shown["recording"]["state"] == "unavailable" and shown["recording"]["reason"] == "mismatch"
    assert "appointment" in shown["transcript"].lower()
    assert play(web, request, reader, 410).json["code"] == "RECORDING_UNAVAILABLE"  # remembered
    assert platform.lookups("RE-someone-else.mp3") == 1
    with db.connection_context():
        [event] = list(AuditEvent.select().where(AuditEvent.action == "call.recording_mismatch"))
        assert (event.target_type, event.target_id, event.actor_kind) == ("call", str(request.call_id), "token")
        assert json.loads(event.details)["receivedBytes"] == len((AUDIO / "msg_fever.mp3").read_bytes())
    scraped = web.get("/metrics").text
    assert re.search(r'clinic_recording_checks_total\{result="mismatch"\} [1-9]', scraped), scraped


@pytest.mark.parametrize("recording_sid, asked", [("CA-nohash.mp3", True), ("RE-other", False), (None, True)])
def test_a_recording_never_downloaded_is_refetched_only_by_its_own_file_name(
    web, clock, platform, worker, recording_sid, asked
):
    """No hash to check against (the original link died before the ingest downloaded it):
    the platform is asked only when RecordingSid names the URL's own file (or is absent);
    otherwise the recording is unavailable, `unverifiable`, and nobody is asked."""
    onboard(platform)
    request = stored_call("CA-nohash", recording_sid=recording_sid)  # outcome as stored, no hash
    reference = recording_sid or "CA-nohash.mp3"
    platform.serve(reference)
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))
    if asked:
        assert play(web, request, reader, 302).location == platform.fresh_link(reference)
        return
    assert play(web, request, reader, 410).json["code"] == "RECORDING_UNAVAILABLE"
    assert detail_call(web, request, reader)["recording"]["reason"] == "unverifiable"
    assert https_requests(platform) == 0


# --- the endpoint's edges ----------------------------------------------------------------------


def test_play_needs_a_request_made_from_a_call_and_the_read_scope(web, clock):
    onboard(None)
    request = stored_call("CA-scope")
    writer = issue_token(["clinic-rec"], ["write"])
    assert play(web, request, writer, 403).json["code"] == "FORBIDDEN"
    reader = issue_token(["clinic-rec"], ["read"])
    assert (
        web.get(
            request_url(request).replace(str(request.id), str(uuid.uuid4())) + "/recording",
            headers=bearer(reader),
            status=404,
        ).json["code"]
        == "PATIENT_REQUEST_NOT_FOUND"
    )
    with db.connection_context():
        PatientRequest.update(call=None).where(PatientRequest.id == request.id).execute()
    assert play(web, request, reader, 404).json["code"] == "NOT_FOUND"
    assert "call" not in web.get(request_url(request), headers=bearer(reader)).json["data"]


def https_requests(platform: FakePlatform) -> int:
    return platform.server.request_count()


# ------------------------------------------- the platform's answers are input too


NOW = datetime(2026, 11, 23, 12, 0)


def _public(host: str, port: int) -> list[str]:
    return ["93.184.215.14"]


@pytest.mark.parametrize(
    "answer",
    [
        b'{"url": "https://cdn.example.com/r.mp3", "expiresIn": Infinity}',
        b'{"url": "https://cdn.example.com/r.mp3", "expiresIn": NaN}',
        b'{"url": "https://cdn.example.com/r.mp3"' + b', "x": [' * 5000 + b"]" * 5000 + b"}",
        b'\xff\xfe{"url": "https://cdn.example.com/r.mp3"}',
    ],
)
def test_platform_json_is_parsed_strictly(answer: bytes) -> None:
    with pytest.raises(platform_api.PlatformError, match="did not answer a JSON object"):
        platform_api._json(answer, "https://pbx.example.com/api/recordings/1/url")


@pytest.mark.parametrize(
    "data,lifetime",
    [
        ({"expiresIn": 1e20}, timedelta(days=7)),  # bounded: it crashed the re-fetch job (OverflowError)
        ({"expires_in": 10**30}, timedelta(days=7)),
        ({"expiresAt": "9999-12-31T23:59:59Z"}, timedelta(days=7)),
        ({"expiresIn": -50}, timedelta(0)),
        ({"expiresIn": True}, timedelta(minutes=Config().recording_url_lifetime_minutes)),  # not a number: default
        ({"expiresIn": 900}, timedelta(seconds=900)),
    ],
)
def test_fresh_link_expiry_is_bounded(data: dict[str, Any], lifetime: timedelta) -> None:
    link = platform_api._link_from(
        {"url": "https://cdn.example.com/r.mp3", **data}, "https://pbx.example.com/api", NOW, Config(), resolver=_public
    )
    assert (link.url, link.expires_at) == ("https://cdn.example.com/r.mp3", NOW + lifetime)


@pytest.mark.parametrize("addresses", [["10.1.2.3"], ["93.184.215.14", "192.168.0.1"], ["::1"], ["169.254.169.254"]])
def test_a_fresh_link_to_a_host_resolving_to_a_private_address_is_refused(addresses: list[str]) -> None:
    """The link goes to a doctor's browser as a 302: the same resolution check as RecordingUrl."""
    with pytest.raises(platform_api.PlatformError, match="unusable link"):
        platform_api._link_from(
            {"url": "https://rebind.example.com/r.mp3", "expiresIn": 600},
            "https://pbx.example.com/api",
            NOW,
            Config(),
            resolver=lambda host, port: addresses,
        )


def test_a_huge_token_lifetime_is_cached_a_day_at_most(rec_config: Config, https_server: HTTPSTestServer) -> None:
    https_server.route(
        "/huge/auth/token", lambda req: json_response({"access_token": "tok", "expires_in": 1e20}), methods=("POST",)
    )
    connection = redis.Redis.from_url(REDIS_URL)
    creds = platform_api.Credentials(f"huge-{uuid.uuid4().hex[:6]}", https_server.url("/huge"), USER, PASSWORD)
    client = platform_api.PlatformClient(rec_config, connection)
    assert client.token(creds) == "tok"
    assert 0 < connection.ttl(creds.cache_key) <= 86400
    connection.delete(creds.cache_key)
