"""No secret and no patient data in the service's logs, end to end: the web process as the
Procfile runs it (gunicorn, `web.log`) and a worker (`manage.py worker`, `worker.log`), both
at LOG_LEVEL=DEBUG on a database and a Redis of their own, driven through every flow that
carries secrets or personal data, each seeded with distinctive values:

- a hand-off from a caller with a Czech number and a recording (its URL with a secret in the
  path and one in the query) whose spoken words are known; the worker transcribes it;
- the recording's re-fetch from the platform: its fresh link has a secret in its path;
- console logins, failed and successful;
- a set-password link: a POST the CSRF check refuses (it never reaches routing), the link's
  page, the password set through it;
- two-factor enrolment and a login with a code;
- API keys created, rotated and revoked in the console;
- documents: a patient imported, a request created with a note, an upload link, the upload,
  the registration, the detail and the download.

Each test fails on any of its seeded secrets in either file (at any level) and on any of its
seeded personal data, or any phone number or e-mail address, in a line at INFO or above
(tests/support/log_audit.py reads the levels); the values also join the session's log
audit. One start of the service for the module.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg2
import pyotp
import pytest
import requests
import webtest

from plumbing.logs import short_hash
from staff.passwords import hash_password
from tests.conftest import PG_URL, ROOT
from tests.support import bearer, clinic, log_audit, organization, switchboard_url
from tests.support.api_key_pages import PAGE as KEYS
from tests.support.api_key_pages import create as create_key
from tests.support.api_key_pages import secret_of
from tests.support.databases import recreate_database
from tests.support.faults import RedisServer
from tests.support.gunicorn import serving, start_gunicorn
from tests.support.https_server import HTTPSTestServer, static
from tests.support.live_service import api, over_http, type_id
from tests.support.ports import free_port
from tests.support.processes import manage, start_worker, stop_process
from tests.support.recordings import PASSWORD as PLATFORM_PASSWORD
from tests.support.recordings import SOURCE, FakePlatform
from tests.support.recordings import USER as PLATFORM_USER
from tests.support.servers import wait_until
from tests.support.staff_accounts import add_user, code_login, enrol, log_in, set_password
from tests.support.tiers import needs
from tests.support.worker import MODEL_EN, worker_env

LOGS_DATABASE = PG_URL + "_logs"
AUDIO = ROOT / "tests" / "audio"
SLUG = "clinic-a"  # the console helpers' clinic
PRAGUE = ZoneInfo("Europe/Prague")

# The people, with values no other line of the suite carries.
PATIENT = {
    "key": "kvetoslava",
    "firstName": "Květoslava",
    "lastName": "Hrubá-Zelenková",
    "phone": "+420 731 555 218",
    "email": "kvetoslava.hruba@posta-pacientu.cz",
    "records": [{"clinic": SLUG, "note": "Alergie na penicilin, volat až po 16. hodině."}],
}
IMPORTED = {
    "externalId": "SIGN-7731",
    "firstName": "Zbyněk",
    "lastName": "Přibyl-Koudelka",
    "phone": "604 118 902",
    "email": "zbynek.pribyl@posta-pacientu.cz",
}
REQUEST_NOTE = "Pacientka podepsala informovaný souhlas s kolonoskopií."
ADMIN = {
    "email": "radomira.stastna@poliklinika-zahorie.cz",
    "name": "Radomíra Šťastná-Nováčková",
    "password": "modrý kůň skáče přes plot",
}
STAFF_USER = {
    "email": "bohumil.vesely@poliklinika-zahorie.cz",
    "name": "Bohumil Veselý-Krátký",
    "password": "zelená žába hraje na buben",
}
PDF = b"%PDF-1.4\n%seeded\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"


@dataclass
class Live:
    base_url: str
    env: dict[str, str]
    web_log: Path
    worker_log: Path
    https: HTTPSTestServer
    platform: FakePlatform
    token: str  # read and write
    secrets: dict[str, str] = field(default_factory=dict)
    personal: dict[str, str] = field(default_factory=dict)

    def secret(self, value: str, what: str) -> str:
        """A seeded secret: never in either log, at any level (nor in any other log of the session)."""
        self.secrets[value] = what
        log_audit.remember(value, what)
        return value

    def person(self, value: str, what: str) -> str:
        """A seeded personal value: never in a line at INFO or above."""
        self.personal[value] = what
        log_audit.remember_personal(value, what)
        return value

    def console(self) -> webtest.TestApp:
        """A browser of its own (cookies) on the live web process."""
        return webtest.TestApp(over_http(self.base_url))

    def api(self, method: str, path: str, token: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.base_url + api(SLUG) + path, headers=bearer(token), timeout=60, **kwargs)

    def findings(self) -> list[log_audit.Finding]:
        """This module's seeded values, and phone numbers and e-mail addresses, in either log."""
        audit = log_audit.Audit()
        for path in (self.web_log, self.worker_log):
            audit.watch(path)
        for value, what in self.secrets.items():
            audit.remember(value, what)
        for value, what in self.personal.items():
            audit.remember_personal(value, what)
        return audit.findings()

    def lines(self, path: Path) -> list[dict]:
        return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def assert_no_leaks(live: Live) -> None:
    found = live.findings()
    assert not found, "\n".join(f"{f.kind} in {f.source}: {f.excerpt}" for f in found)


class PlatformWithPathSecrets(FakePlatform):
    """The platform's fresh links carry their secret in the path (a tokenized download
    link), and a signature in the query."""

    def __init__(self, server: HTTPSTestServer, clock: Any) -> None:
        super().__init__(server, clock)
        self.path_secret = "fresh-" + secrets.token_hex(12)

    def fresh_link(self, ref: str) -> str:
        return self.server.url(f"/fresh/{self.path_secret}/{ref}") + "?sig=" + self.path_secret[::-1]

    def serve(self, ref: str, mode: str = "ok", recording: bytes = b"") -> None:
        super().serve(ref, mode, recording)
        self.server.route(f"/fresh/{self.path_secret}/{ref}", static(recording, "audio/mpeg"))


def wall_clock() -> datetime:
    """The live processes' clock (a subprocess keeps the wall clock, not the test clock)."""
    return datetime.now(UTC)


@pytest.fixture(scope="module")
@needs("gunicorn", "rq_worker", "engine")
def live(tmp_path_factory: pytest.TempPathFactory, https_ca, ca_bundle) -> Iterator[Live]:
    """Migrated and onboarded through `manage.py` (the seeded patient, the clinic's platform
    credentials, an administrator, an API key), then gunicorn and a worker on a database and
    a Redis of their own, and an HTTPS server for the recordings and the platform."""
    workdir = tmp_path_factory.mktemp("log-privacy")
    recreate_database(LOGS_DATABASE)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with RedisServer(workdir) as redis_server, HTTPSTestServer(ca=https_ca) as https:
        platform = PlatformWithPathSecrets(https, wall_clock)
        env = worker_env(
            ca_bundle,
            DATABASE_URL=LOGS_DATABASE,
            REDIS_URL=redis_server.url,
            PUBLIC_BASE_URL=base_url,
            STORAGE_DIR=str(workdir / "storage"),
            # The hand-off's link is expired at once: a play re-fetches it from the platform.
            RECORDING_URL_LIFETIME_MINUTES="1",
            PLATFORM_PLAY_WAIT_SECONDS="30",
            # The clinic speaks English: one model to load, the small English one.
            WHISPER_MODEL=str(MODEL_EN),
        )
        manage(env, "migrate")
        admin = {
            "email": ADMIN["email"],
            "name": ADMIN["name"],
            "passwordHash": hash_password(ADMIN["password"]),
            "clinics": [{"clinic": SLUG, "role": "admin"}],
        }
        document = organization(
            clinic(
                SLUG,
                language="en",
                requestTypes=[{"ecrfId": "SIGNED_CONSENT", "name": "Signed consent", "requiresReservation": False}],
                switchboard={"apiUrl": platform.base_url, "username": PLATFORM_USER, "password": PLATFORM_PASSWORD},
            ),
            patients=[PATIENT],
        )
        (workdir / "onboarding.json").write_text(json.dumps({**document, "users": [admin]}, ensure_ascii=False))
        manage(env, "onboard", str(workdir / "onboarding.json"))
        token = manage(
            env,
            "token",
            "create",
            "--name",
            "seeded",
            "--clinic",
            SLUG,
            "--scope",
            "read",
            "--scope",
            "write",
            "--expires-in-days",
            "1",
        )
        web_log, worker_log = workdir / "web.log", workdir / "worker.log"
        live = Live(base_url, env, web_log, worker_log, https, platform, token)
        live.secret(token, "an API token")
        live.secret(token.split("_", 2)[2], "an API token's secret")
        live.secret(PLATFORM_PASSWORD, "the platform password")
        live.secret(ADMIN["password"], "a staff password")
        for value, what in (
            (f"{PATIENT['firstName']} {PATIENT['lastName']}", "a patient's name"),
            (PATIENT["lastName"], "a patient's surname"),
            (PATIENT["phone"], "a patient's phone"),
            (PATIENT["email"], "a patient's e-mail"),
            (PATIENT["records"][0]["note"], "a note"),
            (ADMIN["name"], "a staff user's name"),
            (ADMIN["email"], "a staff user's e-mail"),
        ):
            live.person(value, what)
        # The worker loads its model while gunicorn starts; both stop at once at the end.
        with ThreadPoolExecutor(1) as starting:
            worker_started = starting.submit(start_worker, env, worker_log)
            try:
                web = start_gunicorn(
                    port, "--workers", "1", env=env, log=web_log, ready=lambda _: serving(base_url), timeout=120
                )
            except BaseException:
                stop_process(worker_started.result(), 30)
                raise
            try:
                worker = worker_started.result()
            except BaseException:
                stop_process(web, 30)
                raise
        try:
            yield live
        finally:
            for process in (web, worker):
                process.terminate()
            for process in (web, worker):
                stop_process(process, 30)


def call_state(sid: str) -> str | None:
    with psycopg2.connect(LOGS_DATABASE) as connection, connection.cursor() as cursor:
        cursor.execute('SELECT "state" FROM "call" WHERE "call_sid" = %s', (sid,))
        row = cursor.fetchone()
    return row[0] if row else None


def test_a_handoff_its_transcript_and_its_recording_refetched_leave_no_trace(live: Live):
    """The caller's number, the recording's secrets, what the caller said (names and a
    number among it), the platform's credentials and its fresh link's path secret."""
    recording = (AUDIO / "msg_fast.mp3").read_bytes()  # "Hi, it's John. Please call me at 917 555 2631."
    path_secret = live.secret("rec-" + secrets.token_hex(12), "the recording URL's path secret")
    signature = live.secret("sig-" + secrets.token_hex(12), "the recording URL's signature")
    ref = f"CA-{uuid.uuid4().hex[:10]}.mp3"
    live.https.route(f"/rec/{path_secret}/{ref}", static(recording, "audio/mpeg"))
    live.platform.serve(ref, recording=recording)
    original = live.https.url(f"/rec/{path_secret}/{ref}") + f"?signature={signature}"
    fresh = live.platform.fresh_link(ref)
    live.secret(live.platform.path_secret, "the fresh link's path secret")
    body = {
        "CallSid": ref,
        "CallFrom": PATIENT["phone"],
        "CallTo": "+420 222 333 444",
        "Status": "completed",
        "HasRecording": True,
        "RecordingUrl": original,
        "RecordingSid": ref,
        "Source": SOURCE,
    }
    handed = requests.post(
        live.base_url + switchboard_url(SLUG, "recording-complete"), json=body, headers=bearer(live.token), timeout=30
    )
    assert handed.json() == {"success": True}, handed.text
    assert wait_until(lambda: call_state(ref) == "done", timeout=120, interval=0.2), (
        "the worker did not finish the call"
    )

    found = live.api("POST", "/patientRequests/search", live.token, json={}).json()["data"]
    request = next(r for r in found if r.get("kind") == "voice_message")
    detail = live.api("GET", f"/patientRequests/{request['id']}", live.token).json()["data"]
    transcript = detail["call"]["transcript"]
    assert "call me" in transcript.lower(), transcript  # the words are known: they are checked for
    for sentence in re.split(r"(?<=[.!?])\s+", transcript):
        live.person(sentence, "a transcript's sentence")
    log_audit.remember_transcript(transcript)
    active = requests.post(
        live.base_url + switchboard_url(SLUG, "has-active-request"),
        json={"callFrom": PATIENT["phone"]},
        headers=bearer(live.token),
        timeout=30,
    )
    assert active.json() == {"hasActiveRequest": True}

    # The link expired at once: the play re-fetches it from the platform, which the worker
    # checks against the hand-off's bytes (a download of the fresh link).
    played = live.api("GET", f"/patientRequests/{request['id']}/recording", live.token, allow_redirects=False)
    assert played.status_code == 302 and played.headers["Location"] == fresh, (played.status_code, played.text)
    live.secret(next(iter(live.platform.tokens)), "the platform's access token")

    console = live.console()
    log_in(console, ADMIN["email"], ADMIN["password"])
    page = console.get(f"/console/requests/{request['id']}")
    assert "call me" in page.text.lower()

    downloads = [line["message"] for line in live.lines(live.worker_log) if line["message"].startswith("downloaded")]
    port = live.https.port
    assert (
        f"downloaded {len(recording)} bytes from https://127.0.0.1:{port}/…#{short_hash(f'/rec/{path_secret}/{ref}')}"
        in downloads
    ), downloads
    fresh_path = f"/fresh/{live.platform.path_secret}/{ref}"
    assert f"downloaded {len(recording)} bytes from https://127.0.0.1:{port}/…#{short_hash(fresh_path)}" in downloads
    assert_no_leaks(live)


def test_console_logins_set_password_links_and_two_factor_leave_no_trace(live: Live):
    """Failed and successful logins, a set-password link (its CSRF-refused POST included)
    and two-factor enrolment and login."""
    live.secret(STAFF_USER["password"], "a staff password")
    live.person(STAFF_USER["name"], "a staff user's name")
    live.person(STAFF_USER["email"], "a staff user's e-mail")
    admin = live.console()
    log_in(admin, ADMIN["email"], "not the password at all", status=401)
    log_in(admin, "nikdo.neexistuje@poliklinika-zahorie.cz", ADMIN["password"], status=401)
    log_in(admin, ADMIN["email"], ADMIN["password"])
    link = add_user(admin, STAFF_USER["email"], STAFF_USER["name"])
    token = live.secret(link.rsplit("/", 1)[1], "a set-password link's token")

    newcomer = live.console()
    # Sent without the form's CSRF token: refused before routing.
    newcomer.post(
        f"/console/password/{token}", {"password": STAFF_USER["password"], "repeat": STAFF_USER["password"]}, status=403
    )
    set_password(newcomer, link, STAFF_USER["password"])
    log_in(newcomer, STAFF_USER["email"], STAFF_USER["password"])
    totp_secret, codes = enrol(newcomer, wall_clock)
    live.secret(totp_secret, "a two-factor secret")
    for code in codes:
        live.secret(code, "a recovery code")
    newcomer.reset()
    assert log_in(newcomer, STAFF_USER["email"], STAFF_USER["password"]).headers["Location"].endswith("/login/code")
    code_login(newcomer, pyotp.TOTP(totp_secret).at(wall_clock() + timedelta(seconds=30)))
    newcomer.get("/console/", status=200)

    access = [line for line in live.lines(live.web_log) if line["logger"] == "access"]
    refused_line = [line for line in access if line["method"] == "POST" and line["status"] == 403]
    assert refused_line and refused_line[-1]["path"] == "/console/password/{token}", refused_line
    assert any(line["route"] == "/console/login/code" and line["status"] == 303 for line in access)
    assert_no_leaks(live)


def test_api_keys_made_rotated_and_revoked_in_the_console_leave_no_trace(live: Live):
    admin = live.console()
    log_in(admin, ADMIN["email"], ADMIN["password"])
    made = live.secret(secret_of(create_key(admin, name="ústředna")), "an API key made in the console")
    live.secret(made.split("_", 2)[2], "an API key's secret")
    rotate = next(f for f in admin.get(KEYS + f"?clinic={SLUG}").forms.values() if f.action.endswith("/rotate"))
    rotate["old_until"] = (wall_clock() + timedelta(hours=1)).astimezone(PRAGUE).strftime("%Y-%m-%dT%H:%M:%S")
    rotated = secret_of(rotate.submit(status=303).follow())
    live.secret(rotated, "a rotated API key")
    live.secret(rotated.split("_", 2)[2], "a rotated API key's secret")
    for key in (made, rotated):
        revoke = f"{KEYS}/{uuid.UUID(hex=key.split('_')[1])}/revoke"
        next(f for f in admin.get(KEYS + f"?clinic={SLUG}").forms.values() if f.action == revoke).submit(status=303)
    assert (
        requests.post(
            live.base_url + switchboard_url(SLUG, "is-on-vacation"), headers=bearer(rotated), timeout=30
        ).status_code
        == 401
    )
    access = [line for line in live.lines(live.web_log) if line["logger"] == "access"]
    assert any(line["route"] == KEYS + "/{token_id}/revoke" for line in access)
    assert_no_leaks(live)


def test_documents_stored_and_read_back_leave_no_trace(live: Live):
    """A patient imported, a request with a note, the upload link, the upload, the
    registration, the detail and the download (presigned URLs with their signatures)."""
    for value, what in (
        (f"{IMPORTED['firstName']} {IMPORTED['lastName']}", "a patient's name"),
        (IMPORTED["lastName"], "a patient's surname"),
        (IMPORTED["phone"], "a patient's phone"),
        (IMPORTED["email"], "a patient's e-mail"),
        (REQUEST_NOTE, "a request's note"),
    ):
        live.person(value, what)
    imported = live.api("POST", "/patients/import", live.token, json=IMPORTED)
    assert imported.status_code == 200, imported.text
    patient_id = imported.json()["data"]["patient"]["id"]
    searched = live.api(
        "POST", "/patients/search", live.token, json={"filter": {"query": PATIENT["lastName"], "inClinic": True}}
    ).json()["data"]
    assert [p["note"] for p in searched] == [PATIENT["records"][0]["note"]]
    created = live.api(
        "POST",
        "/patientRequests/create",
        live.token,
        json={"patientId": patient_id, "userECRFId": type_id("SIGNED_CONSENT", SLUG), "userNote": REQUEST_NOTE},
    )
    assert created.status_code == 200, created.text
    rid = created.json()["data"]["id"]
    link = live.api(
        "POST", f"/patientRequests/{rid}/attachments/upload-link", live.token, json={"contentType": "application/pdf"}
    ).json()["data"]
    upload = live.secret(link["url"], "a presigned upload URL")
    for key, value in re.findall(r"[?&](signature|expires)=([^&]+)", upload):
        if key == "signature":
            live.secret(value, "an upload URL's signature")
    put = requests.put(upload, data=PDF, headers={"Content-Type": "application/pdf"}, timeout=30)
    assert put.status_code == 200, put.text
    registered = live.api(
        "POST",
        f"/patientRequests/{rid}/attachments",
        live.token,
        json={
            "contentType": "application/pdf",
            "fileHash": link["fileHash"],
            "description": "souhlas.pdf",
            "categoryType": "CONSENT",
        },
    )
    assert registered.status_code == 200, registered.text
    record = live.api("GET", f"/patientRequests/{rid}", live.token).json()["data"]["medicalRecords"][0]
    download = live.secret(record["downloadUrl"], "a presigned download URL")
    live.secret(re.search(r"signature=([^&]+)", download).group(1), "a download URL's signature")
    assert requests.get(download, timeout=30).content == PDF
    patched = live.api("PATCH", f"/patientRequests/{rid}", live.token, json={"userNote": REQUEST_NOTE + " Znovu."})
    assert patched.status_code == 200, patched.text
    access = [line for line in live.lines(live.web_log) if line["logger"] == "access"]
    assert {"/storage/{key}"} == {line["path"] for line in access if line["route"] == "/storage/{key:path}"}
    assert_no_leaks(live)


def test_gunicorn_own_lines_name_no_path(live: Live):
    """A request line gunicorn itself refuses, with a secret in its path."""
    secret = live.secret("raw-" + secrets.token_hex(12), "a secret in a malformed request line")
    host, port = live.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        # A character a request target may not hold: gunicorn refuses the line, and its
        # warning quotes the whole line.
        raw.sendall(f"GET /console/password/{secret}\x7f HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        answer = raw.recv(1000)
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert wait_until(lambda: "Invalid request from ip=" in live.web_log.read_text(), timeout=10)
    assert_no_leaks(live)
