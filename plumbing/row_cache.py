"""Per-process cache of token authorization rows (and of clinics' routing schedules,
schedules.py), kept current by PostgreSQL NOTIFY.

A second cache of the same kind holds the clinics' open requests by caller
(`has-active-request`, resources/switchboard.py) on a channel and a counter row of its own
(`REQUESTS_CHANNEL`, migration 54): requests are made and resolved all day, and their
changes must not empty the token rows. Its triggers count as a transaction commits, once
per transaction (deferred), so the counter's row lock never makes one writer of requests
wait for another's long transaction. What follows holds for both.

Every authenticated request needs its token, its clinic and whether the one covers the
other. Asking PostgreSQL each time cost a round trip per request, which under load took
more CPU, in the web process and in the database together, than the rest of a call
hand-off. So each web process keeps the rows it has read, and the database says when
they may have changed: triggers (migration 6) NOTIFY `auth_changed` in every transaction
that changes a token, a token's clinics or a clinic (migration 8: also office hours,
calendars and vacations), and the notification reaches this
process's listening connection when that transaction commits.

The listening connection is its counter thread's alone (`_serve`): it waits on the
connection, and when a notification arrives it counts the changes (below) and empties the
cache. A lookup never touches the database's network: it looks whether something arrived
on that connection (a `select` with no timeout) or a count is due, and if so asks the
counter thread and waits for its round at most `count_wait` (0.2 s). So a revocation is
honoured by the first request that starts after its notification arrived, well under a
millisecond after the commit on one machine (tests/test_row_cache.py measures it), and a
count that does not come in time (a network lost without a word, the counter locked)
makes the lookups answer from the last known state (below) at once until it comes, a
change announced meanwhile emptying that state. A row read before a change but stored
after its count is refused by the generation check. While the listening connection is
down nothing is cached and every request asks the database; `ttl` bounds how long a row
lives even if the connection died without a word.

A pooler in transaction mode (PgBouncer) accepts LISTEN and never delivers a
notification. So the same triggers also count every change in `cache_generation`
(migration 10), and every `poll_every` seconds (1 s) the counter thread reads that counter
on the listening connection: behind such a pooler a change is honoured within a second
of its commit, at the cost of one small query a second per process. A notification
makes the counter thread read the counter at once, and the counter decides: a change
reported both ways is acted on once (`_count_changes`, `_apply_count`). SQLite (the embedded
default) has no NOTIFY and gets no cache: its lookups are local.

Through a database outage (`read`): a lookup whose database read fails because the
database is unreachable is answered from the last state this process knew, if that state
was confirmed current (listening, nothing announced since) at most `max_stale` seconds
ago. So the routing checks and their token check go on answering while the database is
down, as their rows cannot change then anyway; each such answer is counted
(`clinic_last_known_answers_total`) and the outage is logged when it starts, while it
lasts and when it ends. Every database read of a lookup waits at most `deadline`
(ROUTING_DEADLINE_SECONDS; plumbing/database.py, `within`), and so does `guarded`, for a
routing read no memory answers (`has-active-request`): past it, the database counts as
unreachable. After a failed read the next reads skip the database for `PROBE_EVERY`
seconds, so that a database that does not answer costs one request a second a deadline,
not every request.
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
from plumbing.database import UNREACHABLE, DeadlinePassed, is_postgresql, time_left, within
from plumbing.descriptors import readable
from plumbing.pg_listen import Listener
from plumbing.wakeup import WakeUp

log = logging.getLogger(__name__)

CHANNEL = "auth_changed"
#: The open requests' callers (`has-active-request`): their own channel and counter row
#: (migration 54), so that a request made or resolved leaves the token rows cached.
REQUESTS_CHANNEL = "requests_changed"
#: Each channel's row in `cache_generation`.
GENERATIONS = {CHANNEL: 1, REQUESTS_CHANNEL: 2}
GENERATION_SQL = "SELECT n FROM cache_generation WHERE id = %s"
RECONNECT_EVERY = 5.0  # seconds between attempts to re-establish the listening connection
PROBE_EVERY = 1.0  # seconds between database reads while it is unreachable
OUTAGE_LOG_EVERY = 60.0  # seconds between the log lines of a lasting outage
#: How old a last known state may be to answer from it while the database is unreachable
#: (the default; create_app passes ROUTING_LAST_KNOWN_SECONDS).
MAX_STALE = 600.0
#: Seconds a lookup's database read may take before the lookup answers from the last known
#: state (the default; create_app passes ROUTING_DEADLINE_SECONDS).
DEADLINE = 0.6
#: Seconds a lookup waits for the change count it asked the counter thread for.
COUNT_WAIT = 0.2

_caches: weakref.WeakSet[RowCache] = weakref.WeakSet()
Row = TypeVar("Row", bound=tuple)
T = TypeVar("T")


def changed_here(channel: str = CHANNEL) -> None:
    """Forget every row cached in this process from `channel`'s tables at once: for a
    change this process just committed, whose notification may still be on its way to the
    listening connection. Writes through the models call it themselves (`Watched`)."""
    counter = GENERATIONS[channel]
    for cache in list(_caches):
        if cache._counter == counter:  # it caches rows of those tables
            cache.invalidate()


def requests_changed_here() -> None:
    changed_here(REQUESTS_CHANNEL)


@dataclass(frozen=True)
class Watched:
    """On a model's Meta (`row_cache = Watched(...)`): which writes to its table change
    what the caches hold, the writes its NOTIFY trigger announces to the other processes
    (migrations 6, 8 and 10). The database runs `changed_here` once such a write commits
    (plumbing/database.py), so this process's next lookup reads the change whoever wrote
    it; no writer has to remember to.

    `columns`: an UPDATE matters only when it sets one of these (None: any UPDATE);
    `inserts`: whether an INSERT matters (a new token is not cached yet: it does not);
    `channel`: the caches it changes (those of `channel`'s tables)."""

    columns: frozenset[str] | None = None
    inserts: bool = True
    channel: str = CHANNEL

    def hook_for(self, query: object) -> Callable[[], None] | None:
        """`changed_here` of the channel when `query` (an INSERT, UPDATE or DELETE of the
        model) matters."""
        hook = changed_here if self.channel == CHANNEL else requests_changed_here
        if isinstance(query, pw.Insert):
            return hook if self.inserts else None
        if isinstance(query, pw.Update):
            if self.columns is not None:
                written = {getattr(field, "name", str(field)) for field in getattr(query, "_update", {})}
                if not written & self.columns:
                    return None
            return hook
        return hook if isinstance(query, pw.Delete) else None


class RowCache:
    def __init__(
        self,
        connect: Callable[[], Any] | None,
        *,
        ttl: float = 60.0,
        max_entries: int = 10_000,
        poll_every: float = 1.0,
        max_stale: float = MAX_STALE,
        deadline: float = DEADLINE,
        count_wait: float = COUNT_WAIT,
        clock: Callable[[], float] = time.monotonic,
        recorder: metrics.Recorder | None = None,
        channel: str = CHANNEL,
        counter: int | None = None,
    ) -> None:
        self._connect = connect
        self.channel = channel  # what it listens on
        self._counter = GENERATIONS[channel] if counter is None else counter  # its row in cache_generation
        self._name = "auth cache" if channel == CHANNEL else f"{channel} cache"
        self.recorder = recorder  # the answers given from the last known state, counted
        self.ttl = ttl
        self.max_stale = max_stale
        self.deadline = deadline
        self._database: pw.Database | None = None
        self.poll_every = poll_every
        self._poll_at = 0.0
        self._counted: int | None = None  # the last cache_generation read
        self._recount = False  # a new listening connection has not counted yet
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        # The counter thread (`_serve`) counts the changes; lookups ask it (`_ask`) and
        # wait for its round (`_counted_cv`, `_rounds`) at most `count_wait` seconds.
        self.count_wait = count_wait
        self._counted_cv = threading.Condition(self._lock)
        self._rounds = 0
        self._counting = False
        self._ask = WakeUp()  # replaced by each listening connection's own
        self._ask.close()
        self._announced = False  # a notification read, its count not applied yet
        self._stalled = False  # a count asked for did not come in time
        self._stalled_since = 0.0
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
            application_name="auth-cache listener"
            if options.get("channel", CHANNEL) == CHANNEL
            else "requests-cache listener",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
        made = cls(connect, **options)
        made._database = database
        return made

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
        if self._stalled or self._skipping_database():
            known = self._last_known(key, lookup)
            if known is not None:
                return cast(Row, known)
        try:
            row = self._bounded(load)
        except UNREACHABLE:
            known = self._last_known(key, lookup)
            if known is None:
                raise
            return cast(Row, known)
        if row is not None and (keep is None or keep(row)):
            self.put(key, row, generation)
        return row

    def current(self, key: Hashable, load: Callable[[], T]) -> T:
        """The value for `key` as the database has it now: from memory while nothing was
        announced since it was read, else `load()` (a database read) within `deadline`,
        then kept. Never the last known state: like `guarded`, `DeadlinePassed` past the
        deadline, and at once while the database is found unreachable."""
        cached, generation = self.get(key)
        if cached is not None:
            return cast(T, cached[0])  # what `load` made for this key
        value = self.guarded(load)
        self.put(key, (value,), generation)
        return value

    def guarded(self, work: Callable[[], T]) -> T:
        """`work()`, a database read on the routing path that no memory can answer
        (`has-active-request`), within `deadline` seconds: `DeadlinePassed` past it, and
        at once while the database is found unreachable (one read per `PROBE_EVERY` tries
        it). Its failures and successes tell the lookups' reachability too."""
        if self._connect is None:
            return work()
        if self._skipping_database():
            raise DeadlinePassed("the database was unreachable a moment ago")
        return self._bounded(work)

    def _bounded(self, work: Callable[[], T]) -> T:
        """`work()` within `deadline`; an unreachable database (or one past the deadline) noted."""
        try:
            done = within(self.deadline, work, self._database, here=True)
        except UNREACHABLE as exc:
            self._unreachable(exc)
            raise
        self._reachable()
        return done

    @property
    def database_unreachable(self) -> bool:
        """Whether the last database read of a lookup failed (the database unreachable),
        or the change count is late (its network lost, or the database stalled)."""
        return self._unreachable_since is not None or self._stalled

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
        """Whether the rows are current: listening, and every change announced or due to
        be counted is counted. False while not listening, and while a count is late (the
        database slow or its network lost: `read` then answers from the last known state).
        Holds the lock; waits, releasing it, at most `count_wait` seconds for a count."""
        listener = self._listener
        if listener is None or listener.inherited:
            if listener is not None:  # forked: the socket is the parent's; neither use nor close it
                self._inherited, self._listener = listener, None
                self._invalidate()
            self._start_listening()
            return False
        # Something on the connection: a notification (or the server's goodbye), unless the
        # counter thread is counting, whose answer it then is (asking for another count on
        # each answer would keep it counting for ever under load); a notification that
        # comes with that answer is counted in the same round (`_count_changes`).
        arrived = self._announced or (not self._counting and bool(readable([listener.conn], 0)))
        if self._stalled:
            if arrived:  # a change (or the server's goodbye) waits behind the late count
                self._invalidate(changed=True)
            return False
        if arrived or self._clock() >= self._poll_at:
            # The counter thread counts; a lookup waits for a round that began after it asked.
            wanted = self._rounds + (2 if self._counting else 1)
            self._ask.set()
            ends = time.monotonic() + time_left(self.count_wait)
            while self._rounds < wanted and self._listener is listener:
                left = ends - time.monotonic()
                if left <= 0:
                    self._stall(listener)
                    return False
                self._counted_cv.wait(left)
            if self._listener is not listener or self._stalled:
                return False
        self._confirmed[self._epoch] = self._clock()
        return True

    def _stall(self, listener: Listener) -> None:
        """The count asked for did not come within `count_wait`: the database does not
        answer its listening connection. Lookups answer from the last known state until a
        count comes, and a change announced meanwhile empties that state. Holds the lock."""
        if self._announced or readable([listener.conn], 0):
            self._invalidate(changed=True)
        if self._stalled:
            return  # said by the lookup that found it late first
        self._stalled = True
        self._stalled_since = time.monotonic()
        log.warning(
            "%s: the change count did not come within %.2f s; answering from the last known state",
            self._name,
            self.count_wait,
        )

    def _listening_on(self, listener: Listener) -> bool:
        with self._lock:
            return self._listener is listener

    def _count_round(self, listener: Listener) -> bool:
        """One round of the counter thread (`_serve`): count and apply; False once the
        connection is lost or the cache stopped listening on it."""
        with self._lock:
            if self._listener is not listener:
                return False
            self._counting = True
        try:
            notified = listener.wait(0)  # notices a lost connection too
            if notified:
                with self._lock:
                    self._announced = True
            counted, notified = self._count_changes(listener, notified=notified)
        except pg_listen.LOST as exc:
            with self._lock:
                if self._listener is listener:
                    log.warning(
                        "%s: listening connection lost (%s); reading rows from the database",
                        self._name,
                        type(exc).__name__,
                    )
                    if self._announced or listener.notified_before_loss:
                        self._invalidate(changed=True)  # a change announced in the very read that failed
                    self._drop()
                self._counting = False
                self._counted_cv.notify_all()
            return False
        with self._lock:
            self._counting = False
            if self._listener is not listener:
                return False
            self._apply_count(counted, notified)
            self._counted_cv.notify_all()
        return True

    def _count_changes(self, listener: Listener, *, notified: bool) -> tuple[int | None, bool]:
        """The change counter (and whether a notification came with it): read on the
        counter thread, without the lock.

        The counter decides, the notifications only say when to look: one change is
        acted on once, whichever of the two reports it first. A notification is sent to
        this connection only once its transaction is visible, and before the server reads
        the next query (PostgreSQL sends pending notifications while it waits for a
        command), so every notification read before the count is counted in it. Counting
        only on the poll, a change came twice: by its notification, and again by the next
        poll's moved counter."""
        conn = listener.conn
        try:
            counted = self._count(conn)
            # Notifications read with the answer were mostly sent before the query (counted),
            # but one sent just after it may have come in the same read: count again, which
            # covers both. Those that come with the last count stay for the next round.
            for _ in range(3):
                if not conn.notifies:
                    break
                conn.notifies.clear()
                notified = True
                counted = self._count(conn)
        except pg_listen.LOST:
            listener.notified_before_loss = listener.notified_before_loss or notified
            raise
        return counted, notified

    def _apply_count(self, counted: int | None, notified: bool) -> None:
        """Invalidate when the change counter moved since the last count. Holds the lock."""
        if counted != self._counted or (notified and counted is None):
            self._invalidate(changed=notified or self._announced or self._counted is not None)
        elif self._recount:
            # The first count on a new listening connection, the same as the last one seen:
            # nothing changed while nobody listened, so the last known rows are current again.
            self._known = {key: (known, self._epoch) for key, (known, _) in self._known.items()}
        self._counted, self._recount = counted, False
        self._announced = False
        if self._stalled:
            log.warning(
                "%s: the change count came again after %.1f s", self._name, time.monotonic() - self._stalled_since
            )
        self._stalled = False
        self._rounds += 1
        self._poll_at = self._clock() + self.poll_every
        self._confirmed[self._epoch] = self._clock()

    def _count(self, conn: Any) -> int | None:
        with conn.cursor() as cur:
            cur.execute(GENERATION_SQL, (self._counter,))
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
        threading.Thread(target=_listen, args=(weakref.ref(self),), name="auth-cache-listen", daemon=True).start()

    def _listen_failed(self, exc: BaseException) -> None:
        log.warning(
            "%s: cannot listen for changes (%s); retrying in %.0f s",
            self._name,
            type(exc).__name__,
            RECONNECT_EVERY,
        )
        with self._lock:
            self._connecting = False
            self._retry_at = self._clock() + RECONNECT_EVERY

    def _listening(self, listener: Listener) -> WakeUp:
        """Listen on `listener` from now on; the wake-up lookups ask the counter with."""
        ask = WakeUp()
        with self._lock:
            self._listener, self._connecting = listener, False
            self._ask = ask
            self._epoch += 1  # rows read from now on are confirmed by this connection
            referenced = {epoch for _, epoch in self._known.values()}
            self._confirmed = {epoch: at for epoch, at in self._confirmed.items() if epoch in referenced}
            self._recount = True
            self._stalled = self._announced = False
            self._poll_at = 0.0  # count at once: whether anything changed while nobody listened
            self._invalidate()  # changes made while nobody listened may have been missed
        return ask

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
        """Stop listening (the counter thread, woken, closes the connection: it may be
        waiting on it). Holds the lock."""
        self._listener = None
        self._retry_at = self._clock() + RECONNECT_EVERY
        self._epoch += 1  # the lost connection's rows keep the moment it last confirmed them
        self._stalled = self._announced = False
        self._invalidate()
        self._ask.set()
        self._counted_cv.notify_all()

    def close(self) -> None:
        with self._lock:
            if self._listener is not None and not self._listener.inherited:
                self._drop()


def _listen(ref: weakref.ReferenceType[RowCache]) -> None:
    """The counter thread: connect and LISTEN, then count (`_serve`) until the connection
    is lost; a lost one is opened again by the next lookup after `RECONNECT_EVERY`
    seconds. It holds its cache weakly, between rounds: a cache nobody uses any more (an
    app a test built) is collected, and its thread then closes the connection and ends."""
    cache = ref()
    if cache is None or cache._connect is None:
        return
    connect, channel = cache._connect, cache.channel
    del cache
    try:
        listener = Listener.open(connect, channel)
    except (psycopg2.Error, OSError) as exc:
        cache = ref()
        if cache is not None:
            cache._listen_failed(exc)
        return
    cache = ref()
    if cache is None:
        listener.close()
        return
    ask = cache._listening(listener)
    del cache
    _serve(ref, listener, ask)


def _serve(ref: weakref.ReferenceType[RowCache], listener: Listener, ask: WakeUp) -> None:
    """The counter thread's loop: count the changes when a notification arrives, when a
    lookup asks, and every `poll_every` seconds, and apply them (`_count_round`), until
    the connection is lost or the cache stops listening on it or is gone. The only user
    of the listening connection: a lookup never waits on the database's network, only
    (at most `count_wait`) on this."""
    try:
        while True:
            cache = ref()
            if cache is None or not cache._listening_on(listener):
                break
            poll_every = cache.poll_every
            del cache
            readable([listener.conn, ask], poll_every)
            ask.clear()
            cache = ref()
            if cache is None or not cache._count_round(listener):
                break
            del cache
    finally:
        listener.close()
        ask.close()
