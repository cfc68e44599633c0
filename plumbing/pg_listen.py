"""Listening for PostgreSQL notifications (LISTEN/NOTIFY) on a connection of its own.

`Listener.open` connects (with the database URL's parameters: `connector`), switches
to autocommit and LISTENs on its channels; `wait` waits up to a timeout and reads what
the server sent; `close` hangs up. A lost connection (a server restart,
`pg_terminate_backend`, the network) is reported by `wait` raising one of `LOST`;
recovering means opening a new Listener, when and how often is the caller's policy
(plumbing/row_cache.py retries in the background, jobs/relay.py from its loop, with backoff).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import peewee as pw
import psycopg2
import psycopg2.extensions
from psycopg2 import sql

from plumbing.descriptors import readable

# What `wait` raises on a lost connection: psycopg2's errors (a connection closed here
# too), the socket's, and ValueError (kept for callers that catch it).
LOST = (psycopg2.Error, OSError, ValueError)

Connect = Callable[[], psycopg2.extensions.connection]


def connector(database: pw.PostgresqlDatabase, **params: Any) -> Connect:
    """A function opening a new connection (not a pooled one) to `database` with its
    URL's own parameters (host, port, sslmode, ...) and `params` on top."""
    options = {
        **{k: v for k, v in database.connect_params.items() if k != "connection_factory"},
        "dbname": database.database,
        **params,
    }

    def connect() -> psycopg2.extensions.connection:
        return psycopg2.connect(**options)

    return connect


class Listener:
    """One connection LISTENing on some channels."""

    def __init__(self, conn: psycopg2.extensions.connection) -> None:
        self.conn = conn
        self.pid = os.getpid()
        # Set when a `wait` that raised `LOST` had read notifications before the loss (they
        # would be lost with its answer): a change was announced.
        self.notified_before_loss = False

    @classmethod
    def open(cls, connect: Connect, *channels: str) -> Listener:
        """Connect and LISTEN on `channels`; raises psycopg2.Error or OSError when that fails."""
        conn = connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                for channel in channels:
                    cur.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            _close(conn)
            raise
        return cls(conn)

    @property
    def inherited(self) -> bool:
        """Opened by another process that forked this one: the socket is the parent's,
        to be neither used nor closed here."""
        return self.pid != os.getpid()

    def wait(self, timeout: float, *, drain: bool = True) -> bool:
        """Whether notifications arrived within `timeout` seconds (0: only those already
        there); they are consumed. Raises one of `LOST` when the connection is lost.

        Once the server has sent something, `drain` reads on until nothing is left, which
        also notices a server that hung up at once: it sends its FATAL message first (read
        as a notice) and EOF after it, which the next poll() raises on. Without `drain`
        one read, and what else came stays for the next wait."""
        # Those read with the answer to an earlier query on this connection count too.
        notified = bool(self.conn.notifies)
        self.conn.notifies.clear()
        try:
            while readable([self.conn], timeout):
                self.conn.poll()
                if self.conn.notifies:
                    self.conn.notifies.clear()
                    notified = True
                if not drain:
                    break
                timeout = 0
        except LOST:
            self.notified_before_loss = self.notified_before_loss or notified or bool(self.conn.notifies)
            raise
        return notified

    def close(self) -> None:
        _close(self.conn)


def _close(conn: psycopg2.extensions.connection) -> None:
    with contextlib.suppress(psycopg2.Error):
        conn.close()
