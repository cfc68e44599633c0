"""The row cache as the tests see it: the app's own cache, a token's id, and a second
connection that writes as another process would."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import psycopg2

from plumbing import row_cache
from plumbing.database import db
from plumbing.row_cache import RowCache


@contextmanager
def other_connection():
    """A connection of its own, standing for another process."""
    conn = psycopg2.connect(dbname=db.obj.database, **db.obj.connect_params)
    conn.autocommit = True
    try:
        yield conn.cursor()
    finally:
        conn.close()


def token_id(token: str) -> str:
    return str(uuid.UUID(token.split("_")[1]))


def app_cache(app) -> RowCache:
    return next(m.cache for m in app.app._unprepared_middleware if isinstance(getattr(m, "cache", None), RowCache))


def counted_changes(channel: str = row_cache.CHANNEL) -> int:
    """The change counter the triggers keep (migrations 10 and 54), as the database has it now."""
    with other_connection() as cur:
        cur.execute(row_cache.GENERATION_SQL, (row_cache.GENERATIONS[channel],))
        return cur.fetchone()[0]


def caught_up(app) -> bool:
    """Whether the app's cache has counted every change committed so far: no change made
    before this call (a test's own setup) will empty it later."""
    return app_cache(app).changes_counted == counted_changes()
