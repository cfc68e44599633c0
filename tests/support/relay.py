"""pytest plugin: the call relay's outbox (a PostgreSQL or SQLite database of stored calls),
its queue on the relay tests' own Redis database, and a relay thread."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest
import redis
from rq import Queue

from config import Config
from jobs.calls import QUEUE
from jobs.context import RelayWakeUp
from jobs.relay import start
from migrations import migrate
from plumbing.database import db, open_database
from tests.conftest import PG_URL, RELAY_REDIS_URL
from tests.support import SECRET_KEY, clinic, load, organization
from tests.support.databases import recreate_database

# Named after the session's database, so runs on different TEST_DATABASE_URLs never share it.
RELAY_PG = PG_URL + "_relay"


RELAY_REDIS = RELAY_REDIS_URL  # TEST_RELAY_REDIS_URL (default number 7), this process's


@pytest.fixture(params=["postgresql", "sqlite"])
def outbox(request, tmp_path, wsgi_app) -> Iterator[str]:
    """`db` bound to a database of this test alone (restored afterwards); its kind."""
    if request.param == "postgresql":
        recreate_database(RELAY_PG)
        url = RELAY_PG
    else:
        url = f"sqlite:///{tmp_path}/relay.db"
    session_database = db.obj
    database = open_database(url, pooled=False)
    db.initialize(database)
    try:
        migrate(database)
        load(organization(clinic("relay-clinic", tz="America/New_York", country="US")))
        yield request.param
    finally:
        database.close()
        db.initialize(session_database)


@pytest.fixture
def queue() -> Iterator[Queue]:
    connection = redis.Redis.from_url(RELAY_REDIS)
    connection.flushdb()
    yield Queue(QUEUE, connection=connection)
    connection.flushdb()


@pytest.fixture
def relay_config() -> Config:
    # A fair share no test here reaches: these are about the outbox (each call queued once,
    # nothing lost); the share itself is tests/test_fair_share.py's.
    return Config(
        database_url="unused",
        redis_url=RELAY_REDIS,
        secret_key=SECRET_KEY,
        recording_retry_delays="1",
        relay_per_clinic=100,
    )


def queued_job_ids(queue: Queue) -> list[str]:
    return queue.get_job_ids()


@contextlib.contextmanager
def relay_thread(
    queue: Queue, config: Config, wake: RelayWakeUp | None = None, **options: float
) -> Iterator[threading.Thread]:
    """A relay running in a thread of this process for the block, woken by `wake` (one of
    its own by default); stopped after it."""
    thread, stop = start(queue, config, wake or RelayWakeUp(), **options)
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
