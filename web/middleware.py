"""The web process's middleware, in the order `create_app` installs it, and the one rule
for reading a body that declares no length."""
from __future__ import annotations

import io
import urllib.parse

import falcon

from plumbing.database import db
from storage import Readable
from web.errors import APIError


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
        try:
            from gevent import monkey, sleep
        except ImportError:
            return
        if monkey.is_module_patched("socket"):
            self._yield = sleep

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self._yield is not None:
            self._yield(0)


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


class BodyLimit:
    """Refuse a body over the limit without reading it whole.

    A declared length over the limit is refused before a byte is read. A body without
    one (chunked transfer encoding) is read here, at most limit + 1 bytes, and handed
    on with its length, so the JSON handler sees an ordinary body; Falcon alone would
    read such a body as empty.

    Not for `/storage/` (local backend uploads): those stream to disk under their own
    cap, `LocalStorage.max_upload_bytes`, checked after the signature, before reading.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.path.startswith("/storage/"):
            return
        if req.content_length is not None:
            if req.content_length > self.max_bytes:
                raise APIError(413, "PAYLOAD_TOO_LARGE", f"Body over {self.max_bytes} bytes.")
            return
        if req.get_header("Transfer-Encoding") is None:
            return  # no body at all
        require_known_end(req)
        body = read_at_most(req.stream, self.max_bytes + 1)
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

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool) -> None:
        if not db.is_closed():
            db.close()
