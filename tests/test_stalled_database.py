"""A database stalled by a lock, in this process: the answers the switchboard waits for
come within their bounds (plumbing/database.py `within`, plumbing/row_cache.py,
switchboard/intake.py). Real locks held by another connection on the suite's database;
the real processes through a real lock and a lost network: tests/test_routing_deadlines.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import psycopg2
import pytest
import webtest

from app import create_app
from models import Call
from plumbing.database import db
from tests.conftest import PG_URL
from tests.support import assert_error, bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.bodies import call_body
from tests.support.row_caches import app_cache
from tests.support.servers import wait_until

HOURS = [{"weekday": "wed", "opens": "08:00", "closes": "16:00"}]  # the tests' clock: Wednesday 10:00 UTC
CALLER = {"callFrom": "+420601123456"}


@contextmanager
def locked(*tables: str) -> Iterator[None]:
    """ACCESS EXCLUSIVE locks on `tables`, held by another connection for the block."""
    conn = psycopg2.connect(PG_URL)
    try:
        with conn.cursor() as cur:
            cur.execute(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
        yield
    finally:
        conn.rollback()
        conn.close()


@pytest.fixture
def service(app, config) -> Iterator[tuple[webtest.TestApp, str]]:
    """An app of its own (its own cache, hand-off deadline 1 s), a clinic open now, a key,
    both checks answered from its cache."""
    session_database = db.obj
    client = webtest.TestApp(create_app(replace(config, handoff_deadline_seconds=1.0)))
    try:
        load(organization(clinic("clinic-a", officeHours=HOURS)))
        token = issue_token(["clinic-a"], ["read", "write"])
        assert wait_until(
            lambda: app_cache(client).get("probe")[1] >= 0 and ask(client, token, "is-clinic-opened").json["isOpen"],
            timeout=10,
        )
        for check in ("is-clinic-opened", "is-on-vacation", "has-active-request"):
            ask(client, token, check, body=CALLER)
        yield client, token
    finally:
        db.obj.close()
        app_cache(client).close()
        db.initialize(session_database)


def ask(client, token: str, check: str, status: int = 200, body: dict | None = None):
    return client.post_json(switchboard_url("clinic-a", check), body or {}, headers=bearer(token), status=status)


def timed(work) -> tuple[object, float]:
    started = time.monotonic()
    return work(), time.monotonic() - started


def test_with_the_change_counter_locked_every_check_answers_from_memory_within_a_second(service):
    client, token = service
    cache = app_cache(client)
    with locked("cache_generation"):
        time.sleep(cache.poll_every + 0.1)  # a count is due: the counter thread waits on the lock
        for _ in range(20):
            answer, took = timed(lambda: ask(client, token, "is-clinic-opened"))
            assert answer.json == {"isOpen": True} and took < 1.0, took
            answer, took = timed(lambda: ask(client, token, "is-on-vacation"))
            assert answer.json == {"isOnVacation": False} and took < 1.0, took
        assert cache.database_unreachable, "the late count is known"
    assert wait_until(lambda: not cache.database_unreachable, timeout=10), "the count never came again"


def test_with_the_requests_locked_has_active_request_answers_503_within_a_second(service):
    client, token = service
    with locked("patient_request"):
        for _ in range(3):
            answer, took = timed(lambda: ask(client, token, "has-active-request", 503, CALLER))
            assert_error(answer, 503, "SERVICE_UNAVAILABLE")
            assert answer.headers["Retry-After"] == "2" and took < 1.0, took
    assert wait_until(
        lambda: ask(client, token, "has-active-request", body=CALLER, status="*").status_int == 200, timeout=10
    )


def test_with_the_calls_locked_a_hand_off_answers_503_within_its_deadline_and_its_retry_is_one_call(service):
    client, token = service
    url = switchboard_url("clinic-a", "recording-complete")
    with locked("call"):
        answer, took = timed(lambda: client.post_json(url, call_body("CA-stalled"), headers=bearer(token), status=503))
        assert_error(answer, 503, "SERVICE_UNAVAILABLE")
        assert "safe to retry" in answer.json["error"] and took < 2.0, took
    # The write given up on may still commit; the switchboard's retry is answered 200 either way.
    assert wait_until(
        lambda: client.post_json(url, call_body("CA-stalled"), headers=bearer(token), status="*").status_int == 200,
        timeout=10,
    )
    with db.connection_context():
        assert Call.select().where(Call.call_sid == "CA-stalled").count() == 1
