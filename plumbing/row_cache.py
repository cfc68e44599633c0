"""Per-process cache of token authorization rows (and of clinics' routing schedules,
schedules.py), kept current by PostgreSQL NOTIFY.

Every authenticated request needs its token, its clinic and whether the one covers the
other. Asking PostgreSQL each time cost a round trip per request, which under load took
more CPU, in the web process and in the database together, than the rest of a call
hand-off. So each web process keeps the rows it has read, and the database says when
they may have changed: triggers (migration 6) NOTIFY `auth_changed` in every transaction
that changes a token, a token's clinics or a clinic (migration 8: also office hours,
calendars and vacations), and the notification reaches this
process's listening connection when that transaction commits.

There is no listener thread to wait for: every lookup first drains that connection
without blocking (a `select` with no timeout), so a revocation is honoured by the first
request that starts after its notification arrived, well under a millisecond after the
commit on one machine (tests/test_row_cache.py measures it). A row read before a change
but stored after its notification was drained is refused by the generation check. While
the listening connection is down nothing is cached and every request asks the database;
`ttl` bounds how long a row lives even if the connection died without a word.

A pooler in transaction mode (PgBouncer) accepts LISTEN and never delivers a
notification. So the same triggers also count every change in `cache_generation`
(migration 10), and at most every `poll_every` seconds (1 s) a lookup reads that counter
on the listening connection: behind such a pooler a change is honoured within a second
of its commit, at the cost of one small query a second per process. SQLite (the embedded
default) has no NOTIFY and gets no cache: its lookups are local.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any, cast

import peewee as pw
import psycopg2

from plumbing import pg_listen
from plumbing.database import is_postgresql
from plumbing.pg_listen import Listener

log = logging.getLogger(__name__)

CHANNEL = "auth_changed"
GENERATION_SQL = "SELECT n FROM cache_generation WHERE id = 1"
RECONNECT_EVERY = 5.0  # seconds between attempts to re-establish the listening connection

_caches: weakref.WeakSet[RowCache] = weakref.WeakSet()


def changed_here() -> None:
    """Forget every cached row in this process at once: for a change this process just
    committed, whose notification may still be on its way to the listening connection."""
    for cache in list(_caches):
        cache.invalidate()


class RowCache:
    def __init__(
        self,
        connect: Callable[[], Any] | None,
        *,
        ttl: float = 60.0,
        max_entries: int = 10_000,
        poll_every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect = connect
        self.ttl = ttl
        self.poll_every = poll_every
        self._poll_at = 0.0
        self._counted: int | None = None  # the last cache_generation read
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, tuple]] = {}
        self._generation = 0
        self._listener: Listener | None = None
        self._inherited: Listener | None = None
        self._connecting = False
        self._retry_at = 0.0
        _caches.add(self)

    @classmethod
    def for_database(cls, database: pw.Database, **options: Any) -> RowCache:
        """A cache listening on `database` when it is PostgreSQL; a disabled one otherwise."""
        if not is_postgresql(database):
            return cls(None, **options)
        # The URL's own parameters (host, sslmode, ...), with ours on top; keepalives notice
        # a connection that died silently, `ttl` covers the rest.
        connect = pg_listen.connector(
            cast(pw.PostgresqlDatabase, database),  # is_postgresql said so
            application_name="auth-cache listener",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
        return cls(connect, **options)

    @property
    def enabled(self) -> bool:
        return self._connect is not None

    def get(self, key: Hashable) -> tuple[tuple | None, int]:
        """(the cached row or None, the generation to hand to `put` after reading it)."""
        if self._connect is None:
            return None, -1
        with self._lock:
            if not self._sync():
                return None, -1
            entry = self._entries.get(key)
            if entry is not None and self._clock() - entry[0] < self.ttl:
                return entry[1], self._generation
            return None, self._generation

    def put(self, key: Hashable, row: tuple, generation: int) -> None:
        """Keep `row`, read after `get` answered `generation`, unless a change was
        announced since (it may predate the change)."""
        with self._lock:
            if generation != self._generation or generation < 0 or self._listener is None:
                return
            if len(self._entries) >= self.max_entries:
                self._entries.clear()  # rare and cheap: the next requests read again
            self._entries[key] = (self._clock(), row)

    def _sync(self) -> bool:
        """Apply the notifications that have arrived; False while not listening. Holds the lock."""
        if self._listener is None or self._listener.inherited:
            if self._listener is not None:  # forked: the socket is the parent's; neither use nor close it
                self._inherited, self._listener = self._listener, None
                self._invalidate()
            self._start_listening()
            return False
        try:
            if self._listener.wait(0):  # without blocking; notices a lost connection too
                self._invalidate()
            if self._clock() >= self._poll_at:
                self._poll_generation()
        except pg_listen.LOST as exc:
            log.warning(
                "auth cache: listening connection lost (%s); reading tokens from the database", type(exc).__name__
            )
            self._drop()
            return False
        return True

    def _poll_generation(self) -> None:
        """Invalidate when the change counter moved since the last poll (the changes a
        pooler's swallowed notifications would have announced). Holds the lock."""
        self._poll_at = self._clock() + self.poll_every
        assert self._listener is not None
        with self._listener.conn.cursor() as cur:
            cur.execute(GENERATION_SQL)
            row = cur.fetchone()
        counted = row[0] if row else None
        if counted != self._counted:
            self._counted = counted
            self._invalidate()

    def _start_listening(self) -> None:
        # In the background: a request must not wait on a connect (or its timeout).
        if self._connecting or self._clock() < self._retry_at:
            return
        self._connecting = True
        threading.Thread(target=self._listen, name="auth-cache-listen", daemon=True).start()

    def _listen(self) -> None:
        assert self._connect is not None  # _listen runs only when there is one
        try:
            listener = Listener.open(self._connect, CHANNEL)
        except (psycopg2.Error, OSError) as exc:
            log.warning(
                "auth cache: cannot listen for token changes (%s); retrying in %.0f s",
                type(exc).__name__,
                RECONNECT_EVERY,
            )
            with self._lock:
                self._connecting = False
                self._retry_at = self._clock() + RECONNECT_EVERY
            return
        with self._lock:
            self._listener, self._connecting = listener, False
            self._invalidate()  # changes made while nobody listened were missed

    def invalidate(self) -> None:
        with self._lock:
            self._invalidate()

    def _invalidate(self) -> None:
        self._entries.clear()
        self._generation += 1

    def _drop(self) -> None:
        listener, self._listener = self._listener, None
        self._retry_at = self._clock() + RECONNECT_EVERY
        self._invalidate()
        if listener is not None:
            listener.close()

    def close(self) -> None:
        with self._lock:
            if self._listener is not None and not self._listener.inherited:
                self._drop()
