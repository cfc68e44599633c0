"""What the jobs share about RQ: the queues, the Redis clients, retries, whether a job is
live, and enqueueing once under a stable job id."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis
from rq import Queue, Retry
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.worker import Worker

CALLS = "calls"  # ingest a stored call: download, transcribe, make its request
RECORDINGS = "recordings"  # re-fetch an expired recording link from the platform
OUTBOX = "outbox"  # deliver what the outbox holds: e-mails, and the events that make them
WEBHOOKS = "webhooks"  # deliver an endpoint's due webhooks (its own worker processes: jobs/webhooks.py)
# A worker takes jobs in this order: a doctor waiting on a play comes before an e-mail, and
# an e-mail (seconds) before a voicemail (minutes of transcription).
QUEUES = (RECORDINGS, OUTBOX, CALLS)

# A job in one of these states will still run (or is running): do not queue another.
# (`CREATED` is the instant between a job's creation and its enqueue.)
LIVE_STATES = frozenset(
    {JobStatus.CREATED, JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED, JobStatus.STARTED}
)

# Socket timeouts (connect, read) in seconds by who holds the client. The web answers
# while a caller or a doctor waits, so it gives up soon; the metrics flush is best effort;
# the platform client's cache may wait for a slower Redis inside a job; the worker's own
# connection blocks on dequeue and must not time out there (None).
_TIMEOUTS: dict[str, tuple[float | None, float | None]] = {
    "web": (2, 5),
    # Rate limits (web/rate_limit.py) are counted on every write request and fail open:
    # a slow Redis must cost a request little before it passes uncounted.
    "limits": (0.5, 0.5),
    "metrics": (1, 2),
    "job": (2, 10),
    "worker": (None, None),
}


def redis_client(url: str, role: str) -> redis.Redis:
    """A Redis client for `role` (`web`, `metrics`, `job`, `worker`)."""
    connect, read = _TIMEOUTS[role]
    return redis.Redis.from_url(url, socket_connect_timeout=connect, socket_timeout=read)


def retry(delays: Sequence[int]) -> Retry | None:
    """RQ's retry after each of `delays` seconds in turn; None when there are none."""
    return Retry(max=len(delays), interval=list(delays)) if delays else None


def is_live(job: Job, *, refresh: bool = True) -> bool:
    """Whether the job will still run or finish by itself: waiting (queued, scheduled,
    deferred), or STARTED by a worker that is alive.

    A worker killed with SIGKILL leaves its job STARTED and its worker key in Redis. Such
    a job is dead when the worker key has expired (`jobs.worker.ClinicWorker` beats during
    jobs and lets it expire `HEARTBEAT_TTL` = 70 s after its last beat) or, at once, when
    the worker ran on this host and its process is gone. `refresh=False` trusts the
    status the job was just fetched with.
    """
    status = job.get_status(refresh=refresh)
    if status not in LIVE_STATES:
        return False
    if status != JobStatus.STARTED:
        return True
    if not job.worker_name:
        return False
    hostname, pid = job.connection.hmget(Worker.redis_worker_namespace_prefix + job.worker_name, "hostname", "pid")
    if hostname is None:
        return False  # the worker stopped beating long enough for its key to expire
    host = hostname.decode() if isinstance(hostname, bytes) else str(hostname)
    return not (host == socket.gethostname() and pid and not _process_alive(int(pid)))


def _process_alive(pid: int) -> bool:
    """A process with this pid exists here and is not a zombie (a killed worker its
    parent has not reaped yet is dead all the same)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by another user
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: existence is all we can tell
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def forget_job(job: Job, queue: Queue) -> None:
    """Delete a dead job and every StartedJobRegistry entry of it (`Job.delete` leaves
    those whose execution record expired), so RQ's abandoned-job cleanup never acts
    later on the fresh job that reuses the id."""
    job.delete()
    registry = StartedJobRegistry(job.origin or queue.name, connection=job.connection)
    entries: list[bytes] = job.connection.zrange(registry.key, 0, -1)  # type: ignore[assignment]
    stale = [entry for entry in entries if entry.decode().split(":", 1)[0] == job.id]
    if stale:
        job.connection.zrem(registry.key, *stale)


def enqueue_once(
    queue: Queue,
    func: Callable[..., Any],
    *args: Any,
    job_id: str,
    replace: Callable[[Job], bool] | None = None,
    **options: Any,
) -> tuple[Job, bool]:
    """The job under `job_id`, and whether this call enqueued it. Raises `redis.RedisError`.

    The job is enqueued unless one with that id exists (atomically: RQ's `unique`), so
    concurrent callers share one job. An existing job is kept, unless it is no longer
    live (`is_live`) and `replace(job)` says it must run again: it is then forgotten and
    enqueued anew. `replace` is asked under a lock on the id, so concurrent callers
    replace a job once, and it may read what the job changed meanwhile.
    """
    while True:
        try:
            return queue.enqueue(func, *args, job_id=job_id, unique=True, **options), True
        except DuplicateJobError:
            pass
        if replace is None:
            job = _fetch(job_id, queue.connection)
            if job is not None:
                return job, False
            continue  # it expired meanwhile: the id is free again
        with queue.connection.lock(f"lock:{job_id}", timeout=10, blocking_timeout=5):
            job = _fetch(job_id, queue.connection)
            if job is not None:
                if is_live(job, refresh=False) or not replace(job):
                    return job, False
                forget_job(job, queue)
        # Enqueued (uniquely) outside the lock: a caller that takes it before then finds no
        # job and races for the id like this one, and the loser shares the winner's job.


def _fetch(job_id: str, connection: redis.Redis) -> Job | None:
    try:
        return Job.fetch(job_id, connection=connection)
    except NoSuchJobError:
        return None
