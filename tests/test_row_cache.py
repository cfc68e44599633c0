"""Token rows cached per web process (row_cache.py), kept current by PostgreSQL NOTIFY.

Every change below is made on a separate database connection, as another process (the
token CLI, an onboarding run) would make it: nothing in this process is told but the
notification. The first request once the notification has arrived must be refused; the
tests wait (bounded) only for that arrival, and count how often it had already arrived
when the change's commit returned (tens of microseconds at most).
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from plumbing import row_cache
from plumbing.database import db
from plumbing.descriptors import readable
from plumbing.row_cache import RowCache
from tests.support import bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.clocks import Clock
from tests.support.row_caches import app_cache, counted_changes, other_connection, token_id

ROUNDS = 25


@pytest.fixture
def clinics(app):
    assert row_cache_enabled(), "the suite runs on PostgreSQL, where the cache is on"
    load(organization(clinic("clinic-a"), clinic("clinic-b")))
    # The change counter polled every 20 ms, not every second: `wait_cached` waits for a poll
    # that has counted the test's own changes, once per round (25 s for 25 rounds). What the
    # poll does is the same (the pooler test, which times the poll, builds a cache of its own).
    cache = app_cache(app)
    every, cache.poll_every = cache.poll_every, 0.02
    yield
    cache.poll_every = every


def row_cache_enabled() -> bool:
    """On for PostgreSQL (NOTIFY); the suite's database is always PostgreSQL."""
    return RowCache.for_database(db.obj).enabled


@pytest.fixture
def token_reads():
    """How many times the token row was read from the database."""
    reads: list[str] = []

    def hook(event) -> None:
        if 'FROM "api_token" AS t' in event.sql:
            reads.append(event.sql)

    database = db.obj
    database.query_hooks.append(hook)
    yield reads
    database.query_hooks.remove(hook)


def check(app, token: str, slug: str = "clinic-a", status: int = 200):
    return app.post(switchboard_url(slug, "is-on-vacation"), headers=bearer(token), status=status)


@contextmanager
def change_seen(app, arrivals: list[bool] | None = None):
    """Run the change in the body, then wait until the app's cache has heard of it."""
    cache = app_cache(app)
    before = cache.get("probe")[1]
    yield
    arrived_at_once = cache.get("probe")[1] != before
    deadline = time.monotonic() + 2
    while cache.get("probe")[1] == before:
        assert time.monotonic() < deadline, "the change was never notified"
    if arrivals is not None:
        arrivals.append(arrived_at_once)


def wait_cached(app, token: str, reads: list[str], slug: str = "clinic-a") -> None:
    """Ask until a request is answered from the cache by a cache that has counted every
    change made so far; bounded. The listener connects in the background on first use, and
    the cache polls the change counter at most once a second and forgets its rows when the
    counter moved: a row cached before that poll saw this test's own setup would be read
    again by a later request (CI once saw it)."""
    cache = app_cache(app)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        counted = counted_changes()
        before = len(reads)
        check(app, token, slug)
        if len(reads) == before and cache.changes_counted == counted:
            return
        time.sleep(0.01)
    raise AssertionError("the token row was never served from the cache")


def test_a_known_token_is_read_from_the_database_once(app, clinics, token_reads):
    token = issue_token(["clinic-a"], ["read"])
    wait_cached(app, token, token_reads)
    before = len(token_reads)
    for _ in range(20):
        check(app, token)
    assert len(token_reads) == before


def test_the_secret_is_checked_on_every_request_even_when_cached(app, clinics, token_reads):
    token = issue_token(["clinic-a"], ["read"])
    wait_cached(app, token, token_reads)
    forged = token[: token.rindex("_") + 1] + "A" * 43
    for _ in range(3):
        check(app, forged, status=401)
    check(app, token)


def test_a_revocation_by_another_process_refuses_the_first_request_after_its_notification(app, clinics, token_reads):
    arrivals: list[bool] = []
    for _ in range(ROUNDS):
        token = issue_token(["clinic-a"], ["read"])
        wait_cached(app, token, token_reads)
        with other_connection() as cur, change_seen(app, arrivals):
            cur.execute("UPDATE api_token SET revoked_at = now() WHERE id = %s", (token_id(token),))
        check(app, token, status=401)
    print(f"notification already there when the revoking commit returned: {sum(arrivals)}/{len(arrivals)}")


def test_a_revocation_in_this_process_refuses_the_very_next_request(app, clinics, token_reads, config):
    import argparse

    from commands import tokens

    for _ in range(ROUNDS):
        token = issue_token(["clinic-a"], ["read"])
        wait_cached(app, token, token_reads)
        assert tokens.cmd_token_revoke(config, argparse.Namespace(token_id=token_id(token))) == 0
        check(app, token, status=401)


def test_an_expiry_moved_into_the_past_is_refused_once_notified(app, clinics, clock, token_reads):
    token = issue_token(["clinic-a"], ["read"], expires_in=timedelta(days=30))
    wait_cached(app, token, token_reads)
    yesterday = (clock() - timedelta(days=1)).astimezone(UTC).replace(tzinfo=None)
    with other_connection() as cur, change_seen(app):
        cur.execute("UPDATE api_token SET expires_at = %s WHERE id = %s", (yesterday, token_id(token)))
    check(app, token, status=401)


def test_a_clinic_taken_from_the_token_is_refused_once_notified(app, clinics, token_reads):
    for _ in range(ROUNDS):
        token = issue_token(["clinic-a", "clinic-b"], ["read"])
        wait_cached(app, token, token_reads, "clinic-b")
        with other_connection() as cur, change_seen(app):
            cur.execute(
                "DELETE FROM api_token_clinic WHERE token_id = %s AND clinic_id = "
                "(SELECT id FROM clinic WHERE slug = 'clinic-b')",
                (token_id(token),),
            )
        check(app, token, "clinic-b", status=403)
        check(app, token, "clinic-a")


def test_a_renamed_clinic_is_not_found_under_its_old_slug(app, clinics, token_reads):
    token = issue_token(["clinic-a"], ["read"])
    wait_cached(app, token, token_reads)
    with other_connection() as cur, change_seen(app):
        cur.execute("UPDATE clinic SET slug = 'clinic-a-renamed' WHERE slug = 'clinic-a'")
    resp = check(app, token, status=404)
    assert resp.json["code"] == "CLINIC_NOT_FOUND"
    check(app, token, "clinic-a-renamed")


def test_without_the_listening_connection_nothing_is_cached_and_revocation_still_holds(app, clinics, token_reads):
    token = issue_token(["clinic-a"], ["read"])
    wait_cached(app, token, token_reads)
    with other_connection() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
            "AND datname = current_database()",
            ("auth-cache listener",),
        )
        assert cur.fetchall(), "no listening connection found"
    cache = app_cache(app)
    deadline = time.monotonic() + 5
    while cache.get("probe")[1] != -1:  # the server's goodbye arrives asynchronously, as a request reads it
        assert time.monotonic() < deadline, "the lost listening connection was never noticed"
        time.sleep(0.005)
    before = len(token_reads)
    check(app, token)  # not listening (reconnects after RECONNECT_EVERY): read from the database
    check(app, token)  # and again
    assert len(token_reads) == before + 2
    with other_connection() as cur:
        cur.execute("UPDATE api_token SET revoked_at = now() WHERE id = %s", (token_id(token),))
    check(app, token, status=401)
    fresh = issue_token(["clinic-a"], ["read"])
    started = time.monotonic()
    wait_cached(app, fresh, token_reads)  # listening again
    assert time.monotonic() - started < row_cache.RECONNECT_EVERY + 5


# --- The cache alone -----------------------------------------------------------------


#: A change as the triggers announce it (counted and notified); a statement-level trigger
#: fires even when no row matches.
CHANGE = "UPDATE clinic SET name = name"


@pytest.fixture
def fake_clock() -> Clock:
    return Clock(1000.0)  # monotonic seconds


@pytest.fixture
def cache(app, fake_clock):
    assert row_cache_enabled(), "the suite runs on PostgreSQL, where the cache is on"
    made = RowCache.for_database(db.obj, ttl=60, clock=fake_clock)
    deadline = time.monotonic() + 10
    while made.get("warm-up")[1] < 0:  # listening starts in the background
        assert time.monotonic() < deadline, "the cache never started listening"
        time.sleep(0.01)
    yield made
    made.close()


def test_a_row_read_before_a_change_is_not_kept_after_it(cache):
    _, generation = cache.get("key")
    with other_connection() as cur:  # the change commits while the request reads the old row
        cur.execute(CHANGE)
    deadline = time.monotonic() + 5
    while cache.get("another key")[1] == generation:  # some other request drains the notification
        assert time.monotonic() < deadline
    cache.put("key", ("old row",), generation)
    assert cache.get("key")[0] is None


def test_a_change_both_notified_and_counted_empties_the_cache_once(cache, fake_clock):
    """The notification makes the cache count at once; the next poll finds the same count
    and keeps what was read after the change (it used to forget it a second time)."""
    cache.get("warm")
    counted = cache.changes_counted
    _, generation = cache.get("key")
    with other_connection() as cur:
        cur.execute(CHANGE)
    deadline = time.monotonic() + 5
    while cache.get("key")[1] == generation:
        assert time.monotonic() < deadline, "the change was never notified"
    assert cache.changes_counted == counted + 1
    _, generation = cache.get("key")
    cache.put("key", ("read after the change",), generation)
    fake_clock.now += cache.poll_every  # the poll that counts the same change again
    assert cache.get("key")[0] == ("read after the change",)
    assert cache.changes_counted == counted + 1


def test_a_notification_without_a_counted_change_keeps_the_rows(cache, fake_clock):
    """The counter decides: a notification whose change it has already counted (or a bare
    NOTIFY) forgets nothing."""
    _, generation = cache.get("key")
    cache.put("key", ("row",), generation)
    listener = cache._listener
    assert listener is not None
    rounds = cache._rounds
    with other_connection() as cur:
        cur.execute(f"NOTIFY {row_cache.CHANNEL}")
    deadline = time.monotonic() + 5
    # Arrived: waiting on the connection, or already read (and counted) by the counter thread,
    # which listens on the same connection and may take it first.
    while not readable([listener.conn], 0) and not listener.conn.notifies and cache._rounds == rounds:
        assert time.monotonic() < deadline, "the notification never arrived"
    assert cache.get("key")[0] == ("row",)


def test_rows_expire_after_the_ttl_even_without_a_notification(cache, fake_clock):
    _, generation = cache.get("key")
    cache.put("key", ("row",), generation)
    fake_clock.now += 59
    assert cache.get("key")[0] == ("row",)
    fake_clock.now += 2
    assert cache.get("key")[0] is None


def test_sqlite_gets_no_cache():
    import peewee as pw

    disabled = RowCache.for_database(pw.SqliteDatabase(":memory:"))
    assert not disabled.enabled and disabled.get("key") == (None, -1)
    disabled.put("key", ("row",), -1)
    assert disabled.get("key") == (None, -1)


def test_last_used_is_written_once_a_minute_though_the_row_is_cached(app, clinics, clock, token_reads):
    writes: list[str] = []

    def hook(event) -> None:
        if event.sql.startswith('UPDATE "api_token" SET "last_used_at"'):
            writes.append(event.sql)

    db.obj.query_hooks.append(hook)
    try:
        start = datetime(2026, 11, 18, 10, 0, tzinfo=UTC)
        clock.set(start)
        token = issue_token(["clinic-a"], ["read"])
        wait_cached(app, token, token_reads)
        assert len(writes) == 1
        for seconds in (10, 30, 59):
            clock.set(start + timedelta(seconds=seconds))
            check(app, token)
        assert len(writes) == 1
        clock.set(start + timedelta(seconds=61))
        check(app, token)
        check(app, token)
        assert len(writes) == 2
    finally:
        db.obj.query_hooks.remove(hook)


# --- Behind a pooler that never delivers NOTIFY (PgBouncer in transaction mode) ------


@pytest.fixture
def deaf_cache(app, fake_clock):
    """A cache whose LISTEN is accepted and never hears anything, as behind such a pooler."""
    made = RowCache.for_database(
        db.obj,
        ttl=60,
        clock=fake_clock,
        channel="nothing_is_ever_sent_here",
        counter=row_cache.GENERATIONS[row_cache.CHANNEL],
    )
    deadline = time.monotonic() + 10
    while made.get("warm-up")[1] < 0:
        assert time.monotonic() < deadline, "the cache never started listening"
        time.sleep(0.01)
    yield made
    made.close()


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE api_token SET revoked_at = now()",  # a revocation
        "UPDATE organization SET patient_sharing = NOT patient_sharing",  # patient sharing turned off
    ],
)
def test_without_notifications_a_change_is_seen_within_a_poll(clinics, deaf_cache, fake_clock, change):
    issue_token(["clinic-a"], ["read"])
    _, generation = deaf_cache.get("key")
    deaf_cache.put("key", ("row",), generation)
    with other_connection() as cur:
        cur.execute(change)
    assert deaf_cache.get("key")[0] == ("row",), "nothing said it changed yet"
    fake_clock.now += deaf_cache.poll_every
    assert deaf_cache.get("key")[0] is None


# --- Writes through the models empty the cache themselves -------------------------


def test_a_model_write_empties_this_process_cache_as_it_commits_without_the_writer_asking(clinics, deaf_cache, clock):
    """No writer calls `changed_here` any more: a write through a model whose Meta watches
    it (`Watched`) does it once it commits. The deaf cache hears no notification, so only
    that can have emptied it."""
    from models import ApiToken, Clinic

    def keep() -> None:
        _, generation = deaf_cache.get("key")
        deaf_cache.put("key", ("row",), generation)
        assert deaf_cache.get("key")[0] == ("row",)

    keep()
    with db.atomic():
        Clinic.update(name="Renamed").where(Clinic.slug == "clinic-a").execute()
        assert deaf_cache.get("key")[0] == ("row",), "not before the commit: a reader would cache the old row"
    assert deaf_cache.get("key")[0] is None, "as the write commits"
    keep()
    with db.atomic() as transaction:
        Clinic.update(name="Not kept").where(Clinic.slug == "clinic-a").execute()
        transaction.rollback()
    assert deaf_cache.get("key")[0] == ("row",), "a rolled back write changed nothing"
    token = issue_token(["clinic-a"], ["read"])  # (its clinics' links do empty it: a coverage may change)
    keep()
    with db.connection_context():
        ApiToken.create(name="not cached yet", secret_hash="0" * 64, scopes="read")  # a new token
        ApiToken.touch(uuid.UUID(token_id(token)), clock(), timedelta(minutes=1))  # a last use
    assert deaf_cache.get("key")[0] == ("row",), "neither changes a cached row"
    with db.connection_context():
        ApiToken.update(revoked_at=clock()).where(ApiToken.id == uuid.UUID(token_id(token))).execute()
    assert deaf_cache.get("key")[0] is None, "a revocation does"
