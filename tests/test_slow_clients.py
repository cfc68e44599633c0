"""Slow and unauthenticated clients: a request holds no pooled database
connection while it waits on a client's body, a job or a storage round trip; bodies are
read within a deadline (408 past it) and only once the token, the clinic and the scope
are checked; a pool that runs dry anyway answers 503 + Retry-After, never 500.

Timing is checked against gunicorn as the Procfile runs it (tests/support/gunicorn.py)
over raw sockets; where only the connection's whereabouts matter, in process.
"""

from __future__ import annotations

import io
import json
import os
import select
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
import webtest
from rq.job import Job

from app import create_app
from config import Config
from documents.attachments import issue_upload_link, register_attachment
from jobs.refetch import job_id as refetch_job_id
from models import MODELS, ApiToken, Clinic, SchemaMigration
from patient_requests import changes
from plumbing import clock
from plumbing.database import bind_database, db
from storage import LocalStorage
from tests.conftest import PG_URL, REDIS_URL
from tests.support import SECRET_KEY, bearer, bodies, issue_token, load, switchboard_url
from tests.support.bodies import request_head as _head
from tests.support.gunicorn import serving, start_gunicorn
from tests.support.live_service import patient_id, serve, signing_organization, type_id
from tests.support.ports import free_port
from tests.support.processes import stop_process
from tests.support.recordings import FakePlatform, received_at, request_url, stored_call
from tests.support.recordings import onboard as onboard_with_platform
from tests.support.servers import wait_until
from tests.support.tiers import needs
from tests.support.worker import MARKER_WORDS

PDF = b"%PDF-1.7\n" + b"\0" * 1000 + b"\n%%EOF\n"
TRICKLES = 40  # four times the web process's pool (DB_POOL_SIZE, default 10)
UPLOAD_SECONDS = 5  # UPLOAD_READ_SECONDS of the served process
BODY_SECONDS = 2  # BODY_READ_SECONDS
BODY_LIMIT = 64 * 1024  # MAX_BODY_BYTES
FAST = 1.0  # what "still answers" means: every measured request within a second


@dataclass
class Served:
    base_url: str
    port: int
    root: Path  # its STORAGE_DIR
    signer: LocalStorage  # signs presigned URLs as the served process does
    token: str  # read + write on clinic-a
    reader: str  # read only on clinic-a
    other: str  # read + write on clinic-b only

    def put_target(self) -> str:
        key = f"requests/{uuid.uuid4()}/{uuid.uuid4().hex}.pdf"
        url = urllib.parse.urlsplit(self.signer.presign_put(key, "application/pdf", 600))
        return f"{url.path}?{url.query}"

    def parts(self) -> int:
        """Uploads being written (LocalStorage streams each to a hidden `.upload-*.part`)."""
        return sum(1 for _ in self.root.rglob(".upload-*.part"))


@pytest.fixture(scope="module")
@needs("gunicorn")
def served(wsgi_app, tmp_path_factory) -> Iterator[Served]:
    """One gunicorn gevent worker (so every trickle lands in the one pool measured), the
    default pool of 10, short deadlines to overrun."""
    tables = ", ".join(f'"{m._meta.table_name}"' for m in MODELS if m is not SchemaMigration)
    with db.connection_context():
        db.execute_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    load(signing_organization())
    token, reader = issue_token(["clinic-a"], ["read", "write"]), issue_token(["clinic-a"], ["read"])
    other = issue_token(["clinic-b"], ["read", "write"])
    workdir = tmp_path_factory.mktemp("slow-clients")
    port, root = free_port(), workdir / "storage"
    root.mkdir()
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "STORAGE_DIR": str(root),
        "PUBLIC_BASE_URL": base_url,
        "MAX_BODY_BYTES": str(BODY_LIMIT),
        "UPLOAD_READ_SECONDS": str(UPLOAD_SECONDS),
        "BODY_READ_SECONDS": str(BODY_SECONDS),
        "LOG_LEVEL": "WARNING",
    }
    env.pop("DB_POOL_SIZE", None)
    proc = start_gunicorn(port, "--workers", "1", env=env, log=workdir / "web.log", ready=lambda _: serving(base_url))
    try:
        signer = LocalStorage(
            root, signing_key=Config(secret_key=SECRET_KEY).storage_signing_key, public_base_url=base_url
        )
        yield Served(base_url, port, root, signer, token, reader, other)
    finally:
        stop_process(proc, 15)


# ------------------------------------------------------------------ raw HTTP/1.1
# (request heads: test_hostile's `_head`)


def complete(data: bytes) -> tuple[int, dict[str, Any]] | None:
    """(status, JSON body) once `data` holds a whole answer with a Content-Length, else None."""
    header, found, rest = data.partition(b"\r\n\r\n")
    if not found:
        return None
    lines = header.split(b"\r\n")
    length = next((int(x.split(b":", 1)[1]) for x in lines if x.lower().startswith(b"content-length:")), 0)
    if len(rest) < length:
        return None
    return int(lines[0].split(b" ")[1]), json.loads(rest[:length] or b"null")


def answer_of(sock: socket.socket, timeout: float) -> tuple[int, dict[str, Any]]:
    """The answer on `sock`, waited for `timeout` seconds at most (AssertionError after)."""
    sock.settimeout(timeout)
    data = b""
    while (done := complete(data)) is None:
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"no answer within {timeout} s: {data[:200]!r}") from None
        assert piece, f"closed before a whole answer: {data[:200]!r}"
        data += piece
    return done


@dataclass
class Trickle:
    """One upload sending a byte a quarter second: its socket, what came back, when."""

    sock: socket.socket
    started: float
    received: bytes = b""
    answered_at: float | None = None
    closed: bool = False
    answer: tuple[int, dict[str, Any]] | None = None


def trickle_all(trickles: list[Trickle], stop: threading.Event, tick: float = 0.25) -> None:
    """Every `tick`, a byte more of each upload not yet answered, reading what comes back.

    The tick is the pace of a slow client (select's timeout), not a wait for the server."""
    while not stop.is_set():
        waiting = [t for t in trickles if t.answer is None and not t.closed]
        if not waiting:
            return
        readable, _, _ = select.select([t.sock for t in waiting], [], [], tick)
        for t in waiting:
            if t.sock in readable:
                try:
                    piece = t.sock.recv(65536)
                except OSError:
                    piece = b""
                t.received += piece
                t.answer = complete(t.received)
                if t.answer is not None:
                    t.answered_at = time.monotonic()
                elif not piece:
                    t.closed = True
            elif not t.received:  # stop sending once the server answers: its close resets
                try:
                    t.sock.sendall(b"7")
                except OSError:
                    t.closed = True


def timed(send: Callable[[], requests.Response]) -> tuple[float, int, Any]:
    """(seconds, status, JSON) of one request on a fresh connection."""
    started = time.monotonic()
    try:
        answer = send()
        status, body = answer.status_code, answer.json()
    except requests.RequestException as exc:
        status, body = 0, type(exc).__name__
    return time.monotonic() - started, status, body


# --------------------------------------------------------------- slow uploads (point 3)


def test_forty_trickled_uploads_leave_routing_checks_and_hand_offs_answering_then_get_408(served: Served) -> None:
    base, token = served.base_url, served.token
    checks: dict[str, tuple[str, Any]] = {
        "is-clinic-opened": (switchboard_url("clinic-a", "is-clinic-opened"), {}),
        "has-active-request": (switchboard_url("clinic-a", "has-active-request"), {"callFrom": "+420 601 123 456"}),
    }

    def send(name: str, n: int) -> Callable[[], requests.Response]:
        path, body = checks.get(name) or (
            switchboard_url("clinic-a", "recording-complete"),
            bodies.call_body(f"CA-slow-{n}-{uuid.uuid4().hex[:6]}"),
        )
        return lambda: requests.post(base + path, json=body, headers=bearer(token), timeout=30)

    names = [*checks, "recording-complete"]
    for name in names:  # the process is warm: what is measured below is the waiting
        assert timed(send(name, 0))[1] == 200

    trickles = []
    for _ in range(TRICKLES):
        sock = socket.create_connection(("127.0.0.1", served.port), timeout=10)
        sock.sendall(_head("PUT", served.put_target(), None, length=100_000, content_type="application/pdf") + PDF[:8])
        trickles.append(Trickle(sock, time.monotonic()))
    stop = threading.Event()
    pacer = threading.Thread(target=trickle_all, args=(trickles, stop), daemon=True)
    pacer.start()
    try:
        # Each upload streams to a partial file once the service has checked its key
        # against the database: all forty at once means none waits for a pooled connection.
        all_streaming = wait_until(lambda: served.parts() >= TRICKLES, timeout=UPLOAD_SECONDS - 2, interval=0.05)
        measured: list[tuple[str, tuple[float, int, Any]]] = []
        lock = threading.Lock()

        def measure(name: str, n: int) -> None:
            result = timed(send(name, n))
            with lock:
                measured.append((name, result))

        threads = [threading.Thread(target=measure, args=(name, n)) for n in range(1, 4) for name in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=40)
        print(
            "latencies while 40 uploads trickle:",
            ", ".join(f"{name} {seconds:.3f}s {status}" for name, (seconds, status, _) in sorted(measured)),
        )
        assert len(measured) == 9
        slow = [
            (name, round(seconds, 3), status, body)
            for name, (seconds, status, body) in measured
            if seconds > FAST or status != 200
        ]
        assert not slow, slow
        assert all_streaming, f"{served.parts()} of {TRICKLES} uploads streaming: the others wait for a connection"
        assert all(t.answer is None for t in trickles), "the uploads were still trickling while measured"

        # Past UPLOAD_READ_SECONDS each upload is refused, and its partial file removed.
        assert wait_until(
            lambda: all(t.answer is not None or t.closed for t in trickles), timeout=UPLOAD_SECONDS + 10, interval=0.1
        )
    finally:
        stop.set()
        pacer.join(timeout=10)
        for t in trickles:
            t.sock.close()
    answers = [t.answer for t in trickles]
    assert (
        answers
        == [
            (
                408,
                {
                    "error": f"The request body did not arrive within {UPLOAD_SECONDS} seconds.",
                    "code": "REQUEST_TIMEOUT",
                },
            )
        ]
        * TRICKLES
    ), {repr(a): answers.count(a) for a in answers}
    took = [t.answered_at - t.started for t in trickles if t.answered_at is not None]
    assert min(took) > UPLOAD_SECONDS - 0.5 and max(took) < UPLOAD_SECONDS + 3, (min(took), max(took))
    assert wait_until(lambda: served.parts() == 0, timeout=5), "partial uploads are removed"
    assert [p for p in served.root.rglob("*") if p.is_file()] == []  # nothing stored


def test_a_json_body_trickled_past_its_deadline_gets_408(served: Served) -> None:
    target = switchboard_url("clinic-a", "has-active-request")
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(_head("POST", target, served.token, length=1000) + b'{"callFrom": ')
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.25):  # a client's pace
                try:
                    sock.sendall(b" ")
                except OSError:
                    return

        pacer = threading.Thread(target=trickle, daemon=True)
        pacer.start()
        try:
            status, body = answer_of(sock, BODY_SECONDS + 5)
        finally:
            stop.set()
            pacer.join(timeout=5)
    assert (status, body["code"]) == (408, "REQUEST_TIMEOUT")
    assert BODY_SECONDS - 0.5 < time.monotonic() - started < BODY_SECONDS + 2


# ------------------------------------------------ bodies read after the token (point 10)


@pytest.mark.parametrize(
    "who, slug, check, expected",
    [
        (None, "clinic-a", "has-active-request", (401, "UNAUTHORIZED")),
        ("token", "no-such-clinic", "has-active-request", (404, "CLINIC_NOT_FOUND")),
        ("other", "clinic-a", "has-active-request", (403, "FORBIDDEN")),
        ("reader", "clinic-a", "recording-complete", (403, "FORBIDDEN")),
    ],
    ids=["no-token", "unknown-clinic", "other-clinic", "no-write-scope"],
)
def test_a_chunked_body_is_not_read_before_the_token_clinic_and_scope_are_checked(
    served: Served, who: str | None, slug: str, check: str, expected: tuple[int, str]
) -> None:
    """Headers and a first 16 KiB chunk of a body announced as chunked; the rest is never
    sent: the refusal comes while the service still waits for it, so it read nothing."""
    token = getattr(served, who) if who else None
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        chunk = b"7" * 16384
        sock.sendall(
            _head("POST", switchboard_url(slug, check), token, length=None) + b"%x\r\n%s\r\n" % (len(chunk), chunk)
        )
        status, body = answer_of(sock, 5)
    assert (status, body["code"]) == expected, body


@pytest.mark.parametrize(
    "body, expected",
    [
        (b'{"callFrom": "+420 601 123 456"}', (200, {"hasActiveRequest": False})),
        (b'{"callFrom": [5]}', (400, "VALIDATION_FAILED")),
        (b"7" * (BODY_LIMIT + 1), (413, "PAYLOAD_TOO_LARGE")),
    ],
)
def test_an_authorized_chunked_body_is_read_then_validated(served: Served, body: bytes, expected: tuple) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        pieces = [body[i : i + 10000] for i in range(0, len(body), 10000)]
        sock.sendall(
            _head("POST", switchboard_url("clinic-a", "has-active-request"), served.token, length=None)
            + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
            + b"0\r\n\r\n"
        )
        status, answer = answer_of(sock, 10)
    assert (status, answer if status == 200 else answer["code"]) == expected


# ------------------------------------------------- waits and read-backs, in process (point 3)


def test_a_play_waiting_for_a_refetch_leaves_the_pool_to_other_requests(app, clock, https_server, ca_bundle) -> None:
    """A pool of one connection: while a play waits for its re-fetch (the platform takes
    longer than the play waits), a request that queries is answered at once."""
    platform = FakePlatform(https_server, clock)
    onboard_with_platform(platform)
    request = stored_call("CA-wait", recording_sid="CA-wait.mp3")
    platform.serve("CA-wait.mp3")
    platform.link_delay = 4  # longer than the play waits, within a worker's PBX_FETCH_TIMEOUT
    reader = issue_token(["clinic-rec"], ["read"])
    clock.set(received_at(request) + timedelta(minutes=26))  # the original link has expired
    queue = redis.Redis.from_url(REDIS_URL)
    job = refetch_job_id(request.call_id)
    settings = {
        "platform_play_wait_seconds": 3,
        "unsafe_allow_loopback_fetch": True,
        "fetch_ca_bundle": ca_bundle,
        "clock": clock,
        "db_pool_size": 1,
        "provider_marker_words": MARKER_WORDS,
    }
    try:
        with serve(**settings) as base_url:
            played: list[tuple[float, int, Any]] = []
            player = threading.Thread(
                target=lambda: played.append(
                    timed(
                        lambda: requests.get(
                            f"{base_url}{request_url(request)}/recording",
                            headers=bearer(reader),
                            allow_redirects=False,
                            timeout=30,
                        )
                    )
                )
            )
            player.start()
            assert wait_until(lambda: Job.exists(job, connection=queue), timeout=5), "the play queued its re-fetch"
            seconds, status, body = timed(
                lambda: requests.post(
                    base_url + switchboard_url("clinic-rec", "has-active-request"),
                    json={"callFrom": "+12015550198"},
                    headers=bearer(reader),
                    timeout=30,
                )
            )
            player.join(timeout=30)
        assert (status, body) == (200, {"hasActiveRequest": True}) and seconds < FAST, (seconds, status, body)
        assert played and played[0][1] == 503 and played[0][0] > 2.5, played  # it did wait
    finally:  # with no worker running, the job would wait for the next one
        if Job.exists(job, connection=queue):
            Job.fetch(job, connection=queue).delete()


class Watched(LocalStorage):
    """Local storage noting, at every call that is a round trip on S3, whether this thread
    held a pooled database connection."""

    held: list[tuple[str, bool]]

    def seal(self, source: str, target: str):
        self.held.append(("seal", not db.is_closed()))
        return super().seal(source, target)

    def read_prefix(self, key: str, size: int) -> bytes:
        self.held.append(("read_prefix", not db.is_closed()))
        return super().read_prefix(key, size)

    def delete(self, key: str) -> None:
        self.held.append(("delete", not db.is_closed()))
        super().delete(key)


def test_registration_holds_no_connection_through_the_storage_copy_and_read_back(app, tmp_path) -> None:
    load(signing_organization())
    issue_token(["clinic-a"], ["read", "write"])
    storage = Watched(tmp_path, signing_key="k" * 32, public_base_url="http://127.0.0.1:1")
    storage.held = []
    with db.connection_context():
        token = ApiToken.select().get()
        request = changes.create(
            Clinic.by_slug("clinic-a"),
            uuid.UUID(patient_id("jana")),
            uuid.UUID(type_id("SIGNED_CONSENT")),
            note="",
            slot=None,
            actor=token,
            now=clock.now(),
            then=lambda created: created,
        )
        _, key = issue_upload_link(
            storage, request, "application/pdf", token, clock.now(), open_links_limit=500, then=str
        )
    storage.write_stream(key, io.BytesIO(PDF), len(PDF), "application/pdf")
    try:  # as in a request: connections taken as queries need them, handed back at the end
        record = register_attachment(
            storage,
            request,
            {"fileHash": key, "contentType": "application/pdf", "description": "consent.pdf"},
            token,
            clock.now(),
            lambda registered: registered,
        )
    finally:
        db.close()
    assert record.sha256 and [name for name, _ in storage.held] == ["seal", "read_prefix", "delete"]
    assert storage.held == [(name, False) for name, _ in storage.held]


# ----------------------------------------------------------------- the pool running dry


def test_a_pool_with_no_free_connection_answers_503_with_retry_after(app, config: Config) -> None:
    web = webtest.TestApp(create_app(Config(**{**config.__dict__, "db_pool_size": 1, "db_pool_wait_seconds": 0.5})))
    load(signing_organization())
    token = issue_token(["clinic-a"], ["read"])
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:  # another request's connection, kept
        with db.connection_context():
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(5)
        answer = web.post_json(
            switchboard_url("clinic-a", "has-active-request"),
            {"callFrom": "+420 601 123 456"},
            headers=bearer(token),
            status=503,
        )
    finally:
        release.set()
        holder.join(timeout=10)
        bind_database(PG_URL, pool_size=4)  # create_app rebound the shared proxy
    assert answer.json == {"error": "The service is busy; safe to retry.", "code": "SERVICE_UNAVAILABLE"}
    assert answer.headers["Retry-After"] == "2"
