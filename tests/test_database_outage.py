"""The routing checks through a database outage, in this process (plumbing/row_cache.py).

The app reaches the test database through a TCP proxy (tests/support/faults.py) that the
tests cut: every connection dropped, new ones refused, as a database outage looks to a
web process, without stopping a server anyone else uses. While it is cut, the routing
checks and their token check answer from the last state the process knew; what cannot be
answered from memory (`has-active-request`, a hand-off) answers 503; readiness stays 200,
degraded. The real processes through a real outage: tests/test_recovery.py.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from urllib.parse import urlparse

import psycopg2
import pytest
import webtest

from app import create_app
from plumbing import row_cache
from plumbing.database import UNREACHABLE, db, open_database
from plumbing.descriptors import readable
from plumbing.row_cache import RowCache
from tests.conftest import PG_URL
from tests.support import assert_error, bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.bodies import call_body
from tests.support.clocks import Clock
from tests.support.faults import TcpProxy
from tests.support.row_caches import app_cache, other_connection, token_id
from tests.support.servers import wait_until

HOURS = [{"weekday": "wed", "opens": "08:00", "closes": "16:00"}]  # the tests' clock: Wednesday 10:00 UTC


@pytest.fixture
def proxy():
    with TcpProxy(urlparse(PG_URL).port or 5432) as cut_me:
        yield cut_me


@pytest.fixture
def behind_proxy(app, config, proxy):
    """The app over the proxy, a clinic open now and a token, both checks answered from the
    process's cache (so known to it); the session's database binding is restored after."""
    session_database = db.obj
    client = webtest.TestApp(create_app(replace(config, database_url=proxy.url(PG_URL))))
    try:
        load(organization(clinic("clinic-a", officeHours=HOURS)))
        token = issue_token(["clinic-a"], ["read", "write"])
        cache = app_cache(client)
        reads: list[str] = []

        def hook(event) -> None:
            reads.append(event.sql)

        db.obj.query_hooks.append(hook)

        def both_from_memory() -> bool:
            before = len(reads)
            ask(client, token, "is-clinic-opened")
            ask(client, token, "is-on-vacation")
            return len(reads) == before

        assert wait_until(both_from_memory, timeout=10, interval=0.05), "never served from the cache"
        db.obj.query_hooks.remove(hook)
        yield client, token, cache
    finally:
        db.obj.close()
        app_cache(client).close()
        db.initialize(session_database)


def ask(client, token: str, check: str, status: int = 200, body: dict | None = None):
    return client.post_json(switchboard_url("clinic-a", check), body or {}, headers=bearer(token), status=status)


def test_while_the_database_is_unreachable_the_routing_checks_answer_from_the_last_known_state(
    behind_proxy, proxy, caplog
):
    client, token, cache = behind_proxy
    with caplog.at_level(logging.INFO):
        proxy.cut()
        started = time.monotonic()
        for _ in range(5):
            assert ask(client, token, "is-clinic-opened").json == {"isOpen": True}
            assert ask(client, token, "is-on-vacation").json == {"isOnVacation": False}
            assert ask(client, token, "is-on-vacation", body={"calendarIds": []}).json == {"isOnVacation": False}
        assert time.monotonic() - started < 5, "no answer waited on the database"
        # What changes with every call cannot come from memory: 503, which a switchboard retries.
        active = ask(client, token, "has-active-request", 503, {"callFrom": "+420601123456"})
        assert_error(active, 503, "SERVICE_UNAVAILABLE")
        assert active.headers["Retry-After"] == "2"
        handoff = client.post_json(
            switchboard_url("clinic-a", "recording-complete"), call_body("CA-outage"), headers=bearer(token), status=503
        )
        assert_error(handoff, 503, "SERVICE_UNAVAILABLE")
        # A wrong secret is still refused: the known row is checked like a cached one.
        forged = token[: token.rindex("_") + 1] + "A" * 43
        assert_error(ask(client, forged, "is-clinic-opened", 401), 401, "UNAUTHORIZED")
        # Ready, degraded: it serves the routing checks; alive, whatever.
        ready = client.get("/readyz", status=200).json
        assert ready["status"] == "degraded" and ready["database"] == "last_known" and ready["redis"] == "ok"
        assert 0 <= ready["lastKnownSeconds"] < 30
        assert client.get("/livez", status=200).json == {"status": "alive"}
        # Said in a metric and a log line.
        scraped = client.get("/metrics").text
        assert 'clinic_last_known_answers_total{lookup="token"}' in scraped
        assert 'clinic_last_known_answers_total{lookup="schedule"}' in scraped
        said = [r.getMessage() for r in caplog.records if "from the last known state" in r.getMessage()]
        assert len(said) == 1 and "at most 600 s" in said[0], said

        proxy.restore()
        assert wait_until(
            lambda: not cache.database_unreachable or ask(client, token, "is-clinic-opened").json != {"isOpen": True},
            timeout=10,
        )
        assert ask(client, token, "has-active-request", body={"callFrom": "+420601123456"}).json == {
            "hasActiveRequest": False
        }
        assert any("database reachable again" in r.getMessage() for r in caplog.records)
        assert client.get("/readyz", status=200).json["status"] == "ok"


def test_a_change_announced_before_the_outage_is_never_answered_from_the_older_state(behind_proxy, proxy):
    """A token revoked just before the database went away: its last known row is gone with
    the notification, so it is refused an answer (503), never served as it was."""
    client, token, cache = behind_proxy
    before = cache.get("probe")[1]
    with other_connection() as cur:  # another process revokes it, straight to the database
        cur.execute("UPDATE api_token SET revoked_at = now() WHERE id = %s", (token_id(token),))
    assert wait_until(lambda: cache.get("probe")[1] != before, timeout=5), "the change was never notified"
    proxy.cut()
    assert_error(ask(client, token, "is-clinic-opened", 503), 503, "SERVICE_UNAVAILABLE")


def test_the_last_known_state_is_used_only_within_its_bound(proxy):
    """`max_stale` bounds how old a state may be answered from, counted from the last moment
    the listening connection confirmed it: within it, the known row; past it, the error."""
    fake = Clock(1000.0)
    database = open_database(proxy.url(PG_URL), pooled=False)
    cache = RowCache.for_database(database, max_stale=30, clock=fake)
    try:
        assert wait_until(lambda: cache.get("warm-up")[1] >= 0, timeout=10), "the cache never started listening"

        def load() -> tuple:
            return tuple(database.execute_sql("SELECT 1").fetchone())

        assert cache.read("key", load, lookup="token") == (1,)
        proxy.cut()
        fake.now += 29
        assert cache.read("key", load, lookup="token") == (1,), "29 s old: answered from memory"
        assert cache.database_unreachable
        fake.now += row_cache.PROBE_EVERY + 1  # 31 s: past the bound, and the next read tries the database
        with pytest.raises(UNREACHABLE):
            cache.read("key", load, lookup="token")
        with pytest.raises(UNREACHABLE):
            cache.read("unknown key", load, lookup="token")
    finally:
        cache.close()
        database.close()


def test_a_change_notified_as_the_listening_connection_is_lost_is_never_answered_from_the_older_state(app, proxy):
    """The notification came, and the listening connection was lost while the cache was
    counting the change it announced: the change is known all the same, so the state from
    before it is not answered from once the database is unreachable. (The count is held
    on a lock, and its connection ended there, so the loss falls in that very moment.)"""
    fake = Clock(1000.0)
    database = open_database(proxy.url(PG_URL), pooled=False)
    cache = RowCache.for_database(database, clock=fake)
    locker = psycopg2.connect(PG_URL)
    try:
        assert wait_until(lambda: cache.get("warm-up")[1] >= 0, timeout=10), "the cache never started listening"

        def load() -> tuple:
            return tuple(database.execute_sql("SELECT 1").fetchone())

        assert cache.read("key", load, lookup="token") == (1,)
        listening = cache._listener
        assert listening is not None
        with other_connection() as cur:
            cur.execute("UPDATE clinic SET name = name")  # a change, counted and notified
        assert readable([listening.conn], 5), "the notification never arrived"
        with locker.cursor() as cur:
            cur.execute("LOCK TABLE cache_generation IN ACCESS EXCLUSIVE MODE")
        counting = threading.Thread(target=cache.get, args=("key",))
        counting.start()

        def counting_pid() -> int | None:
            with other_connection() as cur:
                cur.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = 'auth-cache listener' "
                    "AND wait_event_type = 'Lock' AND datname = current_database()"
                )
                found = cur.fetchall()
            return found[0][0] if found else None

        assert wait_until(lambda: counting_pid() is not None, timeout=10), "the count never started"
        with other_connection() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (counting_pid(),))
        counting.join(10)
        assert not counting.is_alive()
        locker.rollback()
        proxy.cut()
        with pytest.raises(UNREACHABLE):
            cache.read("key", load, lookup="token")
    finally:
        locker.close()
        cache.close()
        database.close()
