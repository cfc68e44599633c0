"""Which calls are being ingested right now, known from PostgreSQL rather than from Redis.

RQ's view of a running job lives in Redis and is lost with it: after a Redis restart a
job still transcribing has no job hash and its worker no key until it re-registers, so a
sweep that trusts Redis alone queues the call again (and transcribes it twice). An
ingest job therefore holds a session-level advisory lock on the call for as long as it
works, on a connection of its own: PostgreSQL releases it when the job ends, and also
when its process dies (the connection closes), so the lock is held exactly while a live
job works on the call. The sweep reads the held locks from `pg_locks` without taking any.

Two-key advisory locks under `NAMESPACE`: apart from the one-key locks the rest of the
service takes (migrations, first calls from a new number). The second key is a 32-bit
hash of the call id; two calls sharing one only make the sweep wait a round for one of them.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable, Iterator

import psycopg2

from plumbing.database import db, is_postgresql
from plumbing.pg_listen import connector

log = logging.getLogger(__name__)
NAMESPACE = 0x63616C6C & 0x7FFFFFFF  # "call"


def _key(call_id: uuid.UUID | str) -> int:
    """A signed 32-bit key from the call id (its first four bytes: uuid4s are random)."""
    value = uuid.UUID(str(call_id)).int >> 96
    return value - (1 << 32) if value >= 1 << 31 else value


@contextlib.contextmanager
def hold(call_id: uuid.UUID | str) -> Iterator[bool]:
    """Hold the call's lease while the block runs; yields False when another live job
    holds it (the caller must not work on the call then). Without PostgreSQL (SQLite, a
    single local worker) there is nothing to hold and it yields True."""
    if not is_postgresql():
        yield True
        return
    conn = connector(
        db.obj,
        application_name="ingest-lease",
        # A job whose host vanished should not hold the call for hours:
        # PostgreSQL drops the connection (and the lock) after ~1 min of silence.
        keepalives=1,
        keepalives_idle=30,
        keepalives_interval=10,
        keepalives_count=3,
    )()
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s, %s)", (NAMESPACE, _key(call_id)))
            got = bool(cur.fetchone()[0])
        yield got
    finally:
        with contextlib.suppress(psycopg2.Error):
            conn.close()  # releases the lock with the session


def held(call_ids: Iterable[uuid.UUID | str]) -> set[uuid.UUID]:
    """The calls among `call_ids` whose lease a live job holds (one query)."""
    ids = [uuid.UUID(str(c)) for c in call_ids]
    if not ids or not is_postgresql():
        return set()
    with db.connection_context():
        cursor = db.execute_sql(
            "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' "
            "AND objsubid = 2 AND classid = %s AND granted",
            (NAMESPACE,),
        )
        # pg_locks shows the key as an unsigned oid.
        locked = {k - (1 << 32) if k >= 1 << 31 else k for (k,) in cursor.fetchall()}
    return {i for i in ids if _key(i) in locked}
