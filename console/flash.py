"""One-time messages from a write to the page it leads to (post/redirect/get): the answer
to a POST is a 303, so whatever the next page must say once (a new API key's secret) waits
here, bound to the session, until that page takes it.

Kept in Redis under the session's id for a few minutes, encrypted with a key derived from
SECRET_KEY and the session's cookie token, which the server never stores: neither Redis nor
the database alone can read it back. Taken with GET and DEL in one transaction, so it is
shown once: a reload of the page finds nothing."""

from __future__ import annotations

import json
from typing import Any

import redis

from plumbing import crypto
from plumbing.crypto import Keys

PREFIX = "console:flash:"
_LABEL = "console-flash"


class Flash:
    def __init__(self, client: redis.Redis, secret_key: Keys, ttl_seconds: int = 600) -> None:
        self.client = client
        self.secret_key = secret_key
        self.ttl = ttl_seconds

    def bound(self, cookie_token: str, session_id: str) -> SessionFlash:
        return SessionFlash(self, cookie_token, session_id)


class SessionFlash:
    """A session's one-time messages, one per page name."""

    def __init__(self, flash: Flash, cookie_token: str, session_id: str) -> None:
        self._flash = flash
        self._binding = cookie_token
        self._session_id = session_id

    def _key(self, page: str) -> str:
        return f"{PREFIX}{self._session_id}:{page}"

    def put(self, page: str, message: dict[str, Any]) -> None:
        """Leave `message` for the next view of `page`. Raises redis.RedisError."""
        f = self._flash
        sealed = crypto.encrypt_bound(json.dumps(message), f.secret_key, self._binding, _LABEL)
        f.client.set(self._key(page), sealed, ex=f.ttl)

    def take(self, page: str) -> dict[str, Any] | None:
        """The message left for `page`, removed as it is read; None when there is none (or
        it cannot be read: another session's, or Redis unreachable)."""
        f = self._flash
        try:
            with f.client.pipeline(transaction=True) as pipe:
                pipe.get(self._key(page))
                pipe.delete(self._key(page))
                sealed, _ = pipe.execute()
        except redis.RedisError:
            return None
        if sealed is None:
            return None
        try:
            return json.loads(crypto.decrypt_bound(sealed.decode(), f.secret_key, self._binding, _LABEL))
        except crypto.InvalidToken:
            return None
