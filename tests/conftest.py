"""Test harness: the real PostgreSQL and Redis on loopback, the real WSGI app via WebTest.

TEST_DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/clinic_test) names a
database this suite owns: it is dropped and created at the start of the session.
TEST_REDIS_URL (default redis://127.0.0.1:6379/15) is flushed likewise. Run in parallel
(pytest-xdist, `bin/test -n 2`), each process takes its own database and Redis numbers
derived from these (tests/support/isolation.py).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import argon2
import pytest
import redis
import webtest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import plumbing.clock  # noqa: E402
import staff.passwords  # noqa: E402
from app import create_app  # noqa: E402
from config import Config, prepare_process_environment  # noqa: E402
from migrations import migrate  # noqa: E402
from models import MODELS, SchemaMigration  # noqa: E402
from plumbing.database import db  # noqa: E402
from tests.support import SECRET_KEY, isolation  # noqa: E402
from tests.support.clocks import WEDNESDAY, Clock  # noqa: E402
from tests.support.databases import TableEmptier, recreate_database  # noqa: E402

# Staff passwords in this process are Argon2id at its lowest cost (1 pass over 1 MiB): the
# same algorithm and code paths, without 160 ms of hashing per login and per new user
# (hundreds of console tests log in). The service's own processes (gunicorn, manage.py)
# keep the production parameters, which test_staff_passwords.py checks.
PRODUCTION_PASSWORD_HASHER = staff.passwords._hasher
staff.passwords._hasher = argon2.PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)

# log_audit: the whole session logs at DEBUG and fails if a secret reaches a log.
# https_server: the HTTPS test server's fixtures. worker: the session's one RQ worker.
# tiers: what each test needs (gunicorn, a worker, the engine, ...), `--fast` for none of it.
# browser: the browser tests' Chromium. contract: every answer judged by the OpenAPI
# document. The fixtures several modules share: console (the staff console through
# WebTest), console_browser (the console's browser tests), recordings (the switchboard
# platform), handoffs (call hand-offs), relay (the call relay's outbox), organizations (the
# organizations a test starts from), seaweed (a SeaweedFS for the S3 backend).
pytest_plugins = [
    "tests.support.tiers",
    "tests.support.log_audit",
    "tests.support.leftovers",
    "tests.support.https_server",
    "tests.support.smtp_server",
    "tests.support.contract",
    "tests.support.worker",
    "tests.support.browser",
    "tests.support.console",
    "tests.support.console_browser",
    "tests.support.recordings",
    "tests.support.handoffs",
    "tests.support.relay",
    "tests.support.outbox",
    "tests.support.organizations",
    "tests.support.seaweed",
]

_XDIST = isolation.worker_index()  # None unless pytest-xdist runs this process
# The workers, bin/run and the scripts this process starts transcribe with as many threads
# as its own engines (isolation.engine_threads), unless WHISPER_THREADS is set for the run.
os.environ.setdefault("WHISPER_THREADS", str(isolation.engine_threads()))
# This process loads whisper.cpp itself (tests/test_transcription.py), so it prepares its
# environment first, as the service's entry points do.
prepare_process_environment()
_BASE = isolation.base_urls()
PG_URL = isolation.database_url(os.environ.get("TEST_DATABASE_URL", isolation.DEFAULT_DATABASE_URL), _XDIST)
REDIS_URL = isolation.redis_url(_BASE["suite"], _XDIST, isolation.STRIDES["suite"])
#: The fuzz test's own Redis database (TEST_FUZZ_REDIS_URL, default the suite's number minus
#: one: the session's RQ worker listens on the suite's and must not take the fuzzed service's jobs).
FUZZ_REDIS_URL = isolation.redis_url(_BASE["fuzz"], _XDIST, isolation.STRIDES["fuzz"])
#: The relay test's own Redis database (TEST_RELAY_REDIS_URL, default number 7).
RELAY_REDIS_URL = isolation.redis_url(_BASE["relay"], _XDIST, isolation.STRIDES["relay"])
EXAMPLE = json.loads((ROOT / "examples" / "onboarding.json").read_text())


def pytest_configure(config: pytest.Config) -> None:
    processes = getattr(config.option, "numprocesses", None)
    if isinstance(processes, int) and processes > 0:  # xdist's controller, before it starts them
        try:
            isolation.check_numbers(processes)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="session")
def config(clock: Clock) -> Config:
    recreate_database(PG_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    return Config(database_url=PG_URL, redis_url=REDIS_URL, secret_key=SECRET_KEY, clock=clock, db_pool_size=4)


@pytest.fixture(scope="session")
def wsgi_app(config: Config):
    app = create_app(config)
    assert migrate(db.obj), "a fresh database gets the migrations applied"
    return app


_EMPTIER: list[TableEmptier] = []


def app_beside(settings: Config):
    """`create_app(settings)` for a test that needs a second app with other settings over the
    session's database: once built, the session's pool is bound again (create_app binds a
    pool of its own), so the app's requests take the session's open connections. A fresh
    pool's first connections are what a machine at full load delayed past their connect
    timeout (a 503 in a test that otherwise cannot fail), and a pool left bound would be
    every later test's in this process."""
    bound = db.obj
    made = create_app(settings)
    own, _ = db.obj, db.initialize(bound)
    if own is not bound:
        own.close_all()
    return made


@pytest.fixture
def app(wsgi_app, clock: Clock) -> Iterator[webtest.TestApp]:
    """The app over a clean database (every table emptied but the migration log) and no
    console login counters in Redis (another test's failed logins from 127.0.0.1 would
    refuse this one's)."""
    clock.set(WEDNESDAY)
    plumbing.clock.use(clock)  # the session's, whatever app an earlier test built (live_service.serve)
    if not _EMPTIER:
        _EMPTIER.append(TableEmptier(db, [m for m in MODELS if m is not SchemaMigration]))
    with db.connection_context():
        _EMPTIER[0].empty()
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter("console:*"):
        client.delete(key)
    yield webtest.TestApp(wsgi_app)


@pytest.fixture(autouse=True)
def real_time() -> None:
    """The service's clock is the wall clock unless the test takes `app` (the session's
    Clock, moved by hand): whatever app an earlier test in this process built."""
    plumbing.clock.use(plumbing.clock.wall)


@pytest.fixture
def example() -> dict[str, Any]:
    return copy.deepcopy(EXAMPLE)
