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
without blocking (a `poll` with no timeout), so a revocation is honoured by the first
request that starts after its notification arrived, well under a millisecond after the
commit on one machine (tests/test_row_cache.py measures it). A row read before a change
but stored after its notification was drained is refused by the generation check. While
the listening connection is down nothing is cached and every request asks the database;
`ttl` bounds how long a row lives even if the connection died without a word.

A pooler in transaction mode (PgBouncer) accepts LISTEN and never delivers a
notification. So the same triggers also count every change in `cache_generation`
(migration 10), and at most every `poll_every` seconds (1 s) a lookup reads that counter
on the listening connection: behind such a pooler a change is honoured within a second
of its commit, at the cost of one small query a second per process. A notification
makes the next lookup read the counter at once, and the counter decides: a change
reported both ways is acted on once (`_count_changes`). SQLite (the embedded
default) has no NOTIFY and gets no cache: its lookups are local.

Through a database outage (`read`): a lookup whose database read fails because the
database is unreachable is answered from the last state this process knew, if that state
was confirmed current (listening, nothing announced since) at most `max_stale` seconds
ago. So the routing checks and their token check go on answering while the database is
down, as their rows cannot change then anyway; each such answer is counted
(`clinic_last_known_answers_total`) and the outage is logged when it starts, while it
lasts and when it ends. After a failed read the next reads skip the database for
`PROBE_EVERY` seconds, so that a database that does not even refuse connections (a lost
network) costs one request a second a connect timeout, not every request.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import peewee as pw
import psycopg2

from plumbing import metrics, pg_listen
from plumbing.database import UNREACHABLE, is_postgresql
from plumbing.pg_listen import Listener

log = logging.getLogger(__name__)

CHANNEL = "auth_changed"
GENERATION_SQL = "SELECT n FROM cache_generation WHERE id = 1"
RECONNECT_EVERY = 5.0  # seconds between attempts to re-establish the listening connection
PROBE_EVERY = 1.0  # seconds between database reads while it is unreachable
OUTAGE_LOG_EVERY = 60.0  # seconds between the log lines of a lasting outage
#: How old a last known state may be to answer from it while the database is unreachable
#: (the default; create_app passes ROUTING_LAST_KNOWN_SECONDS).
MAX_STALE = 600.0

_caches: weakref.WeakSet[RowCache] = weakref.WeakSet()
Row = TypeVar("Row", bound=tuple)


def changed_here() -> None:
    """Forget every cached row in this process at once: for a change this process just
    committed, whose notification may still be on its way to the listening connection.
    Writes through the models call it themselves (`Watched`)."""
    for cache in list(_caches):
        cache.invalidate()


@dataclass(frozen=True)
class Watched:
    """On a model's Meta (`row_cache = Watched(...)`): which writes to its table change
    what the caches hold, the writes its NOTIFY trigger announces to the other processes
    (migrations 6, 8 and 10). The database runs `changed_here` once such a write commits
    (plumbing/database.py), so this process's next lookup reads the change whoever wrote
    it; no writer has to remember to.

    `columns`: an UPDATE matters only when it sets one of these (None: any UPDATE);
    `inserts`: whether an INSERT matters (a new token is not cached yet: it does not)."""

    columns: frozenset[str] | None = None
    inserts: bool = True

    def hook_for(self, query: object) -> Callable[[], None] | None:
        """`changed_here` when `query` (an INSERT, UPDATE or DELETE of the model) matters."""
        if isinstance(query, pw.Insert):
            return changed_here if self.inserts else None
        if isinstance(query, pw.Update):
            if self.columns is not None:
                written = {getattr(field, "name", str(field)) for field in getattr(query, "_update", {})}
                if not written & self.columns:
                    return None
            return changed_here
        return changed_here if isinstance(query, pw.Delete) else None


class RowCache:
    def __init__(
        self,
        connect: Callable[[], Any] | None,
        *,
        ttl: float = 60.0,
        max_entries: int = 10_000,
        poll_every: float = 1.0,
        max_stale: float = MAX_STALE,
        clock: Callable[[], float] = time.monotonic,
        recorder: metrics.Recorder | None = None,
    ) -> None:
        self._connect = connect
        self.recorder = recorder  # the answers given from the last known state, counted
        self.ttl = ttl
        self.max_stale = max_stale
        self.poll_every = poll_every
        self._poll_at = 0.0
        self._counted: int | None = None  # the last cache_generation read
        self._recount = False  # a new listening connection has not counted yet
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, tuple]] = {}
        self._generation = 0
        self._listener: Listener | None = None
        self._inherited: Listener | None = None
        self._connecting = False
        self._retry_at = 0.0
        # The last known state: key -> (row, listening epoch it was read in). An epoch is one
        # listening connection's life; `_confirmed` holds, per epoch, the last moment it was
        # seen healthy with nothing announced: each row was current then.
        self._known: dict[Hashable, tuple[tuple, int]] = {}
        self._epoch = 0
        self._confirmed: dict[int, float] = {}
        # The database's reachability, as the lookups found it.
        self._unreachable_since: float | None = None
        self._probe_at = 0.0
        self._outage_logged_at = 0.0
        self._stale_answers = 0
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
            if len(self._known) >= self.max_entries:
                self._known.clear()
            self._entries[key] = (self._clock(), row)
            self._known[key] = (row, self._epoch)

    def read(
        self,
        key: Hashable,
        load: Callable[[], Row | None],
        keep: Callable[[Row], bool] | None = None,
        *,
        lookup: str,
    ) -> Row | None:
        """The row for `key`: cached, else `load()` (a database read; None: no such row),
        kept when `keep(row)` says so (default: any row). When the read fails because the
        database is unreachable, the last known row if it is at most `max_stale` seconds
        old (counted under `lookup`, a short word: "token", "schedule"); else the read's
        error is raised."""
        cached, generation = self.get(key)
        if cached is not None:
            return cast(Row, cached)  # what `load` made for this key
        if self._connect is None:
            return load()
        if self._skipping_database():
            known = self._last_known(key, lookup)
            if known is not None:
                return cast(Row, known)
        try:
            row = load()
        except UNREACHABLE as exc:
            self._unreachable(exc)
            known = self._last_known(key, lookup)
            if known is None:
                raise
            return cast(Row, known)
        self._reachable()
        if row is not None and (keep is None or keep(row)):
            self.put(key, row, generation)
        return row

    @property
    def database_unreachable(self) -> bool:
        """Whether the last database read of a lookup failed (the database unreachable)."""
        return self._unreachable_since is not None

    def last_known_age(self) -> float | None:
        """Seconds since this process's last known state was last confirmed current (None:
        it knows nothing): what an answer from it would be as old as."""
        with self._lock:
            confirmed = [self._confirmed[epoch] for _, epoch in self._known.values() if epoch in self._confirmed]
            return self._clock() - max(confirmed) if confirmed else None

    def _skipping_database(self) -> bool:
        """While unreachable, one read per `PROBE_EVERY` tries the database; the others do not."""
        with self._lock:
            if self._unreachable_since is None:
                return False
            if self._clock() >= self._probe_at:
                self._probe_at = self._clock() + PROBE_EVERY
                return False
            return True

    def _last_known(self, key: Hashable, lookup: str) -> tuple | None:
        """The last known row for `key`, counted, if it was confirmed within `max_stale`."""
        with self._lock:
            found = self._known.get(key)
            confirmed = self._confirmed.get(found[1]) if found is not None else None
            if found is None or confirmed is None:
                return None
            age = self._clock() - confirmed
            if age > self.max_stale:
                if self._clock() - self._outage_logged_at >= OUTAGE_LOG_EVERY:
                    self._outage_logged_at = self._clock()
                    log.warning(
                        "database unreachable; the last known state is %.0f s old, over %.0f s: not answered from",
                        age,
                        self.max_stale,
                    )
                return None
            self._stale_answers += 1
            if self._clock() - self._outage_logged_at >= OUTAGE_LOG_EVERY:
                self._outage_logged_at = self._clock()
                log.warning(
                    "database unreachable: answering routing and token checks from the last known state, "
                    "%.0f s old (at most %.0f s); %d answer(s) so far",
                    age,
                    self.max_stale,
                    self._stale_answers,
                )
        if self.recorder is not None:
            self.recorder.count(metrics.LAST_KNOWN_ANSWERS, (lookup,))
        return found[0]

    def _unreachable(self, exc: BaseException) -> None:
        with self._lock:
            if self._unreachable_since is None:
                self._unreachable_since = self._clock()
                self._probe_at = self._clock() + PROBE_EVERY
                self._outage_logged_at = 0.0  # the first answer from memory says so at once
                log.warning("database unreachable for a lookup (%s)", type(exc).__name__)

    def _reachable(self) -> None:
        if self._unreachable_since is None:
            return
        with self._lock:
            if self._unreachable_since is None:
                return
            log.warning(
                "database reachable again after %.1f s; %d lookup(s) were answered from the last known state",
                self._clock() - self._unreachable_since,
                self._stale_answers,
            )
            self._unreachable_since = None
            self._stale_answers = 0

    def _sync(self) -> bool:
        """Apply the notifications that have arrived; False while not listening. Holds the lock."""
        if self._listener is None or self._listener.inherited:
            if self._listener is not None:  # forked: the socket is the parent's; neither use nor close it
                self._inherited, self._listener = self._listener, None
                self._invalidate()
            self._start_listening()
            return False
        try:
            notified = self._listener.wait(0)  # without blocking; notices a lost connection too
            if notified or self._clock() >= self._poll_at:
                self._count_changes(notified=notified)
        except pg_listen.LOST as exc:
            log.warning(
                "auth cache: listening connection lost (%s); reading tokens from the database", type(exc).__name__
            )
            if self._listener is not None and self._listener.notified_before_loss:
                self._invalidate(changed=True)  # a change announced in the very read that failed
            self._drop()
            return False
        self._confirmed[self._epoch] = self._clock()
        return True

    def _count_changes(self, *, notified: bool) -> None:
        """Invalidate when the change counter moved since the last count: on a
        notification, and every `poll_every` seconds for the changes a pooler's swallowed
        notifications would have announced. Holds the lock.

        The counter decides, the notifications only say when to look: one change is
        acted on once, whichever of the two reports it first. A notification is sent to
        this connection only once its transaction is visible, and before the server reads
        the next query (PostgreSQL sends pending notifications while it waits for a
        command), so every notification read before the count is counted in it. Counting
        only on the poll, a change came twice: by its notification, and again by the next
        poll's moved counter."""
        self._poll_at = self._clock() + self.poll_every
        assert self._listener is not None
        conn = self._listener.conn
        try:
            counted = self._count(conn)
            # Notifications read with the answer were mostly sent before the query (counted),
            # but one sent just after it may have come in the same read: count again, which
            # covers both. Those that come with the last count stay for the next lookup.
            for _ in range(3):
                if not conn.notifies:
                    break
                conn.notifies.clear()
                notified = True
                counted = self._count(conn)
        except pg_listen.LOST:
            if notified:  # a change was announced and the connection lost before its count
                self._invalidate(changed=True)
            raise
        if counted != self._counted or (notified and counted is None):
            self._invalidate(changed=notified or self._counted is not None)
        elif self._recount:
            # The first count on a new listening connection, the same as the last one seen:
            # nothing changed while nobody listened, so the last known rows are current again.
            self._known = {key: (known, self._epoch) for key, (known, _) in self._known.items()}
        self._counted, self._recount = counted, False

    @staticmethod
    def _count(conn: Any) -> int | None:
        with conn.cursor() as cur:
            cur.execute(GENERATION_SQL)
            row = cur.fetchone()
        return row[0] if row else None

    @property
    def changes_counted(self) -> int | None:
        """The change counter as this cache last read it (None: not yet, or no counter):
        its lookups have acted on every change up to this count."""
        return self._counted

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
            self._epoch += 1  # rows read from now on are confirmed by this connection
            referenced = {epoch for _, epoch in self._known.values()}
            self._confirmed = {epoch: at for epoch, at in self._confirmed.items() if epoch in referenced}
            self._recount = True
            self._poll_at = 0.0  # count at once: whether anything changed while nobody listened
            self._invalidate()  # changes made while nobody listened may have been missed

    def invalidate(self) -> None:
        """Forget every row: they changed (this process wrote them)."""
        with self._lock:
            self._invalidate(changed=True)

    def _invalidate(self, *, changed: bool = False) -> None:
        """Forget the fresh rows; `changed`: a change is known, so the last known state
        is wrong too (without it, a change was only possible: a lost connection)."""
        self._entries.clear()
        self._generation += 1
        if changed:
            self._known.clear()
            self._confirmed = {self._epoch: self._confirmed[self._epoch]} if self._epoch in self._confirmed else {}

    def _drop(self) -> None:
        listener, self._listener = self._listener, None
        self._retry_at = self._clock() + RECONNECT_EVERY
        self._epoch += 1  # the lost connection's rows keep the moment it last confirmed them
        self._invalidate()
        if listener is not None:
            listener.close()

    def close(self) -> None:
        with self._lock:
            if self._listener is not None and not self._listener.inherited:
                self._drop()
