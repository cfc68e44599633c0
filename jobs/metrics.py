"""The worker's job metrics: each job run's duration and outcome (plumbing/metrics.py's
families), flushed to Redis after every job."""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from rq import Retry

from plumbing.metrics import JOB_DURATION, JOBS, WORD, Recorder

log = logging.getLogger(__name__)


def _job_function(job: Any) -> str:
    name = (getattr(job, "func_name", None) or "unknown").rsplit(".", 1)[-1]
    return name if WORD.fullmatch(name) else "other"


def job_outcome(job: Any, succeeded: bool) -> str:
    """A finished job's return word ("voice_message", "noop", ...) or "ok", "handed_back"
    for one that returned a `Retry` (its worker stopping); a failed one "retried" (RQ
    scheduled or queued it again) or "failed"."""
    if succeeded:
        result = getattr(job, "_result", None)
        if isinstance(result, Retry):
            return "handed_back"
        return result if isinstance(result, str) and WORD.fullmatch(result) else "ok"
    status = getattr(job, "_status", None)
    return "retried" if str(getattr(status, "value", status)) in ("scheduled", "queued") else "failed"


class JobMetrics:
    """RQ worker mixin (`class W(JobMetrics, SimpleWorker)`): each job run's duration and
    outcome, flushed to Redis together with what the job itself recorded (the same
    `recorder`: the worker's, which its jobs count into through their context)."""

    connection: redis.Redis
    recorder: Recorder

    def perform_job(self, job: Any, queue: Any) -> bool:
        started = time.perf_counter()
        succeeded = False
        try:
            succeeded = super().perform_job(job, queue)  # type: ignore[misc]
            return succeeded
        finally:
            try:
                function, outcome = _job_function(job), job_outcome(job, succeeded)
                self.recorder.count(JOBS, (function, outcome))
                self.recorder.observe(JOB_DURATION, (function, outcome), time.perf_counter() - started)
                self.recorder.flush(self.connection)
            except Exception:  # metrics never break the job loop
                log.exception("job metrics not recorded")
