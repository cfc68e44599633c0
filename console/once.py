"""A console write happens once per form drawn: each form that writes carries a fresh token
of its one use (`once`, console/templates/console/_write.html), and the first POST with it
claims it in Redis, per session. A reload of the answer, a second click or a resubmitted
form brings the same token again: it does not write again, it is sent where the first was
sent (303 to the same page). A second POST that arrives while the first still runs waits
for it, bounded, so a double click lands on the page the first click's write led to.

A refused form (400: nothing written) gives its token back, so the corrected form can be
sent. Redis unreachable: the write goes ahead (the form's CSRF check still stands); a
repeated write is then possible, a lost one is not."""

from __future__ import annotations

import re
import time

import redis

PREFIX = "console:once:"
_PENDING = b"\0pending"  # a finished claim holds a console path, which starts with "/"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")
_POLL = 0.05


class OnceOnly:
    def __init__(self, client: redis.Redis, wait_seconds: float = 10.0) -> None:
        self.client = client
        self.wait = wait_seconds
        # A claim whose request died (a killed worker) frees itself after this; gunicorn's
        # timeout (30 s) ends any request before.
        self.pending_ttl = 60
        self.done_ttl = 86400  # a form left open for a day and sent again still does not write

    @staticmethod
    def key(session_id: str, token: str | None) -> str | None:
        """The claim's key, or None when the form carries no well-formed token."""
        return f"{PREFIX}{session_id}:{token}" if token and _TOKEN.fullmatch(token) else None

    def claim(self, key: str) -> tuple[str, str | None]:
        """("go", None): this request writes. ("done", path): an earlier one with the token
        wrote and was sent to `path`. ("busy", None): an earlier one is still writing after
        the wait. Raises redis.RedisError."""
        deadline = time.monotonic() + self.wait
        while True:
            if self.client.set(key, _PENDING, nx=True, ex=self.pending_ttl):
                return "go", None
            value = self.client.get(key)
            if value is not None and value != _PENDING:
                return "done", value.decode() if isinstance(value, bytes) else str(value)
            if value is None:
                continue  # given back (a refused form) or expired meanwhile: claim it again
            if time.monotonic() >= deadline:
                return "busy", None
            time.sleep(_POLL)

    def finish(self, key: str, location: str | None) -> None:
        """The claim's outcome: the page the write led to, or None to give the token back
        (nothing was written). Raises redis.RedisError."""
        if location:
            self.client.set(key, location, ex=self.done_ttl)
        else:
            self.client.delete(key)
