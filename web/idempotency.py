"""`Idempotency-Key` on the document writes: a client retries a write blindly with the
same key and never makes a duplicate (the practice of Stripe's API and of the IETF
HTTPAPI draft "The Idempotency-Key HTTP Header Field").

A resource names its methods that take a key, with the operation's name, in
`idempotency_key` (`{"POST": "createPatientRequest"}`); without the header nothing changes.
With it, per token and operation:

- the first request runs; the write hands its answer to `req.context.remember` inside
  its own transaction (`answering`: the write's `then`), which stores it with the key there: the
  write and the stored answer commit together or not at all. A request that fails
  before writing (validation, any 4xx, a 5xx whose transaction rolled back) stores
  nothing, and its retry runs again;
- a later request with the key and the same body (path and canonical JSON, hashed) is
  answered the stored status and body, byte for byte, with `Idempotent-Replayed: true`
  (an upload link's replay presigns a fresh URL for the same `fileHash`: a resource
  with a `replay` method rebuilds its answer from what was stored);
- the key with another body: 422 IDEMPOTENCY_KEY_REUSED;
- the key while its first request is still running: 409 IDEMPOTENCY_KEY_IN_PROGRESS
  with Retry-After. "Running" is a short Redis claim (`LOCK_SECONDS`, longer than any
  request lives); with Redis unreachable there is no claim, and the unique key in the
  database still lets one write commit: the other rolls back and replays its answer.

Answers are kept `IDEMPOTENCY_KEY_HOURS` (at least 24); the workers purge them after.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ParamSpec

import falcon
import redis

from models import IdempotencyKey
from plumbing import strict_json
from web.errors import APIError

log = logging.getLogger(__name__)
P = ParamSpec("P")

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
# 1-255 printable ASCII characters (space included), as the integrator docs say.
KEY_PATTERN = r"^[\x20-\x7e]{1,255}$"
_KEY = re.compile(r"[\x20-\x7e]{1,255}")
# A claim outlives any request (gunicorn's timeout ends one after 30 s); a killed
# worker's claim frees itself after this, and its rolled-back write stored nothing.
LOCK_SECONDS = 60
RETRY_AFTER_SECONDS = 1

# Give the claim back only if it is still ours (it may have expired and been taken).
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class KeyTaken(Exception):
    """Another request with the same key stored its answer while this one ran (possible
    only without the Redis claim): raised inside the write's transaction, which rolls
    back; the answer is then the other request's (`IdempotencyKeys.taken`)."""


@dataclasses.dataclass
class Pending:
    """A keyed request that runs: what its answer is stored under."""

    token_id: Any
    operation: str
    key: str
    fingerprint: str
    resource: object
    params: dict[str, Any]
    claim: str | None = None  # the Redis claim's name, when taken
    claim_value: str = ""
    answer: bytes | None = None  # the stored body, once the write stored it


def fingerprint(method: str, path: str, body: bytes) -> str:
    """SHA-256 of the request as the key binds it: method, path and the body as
    canonical JSON (key order and spacing do not matter); a body that is not JSON, as
    sent."""
    try:
        canonical = json.dumps(
            strict_json.loads(body.decode("utf-8")), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    except ValueError:
        canonical = body
    digest = hashlib.sha256()
    for part in (method.encode(), path.encode(), canonical):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def _body_of(req: falcon.Request) -> bytes:
    """The request's body as BodyLimit left it in memory, without consuming it."""
    stream = req.env.get("wsgi.input")
    getvalue = getattr(stream, "getvalue", None)
    return getvalue() if callable(getvalue) else b""


def forget(answer: Any) -> None:
    """`req.context.remember` of a request without an Idempotency-Key: nothing to store."""


def answering(req: falcon.Request, shape: Callable[P, Any]) -> Callable[P, Any]:
    """The `then` a write is handed by its resource: the API's answer, shaped from what the
    write wrote inside its transaction and stored there for the request's Idempotency-Key
    (a retry replays it); the write returns it."""

    def answer(*args: P.args, **kwargs: P.kwargs) -> Any:
        shaped = shape(*args, **kwargs)
        req.context.remember(shaped)
        return shaped

    return answer


class IdempotencyKeys:
    """The middleware; installed after BodyLimit (the body is in memory by then)."""

    def __init__(self, client: redis.Redis, hours: int, clock: Callable[[], datetime]) -> None:
        self.client = client
        self.lifetime = timedelta(hours=hours)
        self.clock = clock
        self._release = client.register_script(_RELEASE)

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object, params: dict) -> None:
        req.context.remember = forget
        operation = (getattr(resource, "idempotency_key", None) or {}).get(req.method)
        key = req.get_header(HEADER)
        if operation is None or key is None:
            return
        if not _KEY.fullmatch(key):
            raise APIError(
                400, "IDEMPOTENCY_KEY_INVALID", f"{HEADER}: 1 to 255 printable ASCII characters are expected."
            )
        pending = Pending(
            token_id=req.context.token.id,
            operation=operation,
            key=key,
            fingerprint=fingerprint(req.method, req.path, _body_of(req)),
            resource=resource,
            params=params,
        )
        self._claim(pending)
        req.context.idempotency = pending  # from here process_response gives the claim back
        stored = IdempotencyKey.find(pending.token_id, operation, key, self.clock())
        if stored is not None:
            self._give_back(pending)
            self._replay(req, resp, pending, stored)
            resp.complete = True
            return
        req.context.remember = lambda answer: self._store(pending, resp, answer)

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        pending: Pending | None = getattr(req.context, "idempotency", None)
        if pending is None:
            return
        self._give_back(pending)
        if req_succeeded and pending.answer is not None and not hasattr(pending.resource, "replay"):
            resp.data = pending.answer  # the first answer is the very bytes a replay sends

    def taken(self, req: falcon.Request, resp: falcon.Response, ex: KeyTaken, params: dict) -> None:
        """The error handler of `KeyTaken`: the write rolled back; answer as the request
        that stored its answer first (a replay), or 409 if that one is gone meanwhile."""
        pending: Pending = req.context.idempotency
        stored = IdempotencyKey.find(pending.token_id, pending.operation, pending.key, self.clock())
        if stored is None:
            raise _in_progress()
        self._replay(req, resp, pending, stored)

    # --- the parts --------------------------------------------------------------------

    def _claim(self, pending: Pending) -> None:
        name = "idempotency:{}:{}".format(
            pending.token_id, hashlib.sha256(f"{pending.operation}\0{pending.key}".encode()).hexdigest()
        )
        value = secrets.token_hex(8)
        try:
            claimed = self.client.set(name, value, nx=True, ex=LOCK_SECONDS)
        except redis.RedisError as exc:
            # No claim: a concurrent retry may run too, and the unique key decides (KeyTaken).
            log.warning("idempotency claim skipped, Redis unavailable (%s)", type(exc).__name__)
            return
        if not claimed:
            raise _in_progress()
        pending.claim, pending.claim_value = name, value

    def _give_back(self, pending: Pending) -> None:
        if pending.claim is None:
            return
        name, pending.claim = pending.claim, None
        try:
            self._release(keys=[name], args=[pending.claim_value])
        except redis.RedisError as exc:
            log.warning("idempotency claim not released, Redis unavailable (%s); it expires", type(exc).__name__)

    def _store(self, pending: Pending, resp: falcon.Response, answer: Any) -> None:
        """`remember`: runs inside the write's transaction."""
        body = resp.options.media_handlers[falcon.MEDIA_JSON].serialize({"data": answer}, falcon.MEDIA_JSON)
        now = self.clock()
        stored = IdempotencyKey.store(
            token_id=pending.token_id,
            operation=pending.operation,
            key=pending.key,
            fingerprint=pending.fingerprint,
            status=200,
            answer=body,
            now=now,
            expires_at=now + self.lifetime,
        )
        if not stored:
            raise KeyTaken()
        pending.answer = body

    def _replay(self, req: falcon.Request, resp: falcon.Response, pending: Pending, stored: IdempotencyKey) -> None:
        if stored.fingerprint != pending.fingerprint:
            raise APIError(
                422,
                "IDEMPOTENCY_KEY_REUSED",
                f"This {HEADER} was used for a request with another body or path; use a new key for a new request.",
            )
        resp.status = falcon.code_to_http_status(stored.status)
        resp.set_header(REPLAYED, "true")
        replay = getattr(pending.resource, "replay", None)
        if replay is not None:
            resp.media = {"data": replay(req, json.loads(bytes(stored.answer))["data"], **pending.params)}
        else:
            resp.content_type = falcon.MEDIA_JSON
            resp.data = bytes(stored.answer)


def _in_progress() -> APIError:
    return APIError(
        409,
        "IDEMPOTENCY_KEY_IN_PROGRESS",
        f"A request with this {HEADER} is still being processed; retry after the Retry-After seconds.",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
