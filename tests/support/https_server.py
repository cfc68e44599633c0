"""A reusable threaded HTTPS test server on 127.0.0.1 with a trustme CA.

Used by the safe_fetch tests, and meant to serve audio files or fake a
switchboard platform API in other tests.  Everything is real TLS over real
loopback sockets; nothing is mocked.

Quick use::

    with HTTPSTestServer() as srv:
        srv.route("/a.mp3", static(b"ID3...", content_type="audio/mpeg"))
        srv.route("/api/token", lambda req: json_response({"token": "t"}), methods=("POST",))
        url = srv.url("/a.mp3")            # https://127.0.0.1:<port>/a.mp3
        srv.ca_path                         # PEM bundle to pass as ca_certs
        srv.connections, srv.request_count("/a.mp3")

or the pytest fixture ``https_server`` (import it into a test module or list
this module in ``pytest_plugins``).

Handlers are callables ``handler(req: TestRequest) -> TestResponse``.  Helper
factories: :func:`static`, :func:`json_response`, :func:`redirect`,
:class:`FailThenSucceed`, :func:`big_body`, :func:`drip`, :func:`hang`.
Delays use ``Event.wait`` on the server's stop event, so they end as soon as
the server stops: nothing here sleeps unconditionally.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import ssl
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trustme

__all__ = [
    "FailThenSucceed",
    "HTTPSTestServer",
    "TestRequest",
    "TestResponse",
    "big_body",
    "drip",
    "hang",
    "https_server",
    "json_response",
    "redirect",
    "static",
]


@dataclass
class TestRequest:
    __test__ = False  # not a pytest test class

    method: str
    path: str  # without query
    query: dict[str, list[str]]
    raw_target: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    server: HTTPSTestServer

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class TestResponse:
    """What a handler returns.

    ``body`` is bytes or an iterable of byte chunks (streamed as produced).
    ``content_length``: ``"auto"`` sets it from a bytes body (or omits it for
    an iterable, which is then sent close-delimited); an int sends that value
    verbatim (it may lie); ``None`` omits it.  ``chunked=True`` uses chunked
    transfer encoding instead.
    """

    __test__ = False

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | Iterable[bytes] = b""
    content_length: int | str | None = "auto"
    chunked: bool = False
    delay_before_headers: float = 0.0


Handler = Callable[[TestRequest], TestResponse]


# ---------------------------------------------------------------- handlers


def static(body: bytes, content_type: str = "application/octet-stream", status: int = 200, **headers: str) -> Handler:
    def handler(req: TestRequest) -> TestResponse:
        return TestResponse(status=status, headers={"Content-Type": content_type, **headers}, body=body)

    return handler


def json_response(data: Any, status: int = 200, **headers: str) -> TestResponse:
    return TestResponse(
        status=status, headers={"Content-Type": "application/json", **headers}, body=json.dumps(data).encode()
    )


def redirect(location: str | Callable[[TestRequest], str], status: int = 302) -> Handler:
    def handler(req: TestRequest) -> TestResponse:
        loc = location(req) if callable(location) else location
        return TestResponse(status=status, headers={"Location": loc})

    return handler


class FailThenSucceed:
    """Answer ``failure`` for the first ``n`` requests, then ``success``."""

    def __init__(self, n: int, success: Handler, failure: Handler | None = None) -> None:
        self.n = n
        self.success = success
        self.failure = failure or static(b"unavailable", "text/plain", status=503)
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, req: TestRequest) -> TestResponse:
        with self._lock:
            self.calls += 1
            failing = self.calls <= self.n
        return self.failure(req) if failing else self.success(req)


def big_body(
    size: int,
    *,
    content_type: str = "application/octet-stream",
    with_length: bool = True,
    chunked: bool = False,
    prefix: bytes = b"",
    chunk: int = 64 * 1024,
) -> Handler:
    """Stream ``size`` bytes (``prefix`` then zeros) without building them in memory."""

    def gen(req: TestRequest) -> Iterator[bytes]:
        sent = 0
        if prefix:
            yield prefix[:size]
            sent = min(len(prefix), size)
        block = b"\0" * chunk
        while sent < size and not req.server.stopping.is_set():
            n = min(chunk, size - sent)
            yield block[:n]
            sent += n

    def handler(req: TestRequest) -> TestResponse:
        return TestResponse(
            headers={"Content-Type": content_type},
            body=gen(req),
            content_length=size if with_length and not chunked else None,
            chunked=chunked,
        )

    return handler


def drip(
    chunk: bytes = b"x", interval: float = 0.05, count: int = 10_000, content_type: str = "application/octet-stream"
) -> Handler:
    """Send ``chunk`` every ``interval`` seconds (a slowloris body); stops with the server."""

    def gen(req: TestRequest) -> Iterator[bytes]:
        for _ in range(count):
            yield chunk
            if req.server.stopping.wait(interval):
                return

    def handler(req: TestRequest) -> TestResponse:
        return TestResponse(headers={"Content-Type": content_type}, body=gen(req), content_length=None, chunked=True)

    return handler


def hang(max_wait: float = 30.0) -> Handler:
    """Accept the request and send nothing until the server stops (or ``max_wait``)."""

    def handler(req: TestRequest) -> TestResponse:
        req.server.stopping.wait(max_wait)
        return TestResponse(status=503, body=b"")

    return handler


# ------------------------------------------------------------------ server


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _TLSServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        # TLS handshake here, in the connection's own thread, so that a slow
        # or failing client never blocks the accept loop.
        conn: ssl.SSLSocket = self.request
        conn.settimeout(self.server.owner.handler_timeout)
        try:
            conn.do_handshake()
        except (ssl.SSLError, OSError):
            self.server.owner._count("tls_failures")
            raise
        super().setup()

    def handle(self) -> None:
        with contextlib.suppress(ssl.SSLError, OSError):  # client went away / aborted mid-body: expected in tests
            super().handle()

    def _dispatch(self) -> None:
        owner = self.server.owner
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = TestRequest(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            raw_target=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            server=owner,
        )
        owner._record(req)
        handler = owner._lookup(self.command, parts.path)
        if handler is None:
            resp = TestResponse(status=404, headers={"Content-Type": "text/plain"}, body=b"not found")
        else:
            try:
                resp = handler(req)
            except Exception as exc:  # a handler bug should show up as a 500
                resp = TestResponse(status=500, headers={"Content-Type": "text/plain"}, body=repr(exc).encode())
        self._send(resp, parts.path)

    def _send(self, resp: TestResponse, path: str) -> None:
        owner = self.server.owner
        if resp.delay_before_headers and owner.stopping.wait(resp.delay_before_headers):
            return
        self.send_response(resp.status)
        hdrs = {k.lower(): (k, v) for k, v in resp.headers.items()}
        for k, v in hdrs.values():
            self.send_header(k, v)
        body = resp.body
        close_delimited = False
        if resp.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif isinstance(resp.content_length, int):
            self.send_header("Content-Length", str(resp.content_length))
        elif resp.content_length == "auto" and isinstance(body, (bytes, bytearray)):
            self.send_header("Content-Length", str(len(body)))
        else:
            close_delimited = True
        if close_delimited or "connection" not in hdrs:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command == "HEAD":
            return
        chunks: Iterable[bytes] = [bytes(body)] if isinstance(body, (bytes, bytearray)) else body
        for piece in chunks:
            if not piece:
                continue
            if resp.chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                self.wfile.write(piece)
            self.wfile.flush()
            owner._add_bytes(path, len(piece))
        if resp.chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _dispatch


class _TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: HTTPSTestServer) -> None:
        self.owner = owner
        super().__init__((owner.host, 0), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        self.owner._count("connections")
        tls = self.owner.server_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return tls, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # aborted connections are normal in these tests


class HTTPSTestServer:
    """Threaded HTTPS server on 127.0.0.1 (ephemeral port) with a trustme CA.

    ``cert_hostnames`` are the names in the server certificate (default
    ``localhost``, ``127.0.0.1``, ``::1``).  Pass ``ca=`` to share one CA
    between servers.  Counters: ``connections`` (TCP accepts, counted before
    TLS), ``tls_failures``, ``request_count(path)``, ``bytes_sent(path)``,
    ``requests`` (list of :class:`TestRequest`).
    """

    def __init__(
        self,
        *,
        ca: trustme.CA | None = None,
        cert_hostnames: Sequence[str] = ("localhost", "127.0.0.1", "::1"),
        handler_timeout: float = 30.0,
    ) -> None:
        self.host = "127.0.0.1"
        self.ca = ca or trustme.CA()
        self.cert = self.ca.issue_cert(*cert_hostnames)
        self.server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.cert.configure_cert(self.server_context)
        self.handler_timeout = handler_timeout
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._routes: dict[str, tuple[Handler, frozenset[str] | None]] = {}
        self._counters: Counter[str] = Counter()
        self._by_path: Counter[str] = Counter()
        self._bytes_sent: Counter[str] = Counter()
        self.requests: list[TestRequest] = []
        self._tmpdir = tempfile.mkdtemp(prefix="https-test-")
        self.ca_path = os.path.join(self._tmpdir, "ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_path)
        self._server: _TLSServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> HTTPSTestServer:
        self._server = _TLSServer(self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            os.unlink(self.ca_path)
            os.rmdir(self._tmpdir)
        except OSError:
            pass

    def __enter__(self) -> HTTPSTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- routes
    def route(self, path: str, handler: Handler, methods: Sequence[str] | None = None) -> HTTPSTestServer:
        with self._lock:
            self._routes[path] = (handler, frozenset(m.upper() for m in methods) if methods else None)
        return self

    def _lookup(self, method: str, path: str) -> Handler | None:
        with self._lock:
            entry = self._routes.get(path)
        if entry is None:
            return None
        handler, methods = entry
        if methods is not None and method not in methods:
            return lambda req: TestResponse(status=405, headers={"Allow": ", ".join(sorted(methods))})
        return handler

    # -- addresses
    def url(self, path: str = "/", host: str | None = None) -> str:
        return f"https://{host or self.host}:{self.port}{path}"

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_path)
        return ctx

    # -- counters
    def _count(self, name: str) -> None:
        with self._lock:
            self._counters[name] += 1

    def _record(self, req: TestRequest) -> None:
        with self._lock:
            self._by_path[req.path] += 1
            self.requests.append(req)

    def _add_bytes(self, path: str, n: int) -> None:
        with self._lock:
            self._bytes_sent[path] += n

    def bytes_sent(self, path: str) -> int:
        """Body bytes the server managed to hand to the kernel for ``path``."""
        with self._lock:
            return self._bytes_sent[path]

    @property
    def connections(self) -> int:
        with self._lock:
            return self._counters["connections"]

    @property
    def tls_failures(self) -> int:
        with self._lock:
            return self._counters["tls_failures"]

    def request_count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(self._by_path.values()) if path is None else self._by_path[path]

    def reset_counters(self) -> None:
        with self._lock:
            self._counters.clear()
            self._by_path.clear()
            self._bytes_sent.clear()
            self.requests.clear()


@pytest.fixture(scope="session")
def https_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def https_server(https_ca: trustme.CA) -> Iterator[HTTPSTestServer]:
    """A started :class:`HTTPSTestServer` (shared session CA), stopped afterwards."""
    with HTTPSTestServer(ca=https_ca) as srv:
        yield srv
