"""A network lost without a word (no reset, no refusal: a partition, a host gone): every
PostgreSQL connection gives up within its guard (plumbing/database.py, CONNECTION_GUARDS)
instead of waiting for TCP's retransmissions, about 15 minutes, and the routing checks
answer from the last known state within a second (the real processes: tests/test_routing_deadlines.py).

The loss is real: iptables drops every packet to and from a TCP proxy's port on the
loopback interface, so what the client sends is never acknowledged (`packet_loss`: the
tests need root, and .ci/run installs iptables; `bin/test --fast` leaves them out). A
closed proxy (tests/test_database_outage.py) resets its connections instead, which the
client notices at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlparse

import pytest

from plumbing.database import CONNECTION_GUARDS, UNREACHABLE, open_database
from plumbing.row_cache import RowCache
from tests.conftest import PG_URL
from tests.support.clocks import Clock
from tests.support.faults import TcpProxy, packets_dropped
from tests.support.servers import wait_until

# Seconds of waiting, little work: handed out first, beside the other processes' CPU work,
# rather than last, where they would be the run's tail.
pytestmark = pytest.mark.long

GUARD = CONNECTION_GUARDS["tcp_user_timeout"] / 1000  # seconds: the default, as deployed


def with_query(url: str, **params: object) -> str:
    parts = urlparse(url)
    return parts._replace(query=urlencode([*parse_qsl(parts.query), *params.items()])).geturl()


@pytest.fixture
def proxy(app) -> Iterator[TcpProxy]:
    """A proxy to the suite's database, migrated (`app`): the cache counts changes in it."""
    with TcpProxy(urlparse(PG_URL).port or 5432) as through:
        yield through


def finished_within(seconds: float, work) -> tuple[bool, list]:
    """Run `work` in a thread; whether it finished within `seconds`, and what it returned
    or raised (a thread, so that the old behaviour, a wait of minutes, fails the test
    instead of hanging it; the rules' removal then lets that thread finish)."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the test as it is
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), outcome


def test_a_database_url_sets_its_own_guards_over_the_defaults(app):
    """Each guard is a default: the URL's own value wins (a `connect_timeout` in the URL
    used to stop the service at its start: given twice)."""
    database = open_database(with_query(PG_URL, connect_timeout=7))
    try:
        assert database.connect_params["connect_timeout"] == 7
        assert database.connect_params["tcp_user_timeout"] == CONNECTION_GUARDS["tcp_user_timeout"] == 10_000
        assert database.execute_sql("SELECT 1").fetchone() == (1,)
        settings = database.connection().get_dsn_parameters()
        assert (settings["connect_timeout"], settings["tcp_user_timeout"]) == ("7", "10000")
    finally:
        database.close_all()


@pytest.mark.packet_loss
def test_a_query_over_a_lost_network_fails_within_its_guard(proxy):
    database = open_database(proxy.url(PG_URL))  # pooled, as the web's
    try:
        assert database.execute_sql("SELECT 1").fetchone() == (1,)
        database.close()  # back to the pool, for the next request (the thread below) to take
        with packets_dropped(proxy.port):
            started = time.monotonic()
            finished, outcome = finished_within(GUARD + 20, lambda: database.execute_sql("SELECT 1").fetchone())
            took = time.monotonic() - started
        assert finished, f"the query waited on a lost network past {GUARD + 20:.0f} s"
        assert isinstance(outcome[0], UNREACHABLE), outcome
        assert GUARD - 0.5 < took < GUARD + 4, took
    finally:
        database.close_all()


@pytest.mark.packet_loss
def test_over_a_lost_network_every_routing_lookup_answers_from_the_last_known_state_within_a_second(proxy):
    """The change count is the counter thread's: a lookup waits for it at most
    `count_wait`, then answers from what was confirmed a moment before, and so does every
    lookup after it, through the listening connection's loss (its guard) and the attempts
    to listen again; a row never known waits on the database at most `deadline`, then
    fails as unreachable. Back on the network, a lookup reads the database again."""
    fake = Clock(1000.0)
    database = open_database(proxy.url(PG_URL))  # pooled, as the web's
    cache = RowCache.for_database(database, clock=fake)
    try:
        assert wait_until(lambda: cache.get("warm-up")[1] >= 0, timeout=10), "the cache never started listening"
        reads: list[float] = []

        def load() -> tuple:
            reads.append(time.monotonic())
            return tuple(database.execute_sql("SELECT 1").fetchone())

        assert cache.read("key", load, lookup="token") == (1,)
        database.close()  # back to the pool, for the next lookups to take
        slowest = 0.0
        with packets_dropped(proxy.port):
            lost = time.monotonic()
            while time.monotonic() - lost < 2 * GUARD:  # past the listening connection's guard
                fake.now += 0.25  # every lookup a count is due
                started = time.monotonic()
                finished, outcome = finished_within(GUARD + 5, lambda: cache.read("key", load, lookup="token"))
                took = time.monotonic() - started
                assert finished, f"a lookup waited on a lost network past {GUARD + 5:.0f} s"
                assert outcome == [(1,)], outcome
                slowest = max(slowest, took)
                time.sleep(0.05)
            assert cache.database_unreachable
            started = time.monotonic()
            with pytest.raises(UNREACHABLE):
                cache.read("never known", load, lookup="token")
            assert time.monotonic() - started < cache.deadline + 0.5
        print(f"slowest lookup over a lost network of {2 * GUARD:.0f} s: {slowest * 1000:.0f} ms")
        assert slowest < 1.0, slowest

        def read_again() -> bool:
            try:
                return cache.read("new key", load, lookup="token") == (1,)
            except UNREACHABLE:  # a connection of the loss, given up by its guard meanwhile
                return False

        assert wait_until(read_again, timeout=GUARD + 10), "the database was never read again"
        assert not cache.database_unreachable
    finally:
        cache.close()
        database.close_all()
