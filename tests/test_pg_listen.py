"""The listening connection (plumbing/pg_listen.py) that plumbing/row_cache.py and jobs/relay.py share:
it hears a NOTIFY on any of its channels, waits no longer than asked, and reports a
connection the server ended (pg_terminate_backend) by raising one of `LOST`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg2
import pytest

from config import Config
from plumbing.database import open_database
from plumbing.descriptors import SELECT_LIMIT
from plumbing.pg_listen import LOST, Listener, connector
from tests.support.descriptors import numbered_past_select_limit


@pytest.fixture
def database(config: Config):
    database = open_database(config.database_url, pooled=False)
    yield database
    database.close()


@pytest.fixture
def name() -> str:
    return f"pg-listen test {uuid.uuid4().hex[:8]}"


@pytest.fixture
def listener(database, name) -> Iterator[Listener]:
    listening = Listener.open(connector(database, application_name=name), "pg_listen_test", "Mixed Case")
    yield listening
    listening.close()


@pytest.fixture
def other(database) -> Iterator[psycopg2.extensions.cursor]:
    """A connection of its own, standing for another process."""
    conn = connector(database)()
    conn.autocommit = True
    yield conn.cursor()
    conn.close()


def test_a_notify_on_any_channel_is_heard_once(listener, other):
    assert listener.wait(0) is False
    other.execute("NOTIFY pg_listen_test")
    assert listener.wait(5) is True
    assert listener.wait(0) is False  # consumed
    other.execute("SELECT pg_notify('Mixed Case', 'x')")  # the exact name, as a trigger's pg_notify sends it
    other.execute("SELECT pg_notify('mixed case', 'x')")  # not this one
    assert listener.wait(5) is True
    assert listener.wait(0.2) is False
    other.execute("NOTIFY pg_listen_test")
    assert listener.wait(5, drain=False) is True  # one read, as the relay waits
    assert listener.wait(0, drain=False) is False


def test_a_wait_without_a_notification_lasts_its_timeout(listener):
    started = time.monotonic()
    assert listener.wait(0.3) is False
    assert 0.25 < time.monotonic() - started < 2


def test_a_connection_the_server_ended_is_reported(listener, other, name):
    other.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,))
    assert other.fetchall() == [(True,)]
    deadline = time.monotonic() + 5
    with pytest.raises(LOST):
        while time.monotonic() < deadline:
            listener.wait(0.1)
    assert listener.conn.closed
    listener.close()  # closing it again is harmless


def test_a_listener_that_cannot_connect_raises(database):
    with pytest.raises(psycopg2.OperationalError):
        Listener.open(connector(database, dbname="pg_listen_no_such_database"), "pg_listen_test")


def test_a_listener_knows_whether_this_process_opened_it(listener):
    assert not listener.inherited
    listener.pid += 1  # as in a child forked after it was opened
    assert listener.inherited


def test_a_notification_read_with_a_query_answer_is_reported_by_the_next_wait(listener, other):
    """The server sends what it has for a connection before it reads the next query, so
    a query on the listening connection (the row cache counts changes on it) reads them
    with its answer; the socket is then quiet, and the wait must still report them."""
    other.execute("NOTIFY pg_listen_test")
    with listener.conn.cursor() as cur:
        cur.execute("SELECT 1")
    assert listener.conn.notifies, "the notification came with the answer"
    assert listener.wait(0) is True
    assert listener.wait(0) is False  # consumed


def test_a_listener_whose_socket_is_numbered_past_selects_limit_still_hears(database, name):
    """`select` refuses descriptors from 1024 on (ValueError, taken for a lost connection:
    the cache would stop listening for good); a busy web worker gets such numbers."""
    with numbered_past_select_limit():
        listening = Listener.open(connector(database, application_name=name), "pg_listen_test")
        try:
            assert listening.conn.fileno() > SELECT_LIMIT
            notify = connector(database)()
            notify.autocommit = True
            with notify.cursor() as cur:
                cur.execute("NOTIFY pg_listen_test")
            notify.close()
            assert listening.wait(5) is True
            assert listening.wait(0.1) is False
        finally:
            listening.close()


def test_a_pooled_connection_numbered_past_selects_limit_is_handed_out_again(config: Config):
    """The pool's check-out test looks at the socket; with `select` a connection numbered
    past 1023 was taken for a closed one, and every request opened a new connection."""
    pooled = open_database(config.database_url)
    try:
        with numbered_past_select_limit():
            with pooled.connection_context():
                first = pooled.connection()
                assert first.fileno() > SELECT_LIMIT
                pooled.execute_sql("SELECT 1")
            with pooled.connection_context():
                assert pooled.connection() is first
                pooled.execute_sql("SELECT 1")
    finally:
        pooled.close_all()
