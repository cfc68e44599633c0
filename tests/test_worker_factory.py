"""The worker is built like the web: `create_worker(config)` builds what a worker process
holds from a configuration alone and hands every job its context; nothing reaches a job
through the environment or a module's global."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime

import pytest
import redis
from rq import Queue, SimpleWorker

from config import Config
from jobs.context import ContextJob, JobContext, takes_context
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY

MOMENT = datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)


@takes_context
def what_time(label: str, *, context: JobContext) -> str:
    """A job that says what its worker's clock and configuration say."""
    return f"{label} {context.now().isoformat()} {context.config.relay_per_clinic}"


def test_a_worker_built_from_a_configuration_hands_its_jobs_its_clock_and_settings():
    from worker import create_worker

    config = Config(
        database_url=PG_URL, redis_url=REDIS_URL, secret_key=SECRET_KEY, clock=lambda: MOMENT, relay_per_clinic=7
    )
    built = create_worker(config, warm_up=False)
    queue = Queue(f"factory-{uuid.uuid4().hex[:8]}", connection=redis.Redis.from_url(REDIS_URL))
    try:
        job = queue.enqueue(what_time, "asked")
        built.worker_class([queue], connection=queue.connection).work(burst=True)
        assert job.get_status(refresh=True) == "finished"
        assert job.return_value() == f"asked {MOMENT.isoformat()} 7"
    finally:
        queue.delete(delete_jobs=True)
        built.context.relay.close()


def test_a_job_that_takes_a_context_fails_loudly_without_a_worker_that_gives_one():
    """No fallback to the environment: a worker without the service's context (a stock RQ
    worker, or a context job class with none set) fails the job, saying why."""
    connection = redis.Redis.from_url(REDIS_URL)
    queue = Queue(f"factory-{uuid.uuid4().hex[:8]}", connection=connection)
    try:
        stock = queue.enqueue(what_time, "stock")
        SimpleWorker([queue], connection=connection).work(burst=True)
        assert stock.get_status(refresh=True) == "failed"
        assert "context" in (stock.latest_result().exc_string or "")
        empty = queue.enqueue(what_time, "empty")
        SimpleWorker([queue], connection=connection, job_class=ContextJob).work(burst=True)
        assert empty.get_status(refresh=True) == "failed"
        assert "without a job context" in (empty.latest_result().exc_string or "")
    finally:
        queue.delete(delete_jobs=True)


def test_the_worker_is_built_in_a_process_with_an_empty_environment():
    """Importing the worker's start and building a worker read no variable: the same
    configuration, handed in, is all it needs (a Python with nothing but PATH set)."""
    script = (
        "from datetime import UTC, datetime\n"
        "from config import Config\n"
        "from worker import create_worker\n"
        "moment = datetime(2031, 2, 3, tzinfo=UTC)\n"
        f"config = Config(database_url={PG_URL!r}, redis_url={REDIS_URL!r}, secret_key={SECRET_KEY!r},"
        " clock=lambda: moment)\n"
        "built = create_worker(config, warm_up=False)\n"
        "names = [q.name for q in built.queues]\n"
        "print(built.context.now().isoformat(), names, built.worker_class.__mro__[1].__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "2031-02-03T00:00:00+00:00 ['recordings', 'outbox', 'calls'] JobMetrics"


@pytest.mark.parametrize("playback", [False, True])
def test_the_playback_worker_serves_plays_and_emails_alone_and_loads_no_model(playback):
    from worker import create_worker

    built = create_worker(Config(database_url=PG_URL, redis_url=REDIS_URL, secret_key=SECRET_KEY), playback=playback)
    try:
        expected = ["recordings", "outbox"] + ([] if playback else ["calls"])
        assert [q.name for q in built.queues] == expected
        assert built.warm_up is not playback
    finally:
        built.context.relay.close()
