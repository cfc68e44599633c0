"""Test harness: the real PostgreSQL and Redis on loopback, the real WSGI app via WebTest.

TEST_DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/clinic_test) names a
database this suite owns: it is dropped and created at the start of the session.
TEST_REDIS_URL (default redis://127.0.0.1:6379/15) is flushed likewise.
"""
from __future__ import annotations

import copy
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import psycopg2
import pytest
import redis
import webtest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import create_app  # noqa: E402
from config import Config  # noqa: E402
from migrations import migrate  # noqa: E402
from models import MODELS, SchemaMigration, db  # noqa: E402
from tests.support import SECRET_KEY  # noqa: E402

# log_audit: the whole session logs at DEBUG and fails if a secret reaches a log.
# worker_support: the session's one RQ worker.
pytest_plugins = ["tests.log_audit", "tests.https_server", "tests.worker_support"]

PG_URL = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/clinic_test")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
EXAMPLE = json.loads((ROOT / "examples" / "onboarding.json").read_text())


class Clock:
    """A settable wall clock; tests move it instead of sleeping."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 18, 10, 0, tzinfo=timezone.utc)  # a Wednesday

    def __call__(self) -> datetime:
        return self.now

    def set(self, value: datetime) -> None:
        assert value.tzinfo is not None, "tests use aware datetimes"
        self.now = value


def _recreate_database(url: str) -> None:
    parts = urlparse(url)
    name = parts.path.lstrip("/")
    admin = psycopg2.connect(
        host=parts.hostname, port=parts.port or 5432, user=parts.username or "postgres",
        password=parts.password, dbname="postgres",
    )
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    admin.close()


@pytest.fixture(scope="session")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="session")
def config(clock: Clock) -> Config:
    _recreate_database(PG_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    return Config(database_url=PG_URL, redis_url=REDIS_URL, secret_key=SECRET_KEY, clock=clock, db_pool_size=4)


@pytest.fixture(scope="session")
def wsgi_app(config: Config):
    app = create_app(config)
    assert migrate(db.obj), "a fresh database gets the migrations applied"
    return app


@pytest.fixture
def app(wsgi_app, clock: Clock) -> Iterator[webtest.TestApp]:
    """The app over a clean database (every table emptied but the migration log)."""
    clock.set(datetime(2026, 11, 18, 10, 0, tzinfo=timezone.utc))
    tables = ", ".join(f'"{m._meta.table_name}"' for m in MODELS if m is not SchemaMigration)
    with db.connection_context():
        db.execute_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    yield webtest.TestApp(wsgi_app)


@pytest.fixture
def example() -> dict[str, Any]:
    return copy.deepcopy(EXAMPLE)
