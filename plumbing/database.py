"""Database plumbing: the proxy the models bind to, opening PostgreSQL (pooled, checked
at check-out, cooperative under gevent) or SQLite, and running hand-written SQL on the
hot path (every authenticated request, every call hand-off).
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast
from urllib.parse import urlparse

import peewee as pw
import psycopg2
import psycopg2.extensions
from playhouse.db_url import parse as parse_db_url
from playhouse.pool import PoolConnection, PooledPostgresqlDatabase

from plumbing.descriptors import readable

# Peewee's pool keeps its connections' ages in real time (`time.time`): the check-out this
# module does beside it must stamp them on the same base, not on the service's clock.
_pool_clock = time.time


class DatabaseProxy(pw.DatabaseProxy):
    """The proxy the models bind to (Peewee's way to choose the database at run time),
    bound by the entry points: `bind_database` (`create_app`, a job run by hand) or `bound`
    (`manage.py`, for its command's run). A connection context or a transaction opened
    through it holds the database bound when it opened: should the proxy be bound to
    another one meanwhile (a second app or a command in one process), it still ends on
    its own database."""

    def connection_context(self) -> Any:
        return self._bound().connection_context()

    def atomic(self, *args: Any, **kwargs: Any) -> Any:
        return self._bound().atomic(*args, **kwargs)

    def transaction(self, *args: Any, **kwargs: Any) -> Any:
        return self._bound().transaction(*args, **kwargs)

    def _bound(self) -> pw.Database:
        if self.obj is None:
            raise AttributeError("Cannot use uninitialized Proxy.")
        return cast(pw.Database, self.obj)


db = DatabaseProxy()
log = logging.getLogger(__name__)

#: A database operation failed because the database is unreachable (down, restarting, the
#: network dropped the connection): not because of what was asked.
UNREACHABLE: tuple[type[Exception], ...] = (
    pw.OperationalError,
    pw.InterfaceError,
    psycopg2.OperationalError,
    psycopg2.InterfaceError,
)


class DeadlinePassed(pw.OperationalError):
    """A database use did not finish within its deadline (`within`): the database is as
    good as unreachable for the one waiting (a lost network, a lock held, a pool without a
    free connection). An `UNREACHABLE` error, answered 503 with Retry-After like them."""


class _Held(pw.ConnectionContext):
    """A connection context that its database counts while it is open (in this thread or
    greenlet, as Peewee keeps a connection)."""

    __slots__ = ()

    def __enter__(self) -> None:
        super().__enter__()
        holders = self.db._holders
        holders.count = getattr(holders, "count", 0) + 1

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.db._holders.count -= 1
        super().__exit__(exc_type, exc_val, exc_tb)


class HoldsConnections:
    """Database mixin: whether code of this thread (or greenlet) holds the connection
    open in a `connection_context()` (a script's, a job's, a test's), so that
    `release_connection` never takes it from under it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holders = threading.local()

    def connection_context(self) -> _Held:
        return _Held(self)

    def holds_connection(self) -> bool:
        return getattr(self._holders, "count", 0) > 0


class AnnouncesChanges:
    """Database mixin: a write through a model whose Meta names a `row_cache` watch
    (plumbing/row_cache.py, `Watched`) runs the watch's hook once the write commits (at
    once outside a transaction; after the outermost commit inside one; not at all on a
    rollback). Cache invalidation happens where rows are written, whoever writes them."""

    def execute(self, query: Any, **context_options: Any) -> Any:
        cursor = super().execute(query, **context_options)  # type: ignore[misc]
        watch = getattr(getattr(getattr(query, "model", None), "_meta", None), "row_cache", None)
        hook = watch.hook_for(query) if watch is not None else None
        if hook is not None:
            self.after_commit(hook)  # type: ignore[attr-defined]
        return cursor


class PostgresqlDatabase(HoldsConnections, AnnouncesChanges, pw.PostgresqlDatabase):
    """Peewee's, with `AnnouncesChanges`: the CLI's and the workers' connection."""


class SqliteDatabase(HoldsConnections, AnnouncesChanges, pw.SqliteDatabase):
    """Peewee's, with `AnnouncesChanges` (SQLite has no cache; nothing to announce to)."""


class CheckedPostgresqlPool(HoldsConnections, AnnouncesChanges, PooledPostgresqlDatabase):
    """A pool that does not hand out connections the server has closed.

    After a PostgreSQL restart every pooled socket is dead, but psycopg2 only learns it
    on the next query, which would fail one request per pooled connection. An idle
    connection has nothing to read; a readable one holds the server's termination
    notice or EOF, so it is discarded at check-out without a round trip. (A connection
    that dies silently still fails its query: errors.py answers 503 and the pool drops it.)
    """

    def _is_closed(self, conn: Any) -> bool:
        # Peewee's own check costs a `SELECT 1` round trip per check-out (a third of the
        # intake's database time); the socket check below needs none.
        if conn.closed or conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_UNKNOWN:
            return True
        try:
            if readable([conn], 0):
                return True
        except (OSError, ValueError, psycopg2.Error):
            return True
        if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
            try:
                conn.rollback()  # a request that left a transaction open
            except psycopg2.Error:
                return True
        return False

    def take_idle(self) -> Any:
        """An idle pooled connection checked out at once, or None when there is none or
        the pool is busy (its lock held: another greenlet opening a connection, which may
        take seconds on a lost network). Never waits, never connects: for `within`'s
        quick path, whose caller then goes the bounded way instead."""
        if not self._pool_lock.acquire(blocking=False):
            return None
        try:
            while self._connections:
                ts, _, conn = heapq.heappop(self._connections)
                if self._is_closed(conn):
                    continue
                if self._stale_timeout and self._is_stale(ts):
                    self._close_raw(conn)
                    continue
                self._in_use[self.conn_key(conn)] = PoolConnection(ts, conn, _pool_clock())
                return conn
            return None
        finally:
            self._pool_lock.release()

    def give_back(self, conn: Any) -> None:
        """Return a connection `take_idle` handed out (a closed one is dropped at the next
        check-out); while the pool is busy, a greenlet of its own returns it later."""
        if self._pool_lock.acquire(blocking=False):
            try:
                in_use = self._in_use.pop(self.conn_key(conn), None)
                if in_use is not None:
                    if conn.closed or (self._stale_timeout and self._is_stale(in_use.timestamp)):
                        self._close_raw(conn)
                    else:
                        self._heap_counter += 1
                        heapq.heappush(self._connections, (in_use.timestamp, self._heap_counter, conn))
                    self._pool_available.notify()
            finally:
                self._pool_lock.release()
        else:
            spawn = _spawner()
            if spawn is not None:
                spawn(self._close, conn)
            else:
                self._close(conn)


M = TypeVar("M", bound=pw.Model)
T = TypeVar("T")


def _cooperative_psycopg2() -> None:
    """Under gevent (the Procfile's web workers), let psycopg2 wait through gevent's hub.

    psycopg2 blocks in C while it waits for the server; in a gevent worker that would
    stall every request of the process for the length of each query. psycogreen's wait
    callback makes those waits yield instead. Processes that gevent has not patched (the
    CLI, RQ workers, tests) keep plain blocking psycopg2.
    """
    try:
        from gevent import monkey
    except ImportError:
        return
    if monkey.is_module_patched("socket"):
        psycopg2.extensions.set_wait_callback(_gevent_wait)


#: When a wait for the server's socket gives up (time.monotonic()), for `within`'s quick
#: path; None: waits as long as the connection's own guards let it.
_socket_wait_until: contextvars.ContextVar[float | None] = contextvars.ContextVar("socket_wait_until", default=None)


_gevent_waits: list[Any] = []  # gevent.socket's wait_read, wait_write, at the first wait
_POLL_OK, _POLL_READ, _POLL_WRITE = (
    psycopg2.extensions.POLL_OK,
    psycopg2.extensions.POLL_READ,
    psycopg2.extensions.POLL_WRITE,
)


def _gevent_wait(conn: Any, timeout: float | None = None) -> None:
    """psycogreen's wait callback (psycopg2 waits through gevent's hub), and a deadline:
    past `_socket_wait_until` it raises `DeadlinePassed`, and psycopg2 then closes the
    connection (whatever it was doing is ended by the server: its statement_timeout, or
    the connection's guards), so the pool never hands it out again."""
    if not _gevent_waits:
        from gevent.socket import wait_read, wait_write

        _gevent_waits.extend((wait_read, wait_write))
    until = _socket_wait_until.get()
    while True:
        state = conn.poll()
        if state == _POLL_OK:
            return
        if state == _POLL_READ:
            wait = _gevent_waits[0]
        elif state == _POLL_WRITE:
            wait = _gevent_waits[1]
        else:
            raise psycopg2.OperationalError(f"Bad result from poll: {state!r}")
        if until is None:
            wait(conn.fileno(), timeout=timeout)
            continue
        left = until - time.monotonic()
        if left <= 0:
            raise DeadlinePassed("no answer from the database within the deadline")
        wait(conn.fileno(), timeout=left, timeout_exc=DeadlinePassed("no answer from the database within the deadline"))


#: Every PostgreSQL connection's guards (libpq's parameters), unless the URL sets its own.
#: A network lost without a word (no reset: a partition, a host gone) otherwise leaves a
#: query waiting for TCP's own retransmissions, about 15 minutes on Linux, and with it a
#: request, a job or the row cache's lock: `tcp_user_timeout` gives a connection up once
#: what it sent goes unacknowledged for 10 s, the keepalives notice an idle one within
#: 25 s, and a connect gets 5 s. Slow queries are unaffected: the server's kernel
#: acknowledges the query at once, however long the answer takes. Ignored on a Unix socket.
CONNECTION_GUARDS: dict[str, int] = {
    "connect_timeout": 5,
    "tcp_user_timeout": 10_000,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def open_database(url: str, *, pool_size: int = 10, pool_wait: float = 10, pooled: bool = True) -> pw.Database:
    """Build the database for `url`: PostgreSQL (pooled for the web process, a request
    waiting `pool_wait` seconds at most for a free connection; plain for the CLI and RQ
    workers, whose forked work horses must not inherit pooled sockets), or SQLite in WAL mode."""
    scheme = urlparse(url).scheme
    if scheme in ("postgres", "postgresql"):
        _cooperative_psycopg2()
        params = {**CONNECTION_GUARDS, **parse_db_url(url)}  # the URL's own parameters win
        name = params.pop("database")
        if not pooled:
            return PostgresqlDatabase(name, **params)
        return CheckedPostgresqlPool(
            name,
            max_connections=pool_size,
            stale_timeout=300,
            timeout=pool_wait,  # wait for a free pooled connection, then MaxConnectionsExceeded: errors.py's 503
            **params,
        )
    if scheme == "sqlite":
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else url[len("sqlite://") :]
        return SqliteDatabase(
            path or ":memory:",
            pragmas={"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 10000},
            check_same_thread=False,
        )
    raise ValueError(f"unsupported DATABASE_URL scheme: {scheme!r}")


def bind_database(url: str, *, pool_size: int = 10, pool_wait: float = 10, pooled: bool = True) -> pw.Database:
    """Open the database and bind the models to it, for the rest of the process (the web
    process's `create_app`)."""
    database = open_database(url, pool_size=pool_size, pool_wait=pool_wait, pooled=pooled)
    db.initialize(database)
    return database


@contextlib.contextmanager
def bound(database: pw.Database) -> Iterator[pw.Database]:
    """The models bound to `database` for the block (a command's run, its threads
    included), then to what was bound before: a command run inside another process (a
    test's) leaves that process's database bound."""
    previous = db.obj
    db.initialize(database)
    try:
        yield database
    finally:
        db.initialize(previous)


_gevent_spawn: list[Any] = []  # [gevent.spawn, or None outside gevent], chosen at the first use


def _spawner() -> Any:
    """gevent's spawn under gevent (the web workers), else None (threads). Chosen at the
    first use: gevent patches the process before that."""
    if not _gevent_spawn:
        spawn = None
        try:
            from gevent import monkey
        except ImportError:
            monkey = None
        if monkey is not None and monkey.is_module_patched("socket"):
            import gevent

            spawn = gevent.spawn
        _gevent_spawn.append(spawn)
    return _gevent_spawn[0]


def _run_beside(work: Callable[[], T], database: pw.Database) -> tuple[bool, Any]:
    """`work()` as (True, its value) or (False, what it raised), its connection given back
    (nothing escapes: gevent would print an escaping error with its traceback)."""
    try:
        return True, work()
    except BaseException as exc:  # handed to the caller as it is
        return False, exc
    finally:
        # `database`, and the bound one, which the models' queries use (in a test, another
        # app's pool may be bound meanwhile): this thread's connections go back to their pools.
        for used in {id(d): d for d in (database, db.obj) if d is not None}.values():
            with contextlib.suppress(Exception):
                if not used.is_closed() and not used.in_transaction():
                    used.close()


#: When the answer being made must be out (time.monotonic()), for the database uses on its
#: way (`within`, `time_left`); None: no such bound. Per request: a context variable is
#: its thread's or greenlet's own.
_answer_by: contextvars.ContextVar[float | None] = contextvars.ContextVar("answer_by", default=None)


def answer_by(moment: float | None) -> contextvars.Token:
    """Bound every database use of this request (thread, greenlet) to end by `moment`
    (monotonic seconds); hand the token to `answered` when the answer is out."""
    return _answer_by.set(moment)


def answered(token: contextvars.Token) -> None:
    _answer_by.reset(token)


def time_left(seconds: float) -> float:
    """`seconds`, or less when this request's answer must be out sooner (`answer_by`)."""
    moment = _answer_by.get()
    if moment is None:
        return seconds
    return max(0.0, min(seconds, moment - time.monotonic()))


def within(seconds: float, work: Callable[[], T], database: pw.Database | None = None, *, here: bool = False) -> T:
    """`work()` (database reads or writes), or `DeadlinePassed` once `seconds` have passed
    without its answer: for what a caller waits for on the phone (the routing checks, a
    hand-off), which must answer within a bound whatever the database's network or locks do.

    `work` runs beside the caller (a greenlet under gevent, else a thread), on a connection
    of its own from `database` (default: the bound one) that it gives back once done, and
    the caller waits for it at most `seconds` (less when the request's answer is due
    sooner: `answer_by`). Past them `work` goes on until its own
    guards end it (CONNECTION_GUARDS, a lock released): what it writes may still commit,
    so the caller's answer says "safe to retry". Nothing is interrupted half-way, so no
    connection is left in an unknown state. Inside a transaction or a held connection,
    whose rows only this one sees, `work` runs here without a deadline. (Interrupting the
    caller's own greenlet instead, with gevent's Timeout, costs less, but breaks whatever
    it waits in: the pool's condition when every connection is in use, a 500.)

    `here` (reads on a routing check's path, plumbing/row_cache.py): when an idle pooled
    connection can be had at once, `work` runs in the caller's greenlet on it, its waits
    on the server bounded by the wait callback (`_gevent_wait`): past the deadline the
    connection is closed, the server ends the statement (its statement_timeout) or the
    connection's guards end it. That is the whole bound, as nothing else on that path
    waits: no pool lock, no connect. It costs less than a greenlet beside (a third of
    has-active-request's time went to the greenlet and the pool's check-out, measured).
    Otherwise, the greenlet beside as above."""
    database = database if database is not None else db.obj
    if database is None or database.in_transaction():
        return work()
    if isinstance(database, HoldsConnections) and database.holds_connection():
        return work()
    seconds = time_left(seconds)
    if seconds <= 0:
        raise DeadlinePassed("no time left for the database before the answer is due")
    spawn = _spawner()
    if here and spawn is not None:
        done = _here(seconds, work, database)
        if done is not _NOT_HERE:
            return cast(T, done)
    # In the caller's context: its log lines carry the request's id (plumbing/logs.py).
    context = contextvars.copy_context()
    if spawn is not None:
        beside = spawn(context.run, _run_beside, work, database)
        beside.join(seconds)
        if not beside.ready():
            raise DeadlinePassed(f"no answer within {seconds:g} s")
        succeeded, value = beside.value
    else:
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            outcome.append(context.run(_run_beside, work, database))

        thread = threading.Thread(target=run, name="database-deadline", daemon=True)
        thread.start()
        thread.join(seconds)
        if not outcome:
            raise DeadlinePassed(f"no answer within {seconds:g} s")
        succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return cast(T, value)


_NOT_HERE = object()


def _here(seconds: float, work: Callable[[], T], database: pw.Database) -> Any:
    """`work()` in this greenlet on an idle pooled connection, its socket waits ending
    within `seconds` (`within`'s quick path); `_NOT_HERE` when that cannot be had at once:
    this greenlet holds a connection already, the models are bound elsewhere, the wait
    callback is not ours, no idle connection."""
    if (
        not isinstance(database, CheckedPostgresqlPool)
        or database is not db.obj
        or not database.is_closed()
        or psycopg2.extensions.get_wait_callback() is not _gevent_wait
    ):
        return _NOT_HERE
    until = _socket_wait_until.set(time.monotonic() + seconds)
    try:
        conn = database.take_idle()  # its check may roll back what a request left open: bounded too
        if conn is None:
            return _NOT_HERE
        database._state.set_connection(conn)
        try:
            return work()
        except pw.OperationalError as exc:
            original = getattr(exc, "orig", None) or exc.__context__
            if isinstance(original, DeadlinePassed) and not isinstance(exc, DeadlinePassed):
                raise original from None  # the wait callback's, as Peewee wrapped it
            raise
        finally:
            database._state.reset()
            database.give_back(conn)
    finally:
        _socket_wait_until.reset(until)


def release_connection() -> bool:
    """Hand this request's pooled connection back before it waits on something slow (a
    client's body, another service, a job); the next query takes one again (Peewee's
    autoconnect). A web process has a few pooled connections for up to a thousand gevent
    connections: a request holding one while it waits starves all the others (ten slow
    uploads did). A connection inside a transaction stays: giving it back would end the
    transaction; so does one a `connection_context()` holds (a script's or a test's), whose
    end would then find its context gone. True when one was handed back."""
    database = db.obj
    if database is None or database.is_closed() or database.in_transaction():
        return False  # (None: no database bound, as for storage served on its own)
    if isinstance(database, HoldsConnections) and database.holds_connection():
        return False
    db.close()
    return True


# --- SQL by hand on the hot path, written from the models' metadata (a renamed column
# cannot drift).


def from_row(model: type[M], values: tuple) -> M:
    """A model from raw column values in `_meta.sorted_fields` order, converted as Peewee
    converts its own query results."""
    return model(**{f.name: f.python_value(v) for f, v in zip(model._meta.sorted_fields, values)})


def columns(alias: str, model: type[pw.Model]) -> str:
    return ", ".join(f'{alias}."{f.column_name}"' for f in model._meta.sorted_fields)


def hot_sql(sql: str, params: list | tuple) -> Any:
    """Run SQL written with `%s` placeholders on the bound database; returns the cursor."""
    database = db.obj
    if database.param != "%s":
        sql = sql.replace("%s", database.param)
    return database.execute_sql(sql, params)


# Server-side prepared statements: connection -> names prepared on it. A pooled
# connection keeps its statements for its whole life; a new one prepares them again.
_prepared: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()
_prepare_failures = 0
_PREPARE_GIVE_UP = 3
# invalid_sql_statement_name (EXECUTE of a statement this session does not have),
# duplicate_prepared_statement (PREPARE of one it has): a pooler moved us to another session.
_PREPARED_STATEMENT_ERRORS = {"26000", "42P05"}


def _pgcode(exc: BaseException) -> str | None:
    """The SQLSTATE of a Peewee-wrapped psycopg2 error (Peewee puts the original first)."""
    original = exc.args[0] if exc.args and isinstance(exc.args[0], psycopg2.Error) else exc.__context__
    return getattr(original, "pgcode", None)


def is_postgresql(database: pw.Database | None = None) -> bool:
    """Whether `database` (default: the bound one) is PostgreSQL: the one way to ask, for
    the features SQLite lacks (LISTEN, advisory locks, triggers, SKIP LOCKED, PREPARE)."""
    return isinstance(database if database is not None else db.obj, pw.PostgresqlDatabase)


_peewee_log = logging.getLogger("peewee")
_peewee_errors: Any = vars(pw)["__exception_wrapper__"]  # Peewee's errors for the driver's (execute_sql's own)


def _execute(database: pw.Database, sql: str, params: list | tuple) -> Any:
    """`database.execute_sql(sql, params)` (its errors Peewee's), without the layers around
    each query when nothing uses them (no query hook, its log below DEBUG): on the hot
    path they cost more than the cursor's own work."""
    if database.query_hooks or _peewee_log.isEnabledFor(logging.DEBUG):
        return database.execute_sql(sql, params)
    with _peewee_errors:
        cursor = database.connection().cursor()
        cursor.execute(sql, params)
    return cursor


def hot_prepared(name: str, sql: str, params: list | tuple, *, statement_timeout: float | None = None) -> Any:
    """`hot_sql`, planned once per connection on PostgreSQL (PREPARE, then EXECUTE).

    For a statement whose planning costs more than running it (a recursive CTE: 0.18 ms
    of planning for 0.05 ms of work, per request). Inside a transaction, on SQLite, and
    behind a pooler that does not keep a session's statements (PgBouncer in transaction
    mode: EXECUTE then fails), it runs as plain `hot_sql`; after a few such failures
    this process stops trying.

    `statement_timeout` (seconds): the server ends the statement past it (a lock waited
    on), set for that statement alone in the same round trip (outside a transaction, a
    query of several statements is one transaction, whose SET LOCAL ends with it)."""
    global _prepare_failures
    database = db.obj
    if not is_postgresql(database) or database.in_transaction():
        return hot_sql(sql, params)
    bounded = f"SET LOCAL statement_timeout = {max(1, round(statement_timeout * 1000))}; " if statement_timeout else ""
    if _prepare_failures >= _PREPARE_GIVE_UP:
        return hot_sql(bounded + sql, params)
    conn = database.connection()
    names = _prepared.setdefault(conn, set())
    try:
        if name not in names:
            numbered = iter(range(1, sql.count("%s") + 1))
            database.execute_sql(f"PREPARE {name} AS " + re.sub("%s", lambda _: f"${next(numbered)}", sql))
            names.add(name)
        return _execute(database, f"{bounded}EXECUTE {name}({', '.join(['%s'] * len(params))})", params)
    except pw.DatabaseError as exc:
        if _pgcode(exc) not in _PREPARED_STATEMENT_ERRORS:
            raise  # a lost connection and the like: the caller's usual error path
        names.discard(name)
        _prepare_failures += 1
        if _prepare_failures == _PREPARE_GIVE_UP:
            log.warning(
                "prepared statements do not work on this connection (%s); not using them",
                type(exc.__cause__ or exc).__name__,
            )
        return hot_sql(bounded + sql, params)
