"""The RQ worker of `python manage.py worker`: jobs in-process, with heartbeats during jobs.

Jobs run in the worker's own process (`SimpleWorker`): whisper.cpp's OpenMP threads do not
survive a fork. A stock `SimpleWorker` sends no heartbeat while a job runs, so it registers
each job as STARTED for `job_timeout + 60` seconds (660 s for an ingest) and keeps its own
worker key alive as long. Killed mid-job (SIGKILL, OOM, a lost host), its job would look
alive for 11 minutes and nothing would run it again.

`ClinicWorker` beats every `HEARTBEAT_INTERVAL` seconds from a thread while a job runs,
like RQ's forking worker does for its work horse, so everything a dead worker leaves
behind expires quickly:

- worker key `rq:worker:<name>`: `HEARTBEAT_INTERVAL + 60` = 70 s after the last beat
  (RQ's own choice for the forking worker); `jobs.calls.job_is_live` treats a STARTED job
  whose worker key is gone as dead, and, on the same host, at once when the worker's
  process no longer exists;
- the job's StartedJobRegistry entry: also 70 s, so RQ's abandoned-job cleanup (run by any
  worker every `MAINTENANCE_INTERVAL` = 30 s instead of 10 min) retries it (the ingest's
  `Retry`) or marks it failed, which `requeue_pending` then queues again;
- `WORKER_TTL` = 60 s: an idle worker's key lives 120 s and it wakes every 45 s
  (RQ: dequeue timeout = ttl - 15) to beat and run maintenance.

Recovery after a SIGKILL: a worker starting on the same host re-queues the call at once
(the relay's first sweep, `requeue_pending`: the dead pid); on another host within 70 s
of the kill, plus one maintenance or relay sweep (30 s). The ingest is idempotent and
the request is unique per call, so a job that runs twice still gives one request.

Redis outages: RQ handles a Redis error only inside its blocking dequeue and quits on
one anywhere else in its loop (the beat after a job, the suspension check, maintenance,
the job's bookkeeping). This worker skips those steps and waits for Redis with backoff
instead, so it is still there when Redis returns (tests/test_faults.py).
"""
from __future__ import annotations

import threading
import time

import redis
from rq import SimpleWorker
from rq.job import Job
from rq.queue import Queue
from rq.worker import WorkerStatus

HEARTBEAT_INTERVAL = 10
HEARTBEAT_TTL = HEARTBEAT_INTERVAL + 60
MAINTENANCE_INTERVAL = 30
WORKER_TTL = 60


class ClinicWorker(SimpleWorker):
    """`SimpleWorker` with heartbeats during jobs and the short timings above."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("worker_ttl", WORKER_TTL)
        kwargs.setdefault("maintenance_interval", MAINTENANCE_INTERVAL)
        kwargs.setdefault("job_monitoring_interval", HEARTBEAT_INTERVAL)
        super().__init__(*args, **kwargs)

    # RQ's work loop talks to Redis outside its Redis-outage handling (which covers only
    # the dequeue): the suspension check, maintenance, the beat after each job. A Redis
    # restart there makes a stock worker quit. These steps are skipped instead; the
    # dequeue that follows waits for Redis with backoff, and the relay re-queues.

    def heartbeat(self, timeout: int | None = None, pipeline=None) -> None:
        if pipeline is not None:  # pipelined beats fail at execute(), in the caller
            return super().heartbeat(timeout, pipeline)
        try:
            super().heartbeat(timeout)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.log.warning("Worker %s: heartbeat skipped, Redis unreachable (%s)", self.name, type(exc).__name__)

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None):
        wait = 1.0
        while True:
            try:
                return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                # (RQ sets the worker's state before its own retry loop.) A stop request
                # interrupts this wait like it interrupts a blocking dequeue.
                self.log.warning("Worker %s: Redis unreachable (%s); retrying in %.0f s", self.name,
                                 type(exc).__name__, wait)
                time.sleep(wait)
                wait = min(wait * 2, 30.0)

    def check_for_suspension(self, burst: bool) -> None:
        try:
            super().check_for_suspension(burst)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.log.warning("Worker %s: suspension check skipped, Redis unreachable (%s)", self.name,
                             type(exc).__name__)

    def run_maintenance_tasks(self) -> None:
        try:
            super().run_maintenance_tasks()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.log.warning("Worker %s: maintenance skipped, Redis unreachable (%s)", self.name, type(exc).__name__)

    def get_heartbeat_ttl(self, job: Job) -> int:
        # Registry entry and execution record live this long past each beat (the stock
        # SimpleWorker: the whole job timeout, since it cannot beat during a job).
        return HEARTBEAT_TTL

    def execute_job(self, job: Job, queue: Queue) -> None:
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.job_monitoring_interval):
                try:
                    self.maintain_heartbeats(job)
                except Exception:  # Redis away for a moment: the next beat tries again
                    self.log.warning("Worker %s: heartbeat for job %s failed", self.name, job.id, exc_info=True)

        beater = threading.Thread(target=beat, name=f"heartbeat-{job.id}", daemon=True)
        try:
            self.prepare_execution(job)
            beater.start()
            try:
                self.perform_job(job, queue)
            finally:
                stop.set()
                if beater.is_alive():
                    beater.join(timeout=self.job_monitoring_interval)
            self.set_state(WorkerStatus.IDLE)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Redis went away while RQ recorded the job's start or end. RQ would let the
            # worker quit; stay up instead: the dequeue loop waits for Redis with backoff,
            # and the relay re-queues the call if the job's work was not done.
            self.log.warning("Worker %s: Redis unreachable around job %s (%s); carrying on",
                             self.name, job.id, type(exc).__name__)
