"""`has-active-request` from memory: each web process holds a clinic's open requests by
caller, reads them again once a change of a request or a patient is announced (NOTIFY on
its own channel, migration 54) or counted (the poll behind a pooler), and never answers
from a last known state.

The changes are made on a connection of their own, as the worker or another web process
makes them: nothing in this process is told but the notification. The first check once
the notification has arrived must give the new answer; the tests wait (bounded) only for
that arrival.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from models import Clinic
from plumbing import row_cache
from plumbing.database import db
from plumbing.row_cache import RowCache
from resources import switchboard
from tests.support import bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.clocks import Clock
from tests.support.row_caches import app_cache, counted_changes, other_connection

CALLER = "+420601123456"
MERGED = "+420777000111"
#: An open request of Jana's at clinic A, as another process writes it (parameters: `setup`).
OPEN_FOR_JANA = (
    "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at,"
    " urgent) VALUES (gen_random_uuid(), %(clinic-a)s, %(jana)s, 'standard', 't', '', '', now(), false)"
)


@pytest.fixture
def setup(app) -> dict[str, str]:
    """Clinic A and B of one organization, clinic C of another; Jana (calling from
    CALLER), her old record merged into her (MERGED), and Petr of the other organization
    with Jana's number."""
    load(
        organization(
            clinic("clinic-a"),
            clinic("clinic-b"),
            patients=[
                {"key": "jana", "firstName": "Jana", "phone": CALLER, "records": [{"clinic": "clinic-a"}]},
                {"key": "jana-old", "phone": MERGED, "mergedInto": "jana", "records": [{"clinic": "clinic-a"}]},
            ],
        )
    )
    load(
        organization(
            clinic("clinic-c"),
            slug="other-org",
            patients=[{"key": "petr", "firstName": "Petr", "phone": CALLER, "records": [{"clinic": "clinic-c"}]}],
        )
    )
    with other_connection() as cur:
        cur.execute("SELECT slug, id FROM clinic")
        ids = {slug: str(id_) for slug, id_ in cur.fetchall()}
        cur.execute("SELECT first_name, id FROM patient")
        for first, id_ in cur.fetchall():
            ids[{"Jana": "jana", "Petr": "petr"}.get(first, "jana-old")] = str(id_)
    return ids


@pytest.fixture
def fake_clock() -> Clock:
    return Clock(1000.0)  # monotonic seconds


def open_requests(app) -> RowCache:
    """The app's cache of open callers (the has-active-request resource's)."""
    resource = app.app._router.find(switchboard_url("clinic-a", "has-active-request"))[0]
    assert isinstance(resource, switchboard.HasActiveRequest)
    assert resource.open_requests is not None and resource.open_requests.enabled
    return resource.open_requests


@pytest.fixture
def reads():
    """The database reads of has-active-request: whole sets, and single callers."""
    seen: list[str] = []

    def hook(event) -> None:
        if "open_callers" in event.sql or "open_for_caller" in event.sql or '"patient_request" WHERE' in event.sql:
            seen.append("set" if "open_callers" in event.sql or "LIMIT" in event.sql else "one")

    db.obj.query_hooks.append(hook)
    yield seen
    db.obj.query_hooks.remove(hook)


def has(app, token: str, body: dict, slug: str = "clinic-a") -> bool:
    return app.post_json(switchboard_url(slug, "has-active-request"), body, headers=bearer(token)).json[
        "hasActiveRequest"
    ]


def from_memory(app, token: str, reads: list[str]) -> None:
    """Ask until an answer comes from memory with every change so far counted (bounded):
    the listener connects in the background on first use, and a count of the setup's own
    changes may still be due."""
    cache = open_requests(app)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        counted = counted_changes(row_cache.REQUESTS_CHANNEL)
        before = len(reads)
        has(app, token, {"callFrom": CALLER})
        if len(reads) == before and cache.changes_counted == counted:
            return
        time.sleep(0.01)
    raise AssertionError("has-active-request was never answered from memory")


@contextmanager
def change_seen(app) -> Iterator[None]:
    """Run the change in the body, then wait until the app's cache has heard of it."""
    cache = open_requests(app)
    before = cache.get("probe")[1]
    yield
    deadline = time.monotonic() + 2
    while cache.get("probe")[1] == before:
        assert time.monotonic() < deadline, "the change was never notified"


def test_only_the_first_check_after_a_change_reads_the_database(app, setup, reads):
    token = issue_token(["clinic-a"], ["read"])
    from_memory(app, token, reads)
    before = len(reads)
    for phone in (CALLER, MERGED, "+420602000000", "anonymous"):
        has(app, token, {"callFrom": phone})
    has(app, token, {"patientId": setup["jana"]})
    assert len(reads) == before, "answered from memory"


@pytest.mark.parametrize(
    "change, sql, answers",
    [
        (
            "an open request made",
            "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at,"
            " urgent) VALUES (gen_random_uuid(), %(clinic-a)s, %(jana)s, 'standard', 't', '', '', now(), false)",
            {CALLER: True, MERGED: True},
        ),
        (
            "a request of the old, merged record",
            "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at,"
            " urgent) VALUES (gen_random_uuid(), %(clinic-a)s, %(jana-old)s, 'standard', 't', '', '', now(), false)",
            {CALLER: False, MERGED: True},
        ),
        (
            "another clinic's request",
            "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at,"
            " urgent) VALUES (gen_random_uuid(), %(clinic-b)s, %(jana)s, 'standard', 't', '', '', now(), false)",
            {CALLER: False, MERGED: False},
        ),
    ],
)
def test_a_request_made_by_another_process_counts_from_the_first_check_after_its_notification(
    app, setup, reads, change, sql, answers
):
    token = issue_token(["clinic-a"], ["read"])
    from_memory(app, token, reads)
    assert not has(app, token, {"callFrom": CALLER})
    with other_connection() as cur, change_seen(app):
        cur.execute(sql, setup)
    for phone, answer in answers.items():
        assert has(app, token, {"callFrom": phone}) is answer, (change, phone)


@pytest.mark.parametrize(
    "change, sql, answers",
    [
        ("resolved", "UPDATE patient_request SET done_at = now()", {CALLER: False, MERGED: False}),
        ("deleted", "DELETE FROM patient_request", {CALLER: False, MERGED: False}),
        ("her number changed", "UPDATE patient SET phone = '+420602999999' WHERE id = %(jana)s", {CALLER: False}),
        (
            "the old record unmerged",
            "UPDATE patient SET merged_into_id = NULL WHERE id = %(jana-old)s",
            {MERGED: False},
        ),
        (
            "the request moved to the old record",
            "UPDATE patient_request SET patient_id = %(jana-old)s",
            {CALLER: False, MERGED: True},
        ),
        ("moved to clinic B", "UPDATE patient_request SET clinic_id = %(clinic-b)s", {CALLER: False}),
    ],
)
def test_a_change_by_another_process_is_answered_from_the_first_check_after_its_notification(
    app, setup, reads, change, sql, answers
):
    with other_connection() as cur:
        cur.execute(
            OPEN_FOR_JANA,
            setup,
        )
    token = issue_token(["clinic-a"], ["read"])
    from_memory(app, token, reads)
    assert has(app, token, {"callFrom": CALLER}) and has(app, token, {"callFrom": MERGED})
    with other_connection() as cur, change_seen(app):
        cur.execute(sql, setup)
    for phone, answer in answers.items():
        assert has(app, token, {"callFrom": phone}) is answer, (change, phone)


def test_changes_that_cannot_turn_an_answer_keep_it_in_memory(app, setup, reads):
    """A request's other columns (its note, tags, urgency) and a new patient do not empty
    the memory: they change often and never an answer."""
    with other_connection() as cur:
        cur.execute(
            OPEN_FOR_JANA,
            setup,
        )
    token = issue_token(["clinic-a"], ["read"])
    from_memory(app, token, reads)
    before = counted_changes(row_cache.REQUESTS_CHANNEL)
    with other_connection() as cur:
        cur.execute("UPDATE patient_request SET user_note = 'called back', urgent = true")
        cur.execute("UPDATE patient SET first_name = 'Janička' WHERE id = %(jana)s", setup)
        cur.execute(
            "INSERT INTO patient (id, organization_id, first_name, last_name, phone, created_at)"
            " SELECT gen_random_uuid(), organization_id, 'Eva', '', '+420603000000', now() FROM patient"
            " WHERE id = %(jana)s",
            setup,
        )
    assert counted_changes(row_cache.REQUESTS_CHANNEL) == before
    count = len(reads)
    assert has(app, token, {"callFrom": CALLER}) is True
    assert len(reads) == count


def test_request_churn_leaves_the_token_rows_cached(app, setup, reads):
    """A request made or resolved is counted on the requests' own channel: the tokens and
    schedules every check reads stay in memory."""
    token_reads: list[str] = []

    def hook(event) -> None:
        if 'FROM "api_token" AS t' in event.sql:
            token_reads.append(event.sql)

    token = issue_token(["clinic-a"], ["read"])
    from_memory(app, token, reads)
    auth_before = counted_changes()
    db.obj.query_hooks.append(hook)
    try:
        for _ in range(3):
            with other_connection() as cur, change_seen(app):
                cur.execute(
                    "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note,"
                    " created_at, urgent) VALUES (gen_random_uuid(), %(clinic-a)s, %(jana)s, 'standard', 't', '', '',"
                    " now(), false)",
                    setup,
                )
            assert has(app, token, {"callFrom": CALLER}) is True
            with other_connection() as cur, change_seen(app):
                cur.execute("UPDATE patient_request SET done_at = now()")
            assert has(app, token, {"callFrom": CALLER}) is False
    finally:
        db.obj.query_hooks.remove(hook)
    assert counted_changes() == auth_before
    assert token_reads == []
    assert app_cache(app).changes_counted == auth_before


def test_the_memory_agrees_with_the_query_for_every_caller(app, setup):
    """Every caller (numbers of both organizations, ids of every patient, unknown ones)
    against the one-caller query, as requests open and close around the merge chain."""
    from models import PatientRequest

    statements = [
        "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at,"
        " urgent) VALUES (gen_random_uuid(), %(clinic-a)s, %(jana-old)s, 'standard', 't', '', '', now(), false)",
        "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at,"
        " urgent) VALUES (gen_random_uuid(), %(clinic-c)s, %(petr)s, 'standard', 't', '', '', now(), false)",
        "UPDATE patient SET merged_into_id = %(jana-old)s WHERE id = %(jana)s",  # a cycle
        "UPDATE patient_request SET done_at = now()",
        "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at,"
        " urgent) VALUES (gen_random_uuid(), %(clinic-a)s, %(jana)s, 'standard', 't', '', '', now(), false)",
    ]
    callers = [(phone, None) for phone in (CALLER, MERGED, "+420602000000")] + [
        (None, uuid.UUID(setup[key])) for key in ("jana", "jana-old", "petr")
    ]
    callers.append((None, uuid.uuid4()))
    for statement in [None, *statements]:
        if statement:
            with other_connection() as cur:
                cur.execute(statement, setup)
        with db.connection_context():
            for slug in ("clinic-a", "clinic-b", "clinic-c"):
                home = Clinic.get(Clinic.slug == slug)
                held = PatientRequest.open_callers(home, keep=100)
                assert held is not None
                for phone, patient_id in callers:
                    assert held.has(phone, patient_id) == PatientRequest.open_for_caller(home, phone, patient_id), (
                        statement,
                        slug,
                        phone,
                        patient_id,
                    )


def test_a_clinic_with_more_open_callers_than_kept_is_asked_about_each_caller(app, setup, reads, monkeypatch):
    monkeypatch.setattr(switchboard, "OPEN_CALLERS_KEPT", 1)
    with other_connection() as cur:
        cur.execute(
            OPEN_FOR_JANA,
            setup,
        )
    token = issue_token(["clinic-a"], ["read"])
    deadline = time.monotonic() + 10
    while open_requests(app).changes_counted != counted_changes(row_cache.REQUESTS_CHANNEL):
        has(app, token, {"callFrom": CALLER})
        assert time.monotonic() < deadline
    has(app, token, {"callFrom": CALLER})  # the set read once more, found too large, and that kept
    before = len(reads)
    assert has(app, token, {"callFrom": CALLER}) is True  # Jana and her old record: 2 over 1
    assert has(app, token, {"callFrom": "+420602000000"}) is False
    assert reads[before:] == ["one", "one"]


def test_without_notifications_a_request_change_is_seen_within_a_poll(app, setup, fake_clock):
    """Behind a pooler that never delivers NOTIFY the requests' counter is polled too."""
    deaf = RowCache.for_database(
        db.obj, clock=fake_clock, channel="nothing_is_ever_sent_here", counter=row_cache.GENERATIONS["requests_changed"]
    )
    try:
        deadline = time.monotonic() + 10
        while deaf.get("warm-up")[1] < 0:
            assert time.monotonic() < deadline, "the cache never started listening"
            time.sleep(0.01)
        _, generation = deaf.get("key")
        deaf.put("key", ("row",), generation)
        with other_connection() as cur:
            cur.execute("UPDATE patient_request SET done_at = now()")  # no row: a statement, not a change
            cur.execute(
                "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note,"
                " created_at, urgent) VALUES (gen_random_uuid(), %(clinic-a)s, %(jana)s, 'standard', 't', '', '',"
                " now(), false)",
                setup,
            )
        assert deaf.get("key")[0] == ("row",), "nothing said it changed yet"
        fake_clock.now += deaf.poll_every
        assert deaf.get("key")[0] is None
    finally:
        deaf.close()


def test_a_long_transaction_of_requests_holds_no_other_writer_back(app, setup):
    """The count is taken as a transaction commits: one that resolved a request and goes
    on (a retention run, an erasure) does not hold the worker's next request back, nor can
    two writers deadlock on the counter."""
    insert = (
        "INSERT INTO patient_request (id, clinic_id, patient_id, kind, title, clinic_note, user_note, created_at,"
        " urgent) VALUES (gen_random_uuid(), %(clinic-a)s, %(jana)s, 'standard', 't', '', '', now(), false)"
    )
    with other_connection() as cur:
        cur.execute(insert, setup)
    before = counted_changes(row_cache.REQUESTS_CHANNEL)
    with other_connection() as long_one, other_connection() as worker:
        long_one.execute("BEGIN")
        long_one.execute("UPDATE patient_request SET done_at = now()")
        worker.execute("SET lock_timeout = '2s'")
        worker.execute(insert, setup)  # committed at once: no wait on the long transaction's count
        worker.execute("UPDATE patient SET phone = '+420602999999' WHERE id = %(jana-old)s", setup)
        assert counted_changes(row_cache.REQUESTS_CHANNEL) == before + 2, "one count per committed transaction"
        long_one.execute("UPDATE patient_request SET clinic_id = %(clinic-b)s WHERE done_at IS NOT NULL", setup)
        long_one.execute("COMMIT")
    assert counted_changes(row_cache.REQUESTS_CHANNEL) == before + 3, "the long one counted once, as it committed"
