"""The web process's middleware, in the order `create_app` installs it, and the rules
for reading a body: one that declares no length (`require_known_end`), and every body
within a deadline (`Deadline`)."""

from __future__ import annotations

import io
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import falcon

from config import Config
from plumbing.database import UNREACHABLE, answer_by, answered, db, release_connection
from storage import Readable
from web.errors import APIError, body_too_slow

log = logging.getLogger(__name__)


def _gevent_patched() -> bool:
    """Does this process run under gevent (the Procfile's web workers)?"""
    try:
        from gevent import monkey
    except ImportError:
        return False
    return monkey.is_module_patched("socket")


class TakeTurns:
    """Under gevent, each request first lets the other connections' requests run.

    A check answered from memory never waits on I/O, and a keep-alive connection whose
    client sends its next request at once finds it already readable: gevent does not
    yield there, so one connection's requests ran back to back while the others of the
    process waited (p99 of a cached check 400-800 ms against 100 ms for one that
    queries, at 32 connections; bench/routing_bench.py). Yielding once per request
    puts it behind the others; outside gevent there is nothing to yield to."""

    def __init__(self) -> None:
        self._yield = None
        if _gevent_patched():
            from gevent import sleep

            self._yield = sleep

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self._yield is not None:
            self._yield(0)


class AnswerBy:
    """A resource that declares `answer_within` (seconds: the routing checks) has its
    database uses bounded to end that long after its resource is found
    (plumbing/database.py: `answer_by`, `within`): past it, each answers from memory or
    503, and the check answers on time however many of them it makes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object, params: dict) -> None:
        if getattr(resource, "answer_within", False):
            req.context.answer_by = answer_by(time.monotonic() + self.seconds)

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        token = getattr(req.context, "answer_by", None)
        if token is not None:
            req.context.answer_by = None
            answered(token)


class RetryAdvice:
    """Marks the request when its resource writes once (`not_idempotent`), so that a 5xx
    says to check before retrying (web.errors.retry_advice)."""

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object, params: dict) -> None:
        req.context.not_idempotent = req.method in getattr(resource, "not_idempotent", ())


class NoNulInUrl:
    """400 for a NUL character in the (decoded) path or query string: no slug, id, key or
    parameter holds one, and PostgreSQL refuses it in a lookup, which would be a 500."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if "\x00" in req.path or "\x00" in urllib.parse.unquote(req.query_string or ""):
            raise APIError(400, "VALIDATION_FAILED", "The URL contains a NUL character.")


def require_known_end(req: falcon.Request) -> None:
    """411 for a chunked body on a server that cannot tell where it ends
    (`wsgi.input_terminated` unset): reading it could block for ever. The one rule for
    every body without a Content-Length, the API's and the storage uploads'."""
    if not req.env.get("wsgi.input_terminated"):
        raise APIError(411, "LENGTH_REQUIRED", "Send a Content-Length with the body.")


class Deadline:
    """A request body to be read within `seconds` of this wrapper's making; past that,
    408 (`errors.body_too_slow`).

    Under gevent (the Procfile's workers) a read blocked on a client that trickles or
    stalls is interrupted at the deadline: one `read(n)` of a WSGI input waits for all n
    bytes, so checking the clock between reads would let a few bytes a second hold the
    request for ever. Elsewhere (threads, the tests' in-process servers) the deadline is
    checked before each read only. The 408 is an ordinary exception, so gunicorn marks the
    body failed and closes the connection after the answer rather than drain the rest."""

    def __init__(self, stream: Readable, seconds: float) -> None:
        self._stream = stream
        self._expired = body_too_slow(seconds)
        self._timeout: Any = None
        if _gevent_patched():
            from gevent import Timeout

            self._timeout = Timeout
        self._ends = time.monotonic() + seconds

    def read(self, size: int = -1, /) -> bytes:
        left = self._ends - time.monotonic()
        if left <= 0:
            raise self._expired
        if self._timeout is None:
            return self._stream.read(size)
        with self._timeout(left, self._expired):
            return self._stream.read(size)


class BodyLimit:
    """Refuse a body over the limit without reading it whole, and read a body only once
    the request is authorized, within a deadline, holding no database connection.

    A declared length over the limit is refused before a byte is read, ahead of the token
    check (`process_request`). Every other body is read in `process_resource`, which runs
    after `TokenAuth`'s (this middleware is installed after it): an unauthenticated client
    cannot make the service buffer a byte (a chunked body was read before the token was
    checked: a megabyte per connection, a thousand connections per gevent worker). So the
    check order is the API's: token (401), clinic (404), scope (403), then the body. Only
    a resource that authorizes the method reads a body; the public ones (OpenAPI, health,
    metrics) and 404/405 answers take none, and their bodies are left unread.

    The body is read once the request's pooled connection is handed back (the token check
    may have taken one), at most limit + 1 bytes, within `read_seconds` (`Deadline`), and
    handed on in memory with its length: the JSON handler sees an ordinary body (Falcon
    alone would read a chunked one as empty), and no resource waits on a slow client while
    it holds a pooled connection.

    Not for `/storage/` (local backend uploads): those stream to disk under their own
    cap, `LocalStorage.max_upload_bytes`, checked after the signature, before reading,
    and their own deadline (`StoredObject`).
    """

    def __init__(self, max_bytes: int, read_seconds: float = Config.body_read_seconds) -> None:
        self.max_bytes = max_bytes
        self.read_seconds = read_seconds

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.path.startswith("/storage/"):
            return
        if req.content_length is not None and req.content_length > self.max_bytes:
            raise APIError(413, "PAYLOAD_TOO_LARGE", f"Body over {self.max_bytes} bytes.")

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict) -> None:
        if req.path.startswith("/storage/") or req.method not in (getattr(resource, "scopes", None) or {}):
            return
        length = req.content_length
        if length == 0 or (length is None and req.get_header("Transfer-Encoding") is None):
            return  # no body at all
        if length is None:
            require_known_end(req)
        release_connection()
        wanted = self.max_bytes + 1 if length is None else length
        body = read_at_most(Deadline(req.stream, self.read_seconds), wanted)
        if len(body) > self.max_bytes:
            raise APIError(413, "PAYLOAD_TOO_LARGE", f"Body over {self.max_bytes} bytes.")
        req.env["wsgi.input"] = io.BytesIO(body)
        req.env["CONTENT_LENGTH"] = str(len(body))


def read_at_most(stream: Readable, limit: int) -> bytes:
    """Up to `limit` bytes of `stream`, in pieces (a WSGI input may return short reads)."""
    pieces, size = [], 0
    while size < limit:
        piece = stream.read(min(64 * 1024, limit - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    return b"".join(pieces)


class DatabaseConnection:
    """At most one pooled connection per request, returned to the pool when the answer is
    out. Taken at the first query (Peewee's autoconnect), not up front: a call hand-off
    whose token is cached and whose row another request's group commit writes needs none."""

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        if not db.is_closed():
            db.close()


#: The paths that answer for themselves whatever the schema: the health checks.
HEALTH_PATHS = frozenset({"/livez", "/readyz", "/healthz"})


class SchemaGate:
    """Until the database has every migration this release needs, every request but the
    health checks is answered 503 `SERVICE_UNAVAILABLE` (with `Retry-After`), and the
    process says why once: "run manage.py migrate". A web process started before the
    release step (a compose file, a VM starting everything at once) then waits for the
    schema instead of answering each request with a 500 and a traceback; it serves as
    soon as the schema is there, without a restart.

    `pending` names the missing migrations (empty: current); it is asked at most every
    `recheck_every` seconds, and never again once the schema was found current. While the
    database is unreachable the request goes on (the routing checks may answer from the
    last known state; the rest answer the database's own 503)."""

    def __init__(self, pending: Callable[[], list[str]], recheck_every: float = 2.0) -> None:
        self.pending = pending
        self.recheck_every = recheck_every
        self._ready = False
        self._missing: list[str] = []
        self._checked_at = -recheck_every
        self._said = False
        self._lock = threading.Lock()

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self._ready or req.path in HEALTH_PATHS:
            return
        if self._check():
            raise APIError(
                503,
                "SERVICE_UNAVAILABLE",
                "The database schema is not migrated yet (run manage.py migrate); safe to retry.",
                headers={"Retry-After": "5"},
            )

    def _check(self) -> bool:
        """Whether migrations are missing (as of the last look, at most `recheck_every` old)."""
        with self._lock:
            if time.monotonic() - self._checked_at < self.recheck_every:
                return bool(self._missing)
            self._checked_at = time.monotonic()
            try:
                missing = self.pending()
            except UNREACHABLE:
                return False  # nothing known; the database's own errors answer
            self._missing = missing
            if not missing:
                self._ready = True
                if self._said:
                    log.warning("database schema migrated: serving")
                return False
            if not self._said:
                self._said = True
                log.warning(
                    "database schema lacks %d migration(s) of this release (%s): run manage.py migrate; "
                    "answering 503 until it is migrated",
                    len(missing),
                    ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else ""),
                )
            return True
