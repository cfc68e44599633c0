"""Group commit of recording-complete (intake.py), on the real PostgreSQL.

The checklist: concurrent hand-offs that arrive while a write is in flight share the
next INSERT (one commit for all); each is answered only once its row is stored; the
same CallSid many times in one batch is stored once and created once; a row the
database refuses fails alone, the rest of its batch is stored.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg2
import pytest

from models import Call, Clinic
from plumbing import clock
from plumbing.database import db
from switchboard.intake import GroupCommit
from tests.conftest import PG_URL
from tests.support import clinic, load, organization
from tests.support.servers import wait_until


@pytest.fixture
def clinic_row(app) -> Clinic:
    load(organization(clinic("intake-clinic", tz="America/New_York", country="US")))
    with db.connection_context():
        return Clinic.get(Clinic.slug == "intake-clinic")


def fields(sid: str) -> dict:
    return {"call_sid": sid, "call_from": "+12015550198", "call_to": "+12015550100"}


def hand_off_all(
    commit: GroupCommit, clinics: list[Clinic], sids: list[str]
) -> list[tuple[Call | None, bool | Exception]]:
    """Each (clinic, sid) from its own thread, all while the `call` table is locked by
    another transaction, so the first write blocks and the others queue behind it."""
    results: list = [None] * len(sids)

    def one(i: int) -> None:
        # Only a thread that writes or reads connects (the pool has 4 connections here).
        try:
            results[i] = commit.receive(clinics[i], fields(sids[i]), None, clock.now())
        except Exception as exc:
            results[i] = (None, exc)
        finally:
            if not db.is_closed():
                db.close()

    blocker = psycopg2.connect(PG_URL)
    with blocker.cursor() as cur:
        cur.execute("LOCK TABLE call IN SHARE ROW EXCLUSIVE MODE")
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(sids))]
    try:
        for t in threads:
            t.start()
        assert wait_until(lambda: len(commit._queue) == len(sids) - 1, timeout=20, interval=0.01), (
            "the others did not queue behind the first write"
        )
        assert all(r is None for r in results), "nobody is answered before the commit"
    finally:
        blocker.commit()
        blocker.close()
    for t in threads:
        t.join(timeout=30)
    return results


def stored_sids(prefix: str) -> list[str]:
    with db.connection_context():
        return [c.call_sid for c in Call.select(Call.call_sid).where(Call.call_sid.startswith(prefix))]


def test_concurrent_hand_offs_share_one_insert_and_each_is_stored(clinic_row):
    commit = GroupCommit()
    sids = [f"CA-group-{i}" for i in range(30)]
    results = hand_off_all(commit, [clinic_row] * 30, sids)
    assert commit.writes == 2  # the blocked first one, then the 29 queued behind it at once
    assert all(created is True for _, created in results)
    assert sorted(stored_sids("CA-group-")) == sorted(sids)
    assert {call.call_sid for call, _ in results} == set(sids)


def test_one_call_sid_many_times_in_a_batch_is_stored_and_created_once(clinic_row):
    commit = GroupCommit()
    results = hand_off_all(commit, [clinic_row] * 20, ["CA-group-same"] * 20)
    assert [created for _, created in results].count(True) == 1
    assert len({call.id for call, _ in results}) == 1
    assert stored_sids("CA-group-same") == ["CA-group-same"]


def test_a_row_the_database_refuses_fails_alone(clinic_row):
    commit = GroupCommit()
    gone = Clinic(id=uuid.uuid4(), slug="deleted-meanwhile")  # no such row: foreign key refused
    clinics = [clinic_row] * 10 + [gone] + [clinic_row] * 10
    sids = [f"CA-group-fk-{i}" for i in range(21)]
    results = hand_off_all(commit, clinics, sids)
    failed = [i for i, (_, outcome) in enumerate(results) if isinstance(outcome, Exception)]
    assert failed == [10] and "foreign key" in str(results[10][1]).lower()
    assert sorted(stored_sids("CA-group-fk-")) == sorted(s for i, s in enumerate(sids) if i != 10)


def test_waiting_hand_offs_give_back_their_connections_so_the_writer_gets_one(clinic_row):
    """More requests in flight than pooled connections (gevent workers): the writer may
    find the pool empty, held by requests that then queue behind it. They must hand their
    connections back before waiting, or everything stalls until the pool's 10 s timeout."""
    commit = GroupCommit()
    pool_size = db.obj._max_connections
    holding = threading.Barrier(pool_size + 1)
    results: dict[str, object] = {}

    def hand_off(sid: str, hold_a_connection: bool) -> None:
        try:
            if hold_a_connection:  # as a request whose token lookup took a pooled connection
                db.connect(reuse_if_open=True)
                holding.wait(timeout=30)  # every connection taken
                holding.wait(timeout=30)  # released once the writer waits for one
            results[sid] = commit.receive(clinic_row, fields(sid), None, clock.now())[1]
        except Exception as exc:
            results[sid] = exc
        finally:
            if not db.is_closed():
                db.close()

    holders = [threading.Thread(target=hand_off, args=(f"CA-pool-{i}", True)) for i in range(pool_size)]
    for t in holders:
        t.start()
    holding.wait(timeout=30)
    writer = threading.Thread(target=hand_off, args=("CA-pool-writer", False))
    started = time.monotonic()
    writer.start()
    assert wait_until(lambda: commit._writing, timeout=10, interval=0.005), "the writer did not start"
    holding.wait(timeout=30)  # the holders now queue behind the writer, which waits for a connection
    for t in [*holders, writer]:
        t.join(timeout=30)
    assert all(created is True for created in results.values()), results
    assert sorted(stored_sids("CA-pool-")) == sorted(results)
    assert time.monotonic() - started < 5, "the writer waited for the pool's timeout"
