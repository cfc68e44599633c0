"""The call relay (jobs/relay.py): the stored call is the outbox, the relay queues it.

Each test runs on a database of its own (PostgreSQL, and SQLite as `bin/run` uses it)
and a Redis database of its own, so the session's worker and its relay never see
these calls. The checklist: every stored call queued once, even with two relays at
once; Redis down leaves calls in the outbox, queued once it is back; a pending call
whose job vanished is re-queued by the sweep; a new call wakes a listening relay at
once (PostgreSQL NOTIFY), long before its poll.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from urllib.parse import urlparse

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus

from jobs import leases
from jobs.calls import QUEUE
from jobs.context import RelayWakeUp
from jobs.relay import CallRelay, job_id, requeue_pending, start
from migrations import migrate
from models import Call, Clinic
from plumbing import clock
from plumbing.database import db, open_database
from switchboard.intake import GroupCommit
from tests.support import clinic, load, organization
from tests.support.databases import recreate_database
from tests.support.faults import TcpProxy
from tests.support.relay import RELAY_PG, queued_job_ids, relay_thread
from tests.support.servers import wait_until


def store_calls(count: int) -> list[uuid.UUID]:
    with db.connection_context():
        clinic_row = Clinic.get(Clinic.slug == "relay-clinic")
    commit = GroupCommit()  # as `recording-complete` stores them; it manages its connection
    try:
        return [
            commit.receive(
                clinic_row,
                {"call_sid": f"CA-relay-{uuid.uuid4().hex}", "call_from": "+12015550198", "call_to": "+12015550100"},
                None,
                clock.now(),
            )[0].id
            for _ in range(count)
        ]
    finally:
        db.close()


def unqueued() -> int:
    with db.connection_context():
        return Call.select().where(Call.queued_at.is_null()).count()


def test_every_stored_call_is_queued_once_even_with_two_relays(outbox, queue, relay_config):
    ids = store_calls(60)
    relays = [CallRelay(queue, relay_config, RelayWakeUp(), batch=7) for _ in range(2)]
    counts: list[int] = []
    threads = [threading.Thread(target=lambda r=r: counts.append(r.relay_new())) for r in relays]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sum(counts) == 60, counts
    assert sorted(queued_job_ids(queue)) == sorted(job_id(i) for i in ids)  # stable ids, no duplicate
    assert unqueued() == 0
    assert relays[0].relay_new() == 0  # nothing left in the outbox


def test_redis_down_leaves_calls_in_the_outbox_until_it_is_back(outbox, queue, relay_config):
    store_calls(5)
    down = Queue(QUEUE, connection=redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1))
    with pytest.raises(redis.RedisError):
        CallRelay(down, relay_config, RelayWakeUp()).relay_new()
    assert unqueued() == 5  # claims undone: nothing stranded as "queued"
    assert CallRelay(queue, relay_config, RelayWakeUp()).relay_new() == 5
    assert len(queued_job_ids(queue)) == 5 and unqueued() == 0


def test_sweep_requeues_a_pending_call_whose_job_vanished(outbox, queue, relay_config):
    [lost, kept] = store_calls(2)
    relay = CallRelay(queue, relay_config, RelayWakeUp())
    assert relay.relay_new() == 2
    queue.connection.delete(f"rq:job:{job_id(lost)}")  # as after a Redis restart without persistence
    queue.connection.lrem(queue.key, 0, job_id(lost))
    assert relay.sweep(grace=timedelta(0)) == 1
    assert sorted(queued_job_ids(queue)) == sorted([job_id(kept), job_id(lost)])
    assert relay.sweep(grace=timedelta(0)) == 0  # both live now


def test_sweep_leaves_a_call_whose_job_finished_while_the_sweep_looked(outbox, queue, relay_config, monkeypatch):
    """The sweep reads the pending calls, then their jobs: a job that finished in between
    (its call done, its status FINISHED) is not a lost job."""
    [call_id] = store_calls(1)
    assert CallRelay(queue, relay_config, RelayWakeUp()).relay_new() == 1
    fetch_many = Job.fetch_many

    def finishing_meanwhile(ids, connection, serializer=None):
        with db.connection_context():
            Call.update(state="done").where(Call.id == call_id).execute()
        Job.fetch(job_id(call_id), connection=connection).set_status(JobStatus.FINISHED)
        return fetch_many(ids, connection=connection, serializer=serializer)

    monkeypatch.setattr(Job, "fetch_many", staticmethod(finishing_meanwhile))
    assert requeue_pending(queue, relay_config) == 0
    assert queue.connection.lrange(queue.key, 0, -1).count(job_id(call_id).encode()) == 1


@pytest.mark.parametrize("outbox", ["postgresql"], indirect=True)  # advisory locks
def test_sweep_leaves_a_call_a_live_job_holds_even_when_redis_forgot_the_job(outbox, queue, relay_config):
    """After a Redis restart RQ knows nothing of a job still working on its call; the
    job's lease (jobs/leases.py) says it is alive, and released, the call is queued again."""
    [working, lost] = store_calls(2)
    assert CallRelay(queue, relay_config, RelayWakeUp()).relay_new() == 2
    queue.connection.flushdb()  # as a Redis restart without persistence
    with leases.hold(working) as mine:
        assert mine and leases.held([working, lost]) == {working}
        with leases.hold(working) as second:
            assert not second, "a second job on the same call must leave it alone"
        assert requeue_pending(queue, relay_config) == 1
        assert queued_job_ids(queue) == [job_id(lost)]
    assert requeue_pending(queue, relay_config) == 1  # the job died: its lock went with its session
    assert sorted(queued_job_ids(queue)) == sorted([job_id(lost), job_id(working)])


@pytest.mark.parametrize("outbox", ["postgresql"], indirect=True)  # LISTEN/NOTIFY; SQLite relays poll
def test_a_new_call_wakes_a_listening_relay_long_before_its_poll(outbox, queue, relay_config):
    with relay_thread(queue, relay_config, poll_every=60.0, sweep_every=3600.0) as thread:
        # The first round (outbox empty) is done once the listener is up.
        assert wait_until(lambda: thread.is_alive() and _listeners() >= 1, timeout=10, interval=0.05)
        [call_id] = store_calls(1)
        assert wait_until(lambda: job_id(call_id) in queued_job_ids(queue), timeout=5, interval=0.05), (
            "not queued within 5 s although the relay polls only every 60 s"
        )


def _listeners() -> int:
    with db.connection_context():
        return db.execute_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query LIKE 'LISTEN%%'",
            (RELAY_PG.rsplit("/", 1)[1],),
        ).fetchone()[0]


def test_a_redis_restart_makes_the_relay_requeue_at_once(outbox, relay_config, tmp_path):
    """Redis without persistence comes back empty: the relay notices the new server (its
    run id) and queues every pending call again, without waiting for its periodic sweep."""
    from tests.support.faults import RedisServer

    with RedisServer(tmp_path) as server:
        private = Queue(QUEUE, connection=server.client())
        thread, stop = start(private, relay_config, RelayWakeUp(), poll_every=0.2, sweep_every=3600.0)
        try:
            [call_id] = store_calls(1)
            assert wait_until(lambda: job_id(call_id) in queued_job_ids(private), timeout=10, interval=0.05)
            before = server.client().info()["run_id"]
            server.stop()
            server.start()  # same port, empty (no persistence); the relay may re-queue at any moment now
            assert server.client().info()["run_id"] != before
            assert wait_until(lambda: job_id(call_id) in queued_job_ids(private), timeout=15, interval=0.1), (
                "not re-queued after the Redis restart although the periodic sweep is an hour away"
            )
        finally:
            stop.set()
            thread.join(timeout=10)


@pytest.fixture
def proxied_outbox(wsgi_app) -> Iterator[TcpProxy]:
    """`db` bound, through a TCP proxy the test cuts, to a PostgreSQL database of this test
    alone (restored afterwards): the relay and the ingest see a database outage."""
    recreate_database(RELAY_PG)
    session_database = db.obj
    with TcpProxy(urlparse(RELAY_PG).port or 5432) as proxy:
        database = open_database(proxy.url(RELAY_PG), pooled=False)
        db.initialize(database)
        try:
            migrate(database)
            load(organization(clinic("relay-clinic", tz="America/New_York", country="US")))
            yield proxy
        finally:
            database.close()
            db.initialize(session_database)


def test_an_ingest_failing_on_an_outage_gives_its_call_back_and_is_queued_again_at_the_return(
    proxied_outbox, queue, relay_config
):
    """The ingest of a call fails because the database is unreachable: it does not wait out
    the download retries (scheduled, its clinic's fair-share place held meanwhile); it gives
    the call back, and the relay queues it again within seconds of the database's return."""
    from worker import create_worker

    settings = replace(
        relay_config,
        database_url=proxied_outbox.url(RELAY_PG),
        relay_per_clinic=1,
        recording_retry_delays="60,600",
    )
    first, second = store_calls(2)
    built = create_worker(settings, warm_up=False)  # the jobs below run in this process, handed its context
    thread, stop = start(queue, settings, built.context.relay, poll_every=0.2, sweep_every=3600.0)
    try:
        assert wait_until(lambda: queued_job_ids(queue) == [job_id(first)], timeout=10, interval=0.05)
        proxied_outbox.cut()
        built.worker_class([queue], connection=queue.connection).work(burst=True)  # a worker takes it: it fails
        job = Job.fetch(job_id(first), connection=queue.connection)
        assert job.get_status() == JobStatus.FINISHED and job.return_value() == "deferred"
        assert queued_job_ids(queue) == []
        proxied_outbox.restore()
        back = time.monotonic()
        assert wait_until(lambda: queued_job_ids(queue) == [job_id(first)], timeout=10, interval=0.05), (
            "the call was not queued again after the database came back"
        )
        print(f"queued again {time.monotonic() - back:.2f} s after the database's return")
        assert time.monotonic() - back < 5
        assert job_id(second) not in queued_job_ids(queue), "the fair share holds: one call of the clinic at a time"
    finally:
        stop.set()
        thread.join(timeout=10)
        built.context.relay.close()


def test_importing_the_relay_opens_no_pipe():
    """Nothing happens at import: the relay's wake-up pipe is opened by the worker's start
    (`create_worker` builds a `RelayWakeUp`), not by importing the jobs or the worker."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = (
        "import os\n"
        "def link(fd):\n"
        "    try: return os.readlink(f'/proc/self/fd/{fd}')\n"
        "    except OSError: return ''  # the listing's own descriptor, closed meanwhile\n"
        "def pipes(): return {f for f in os.listdir('/proc/self/fd') if link(f).startswith('pipe:')}\n"
        "before = pipes()\n"
        "import jobs.relay, jobs.context, jobs.calls, jobs.rq_worker, worker\n"
        "print(len(pipes() - before))\n"
        "wake = jobs.context.RelayWakeUp()\n"
        "print(len(pipes() - before))\n"
    )
    opened = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert opened.stdout.split() == ["0", "2"], opened.stdout + opened.stderr[-2000:]
