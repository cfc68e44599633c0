"""What the jobs share about RQ: the queues, the Redis clients, retries, live job states,
and enqueueing under a stable job id."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import redis
from rq import Queue, Retry
from rq.exceptions import DuplicateJobError
from rq.job import Job, JobStatus

CALLS = "calls"  # ingest a stored call: download, transcribe, make its request
RECORDINGS = "recordings"  # re-fetch an expired recording link from the platform
# A worker takes jobs in this order: a doctor waiting on a play comes before a voicemail.
QUEUES = (RECORDINGS, CALLS)

# A job in one of these states will still run (or is running): do not queue another.
# (`CREATED` is the instant between a job's creation and its enqueue.)
LIVE_STATES = frozenset({JobStatus.CREATED, JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED,
                         JobStatus.STARTED})

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
    """A Redis client for ``role`` (``web``, ``metrics``, ``job``, ``worker``)."""
    connect, read = _TIMEOUTS[role]
    return redis.Redis.from_url(url, socket_connect_timeout=connect, socket_timeout=read)


def retry(delays: Sequence[int]) -> Retry | None:
    """RQ's retry after each of ``delays`` seconds in turn; None when there are none."""
    return Retry(max=len(delays), interval=list(delays)) if delays else None


def is_live(job: Job, *, refresh: bool = True) -> bool:
    """Whether RQ still holds the job to run (by its status only; see jobs.calls for the
    check of a STARTED job's worker)."""
    return job.get_status(refresh=refresh) in LIVE_STATES


def enqueue_once(queue: Queue, func: Callable[..., Any], *args: Any, job_id: str, **options: Any) -> Job | None:
    """Enqueue under ``job_id`` unless a job with that id exists (atomically, RQ's
    ``unique``); the job, or None when one existed. Raises ``redis.RedisError``."""
    try:
        return queue.enqueue(func, *args, job_id=job_id, unique=True, **options)
    except DuplicateJobError:
        return None
