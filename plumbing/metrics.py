"""Prometheus metrics for the whole service, aggregated in Redis.

Why Redis and not prometheus-client's multiprocess mode: the web runs as several gunicorn
processes on possibly several dynos behind one router, and the worker is another process
(another dyno) that nothing can scrape. Multiprocess mode only sums the processes of one
host, and a scrape through the router would hit a different dyno each time. So every
process adds its increments to Redis hashes, and `GET /metrics` on any web process reads
the service-wide totals at scrape time (with queue depths read from RQ's keys then too).

Here: the families, the in-process buffer (`Recorder`: one per process, built by
`create_app` or the worker's start and handed to what counts), its flushing and the
scrape's collector. The web
process's request middleware and `GET /metrics` are `web/metrics.py`; the worker's job
timing is `jobs/metrics.py`.

- Hot path: a request only bumps an in-process buffer under a lock (a few microseconds;
  no Redis round trip, so a Redis outage costs the intake nothing). A daemon thread per
  web process adds the buffer to Redis every `METRICS_FLUSH_SECONDS`; a scrape flushes its
  own process first. What a process had not flushed when it died is lost (seconds' worth).
- Worker: job durations and outcomes (`JobMetrics`, a worker mixin) and the transcription
  real-time factor (`Recorder.transcription`) are flushed after every job.
- Counters survive restarts and deploys; if Redis is flushed they restart from zero,
  which Prometheus treats as a counter reset.
- Label values are bounded: route templates (`/external/v1/clinics/{clinic_slug}/...`,
  never raw paths, so no clinic slugs or ids), known methods, status codes, job function
  names, short outcome words, model file names. Nothing tenant-specific.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from rq.registry import DeferredJobRegistry, FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry

log = logging.getLogger(__name__)

PREFIX = "clinic"
REDIS_KEY = "clinic:metrics:"  # + family name: one hash per family
_SEP = "\x1f"  # between label values inside a hash field
_PART = "\x1e"  # between the label values and the histogram part (count, sum, le=...)


@dataclass(frozen=True)
class Family:
    name: str  # without the prefix; counters end in _total
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()  # histogram upper bounds; empty: a counter

    @property
    def key(self) -> str:
        return REDIS_KEY + self.name


HTTP_REQUESTS = Family(
    "http_requests_total",
    "HTTP requests answered, by route template, method and status.",
    ("route", "method", "status"),
)
HTTP_DURATION = Family(
    "http_request_duration_seconds",
    "Time from the request reaching the app to its answer.",
    ("route", "method", "status"),
    (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
JOBS = Family(
    "jobs_total",
    "RQ jobs run, by function and outcome (the job's return word, retried or failed).",
    ("function", "outcome"),
)
JOB_DURATION = Family(
    "job_duration_seconds",
    "Wall time of one RQ job run.",
    ("function", "outcome"),
    (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)
TRANSCRIPTION_RTF = Family(
    "transcription_real_time_factor",
    "Transcription time over audio duration, per transcribed call (below 1: faster than real time).",
    ("model",),
    (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0),
)
TRANSCRIPTION_AUDIO = Family("transcription_audio_seconds_total", "Seconds of call audio transcribed.", ("model",))
TRANSCRIPTION_TIME = Family("transcription_seconds_total", "Seconds spent transcribing call audio.", ("model",))
HANDOFFS_REFUSED = Family(
    "handoffs_refused_total",
    "recording-complete hand-offs answered 4xx after the token was authenticated, or 401 for their key (each one a "
    "voicemail that did not arrive: switchboards do not retry a 4xx), by status and code.",
    ("status", "code"),
)
HANDOFF_ANOMALIES = Family(
    "handoff_anomalies_total",
    "Hand-offs stored with something odd about them (switchboard.handoff.ANOMALIES), by anomaly.",
    ("anomaly",),
)
RECORDING_CHECKS = Family(
    "recording_checks_total",
    "Re-fetched recording links checked against the bytes the hand-off delivered, by result "
    "(match; mismatch: served as unavailable, never the other recording).",
    ("result",),
)
RETENTION_DELETED = Family(
    "retention_deleted_total",
    "What the workers' retention rounds deleted, by kind (call_requests, calls, patients, documents, "
    "objects, staff_sessions, password_links, recovery_codes; audit_addresses: old audit events whose "
    "client address was removed).",
    ("kind",),
)
LAST_KNOWN_ANSWERS = Family(
    "last_known_answers_total",
    "Lookups of the routing checks (their token, the clinic's schedule) answered from the last known "
    "state because the database was unreachable, by lookup.",
    ("lookup",),
)
MAIL = Family(
    "mail_total",
    "E-mails the workers handled, by template (urgent, key_expiring, key_refused, password_reset, welcome, "
    "password_link) and outcome (sent; retried: the server was down or said later; failed: refused for good "
    "or two days of tries; nobody: no address any more; gone: what it was about is gone).",
    ("template", "outcome"),
)
HANDOFF_KEYS_REFUSED = Family(
    "handoff_keys_refused_total",
    "recording-complete hand-offs answered 401 for their key, by reason (expired, revoked: a key of the "
    "service, recorded and its clinic's administrators told; unknown: an unknown or forged key, only counted).",
    ("reason",),
)
FAMILIES = (
    HTTP_REQUESTS,
    HTTP_DURATION,
    JOBS,
    JOB_DURATION,
    TRANSCRIPTION_RTF,
    TRANSCRIPTION_AUDIO,
    TRANSCRIPTION_TIME,
    HANDOFFS_REFUSED,
    HANDOFF_ANOMALIES,
    RECORDING_CHECKS,
    RETENTION_DELETED,
    LAST_KNOWN_ANSWERS,
    MAIL,
    HANDOFF_KEYS_REFUSED,
)

#: Gauges the workers set (not counted by the processes: read from the database by a
#: worker's periodic round and written whole), by name: their help.
GAUGES_KEY = "clinic:gauges"
GAUGES = {
    "api_keys_expiring_soon": "API keys (live, not replaced by a rotation) that expire within 14 days.",
    "outbox_pending": "What the workers still have to deliver (e-mails and the events that make them).",
    "outbox_oldest_pending_seconds": "Age of the oldest e-mail or event still to deliver (0: none).",
}


def set_gauges(connection: redis.Redis, values: dict[str, float]) -> None:
    """Write gauges (`GAUGES`' names) as they are now; raises `redis.RedisError`."""
    unknown = set(values) - set(GAUGES)
    if unknown:
        raise ValueError(f"unknown gauges {sorted(unknown)}")
    connection.hset(GAUGES_KEY, mapping={name: repr(float(value)) for name, value in values.items()})


#: Workers alive now: a sorted set of worker names, each scored with the Redis server's time
#: of its last beat (`jobs.worker.ClinicWorker` beats every `WORKER_BEAT_SECONDS`). A beat
#: puts the worker back after Redis lost everything (a restart without persistence), so the
#: count is right within seconds of Redis's return, not at the workers' next start.
WORKERS_ALIVE_KEY = "clinic:workers:alive"
WORKER_BEAT_SECONDS = 5
#: A worker counts as alive this long after its last beat (a few beats missed: still alive).
WORKER_ALIVE_SECONDS = 20
# Both on the Redis server's clock, so that workers and web processes on hosts whose
# clocks differ agree: the beat records its time and drops names silent for an hour.
BEAT_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 3600)
return redis.call('SISMEMBER', KEYS[2], ARGV[2])
"""
ALIVE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
return redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[1]), '+inf')
"""

#: Label values kept bounded: the HTTP methods counted by name, and short words (job
#: functions and outcomes); anything else is counted as "OTHER" / "other".
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
WORD = re.compile(r"[a-z][a-z0-9_]{0,31}")


def _field(values: Iterable[str], part: str | None = None) -> str:
    labels = _SEP.join(str(v).replace(_SEP, "").replace(_PART, "") for v in values)
    return labels if part is None else labels + _PART + part


def _le(bound: float) -> str:
    return "le=" + repr(float(bound))


class Recorder:
    """This process's increments not yet added to Redis: {(hash key, field): amount}."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Held through drain and write: a scrape's flush waits for an in-flight one, so
        # it never reads Redis while this process's increments are halfway there.
        self._flush_lock = threading.Lock()
        self._pending: dict[tuple[str, str], float] = {}
        self._warned_at = 0.0
        self._request_fields: dict[tuple[str, str, int], tuple[str, str, str]] = {}

    def count(self, family: Family, values: tuple[str, ...], amount: float = 1.0) -> None:
        key = (family.key, _field(values))
        with self._lock:
            self._pending[key] = self._pending.get(key, 0.0) + amount

    def observe(self, family: Family, values: tuple[str, ...], value: float) -> None:
        labels = _field(values)
        index = bisect.bisect_left(family.buckets, value)
        # Stored per bucket (not cumulative): one field per observation; cumulated at scrape.
        bucket = _le(family.buckets[index]) if index < len(family.buckets) else "le=+Inf"
        pending, k = self._pending, family.key
        with self._lock:
            for field, amount in (
                (labels + _PART + "count", 1.0),
                (labels + _PART + "sum", value),
                (labels + _PART + bucket, 1.0),
            ):
                pending[(k, field)] = pending.get((k, field), 0.0) + amount

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One answered request: `count` and `observe` at once, their fields made once per
        route, method and status (every request of the web process comes here)."""
        fields = self._request_fields.get((route, method, status))
        if fields is None:
            labels = _field((route, method, str(status)))
            fields = (labels, labels + _PART + "count", labels + _PART + "sum")
            if len(self._request_fields) < 4096:  # routes are templates: a few hundred at most
                self._request_fields[(route, method, status)] = fields
        labels, count, total = fields
        buckets = HTTP_DURATION.buckets
        index = bisect.bisect_left(buckets, seconds)
        bucket = labels + _PART + (_le(buckets[index]) if index < len(buckets) else "le=+Inf")
        pending, requests, duration = self._pending, HTTP_REQUESTS.key, HTTP_DURATION.key
        with self._lock:
            pending[(requests, labels)] = pending.get((requests, labels), 0.0) + 1.0
            for field, amount in ((count, 1.0), (total, seconds), (bucket, 1.0)):
                pending[(duration, field)] = pending.get((duration, field), 0.0) + amount

    def transcription(self, model: str, audio_seconds: float, elapsed_seconds: float) -> None:
        """One transcribed call (worker side; flushed with the job's metrics)."""
        if audio_seconds <= 0:
            return
        self.observe(TRANSCRIPTION_RTF, (model,), elapsed_seconds / audio_seconds)
        self.count(TRANSCRIPTION_AUDIO, (model,), audio_seconds)
        self.count(TRANSCRIPTION_TIME, (model,), elapsed_seconds)

    def flush(self, connection: redis.Redis) -> bool:
        """Add the buffer to Redis in one pipeline; on failure keep it for the next try."""
        with self._flush_lock:
            return self._flush(connection)

    def _flush(self, connection: redis.Redis) -> bool:
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return True
        try:
            # MULTI/EXEC: all or nothing, so a retry after a failure never counts twice.
            with connection.pipeline(transaction=True) as pipe:
                for (key, field), amount in pending.items():
                    pipe.hincrbyfloat(key, field, amount)
                pipe.execute()
            return True
        except redis.RedisError as exc:
            with self._lock:
                for item, amount in pending.items():
                    self._pending[item] = self._pending.get(item, 0.0) + amount
            if time.monotonic() - self._warned_at > 60:  # once a minute while Redis is away
                self._warned_at = time.monotonic()
                log.warning("metrics kept in memory, not flushed (Redis: %s)", type(exc).__name__)
            return False


# --- flushing ---------------------------------------------------------------------------------


class Flusher:
    """A daemon thread per process adding `recorder` to Redis every `interval` seconds.
    Started lazily from the first request of each process, so it also exists in processes
    forked after `create_app` (gunicorn --preload)."""

    def __init__(self, connection: redis.Redis, interval: float, recorder: Recorder) -> None:
        self.connection, self.interval, self.recorder = connection, interval, recorder
        self.pid: int | None = None
        self._start_lock = threading.Lock()

    def ensure_running(self) -> None:
        if self.pid == os.getpid():
            return
        with self._start_lock:
            if self.pid == os.getpid():
                return
            self.pid = os.getpid()
            threading.Thread(target=self._run, name="metrics-flush", daemon=True).start()
            atexit.register(self.recorder.flush, self.connection)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            try:
                self.recorder.flush(self.connection)
            except Exception:  # never let the thread die; the next round tries again
                log.exception("metrics flush failed")


# --- scrape: read the totals and the queues from Redis ---------------------------------------


def _split(field: bytes) -> tuple[list[str], str | None]:
    text = field.decode("utf-8", "replace")
    labels, _, part = text.partition(_PART)
    return labels.split(_SEP), (part or None)


class RedisCollector:
    """prometheus-client collector: the service-wide families and RQ's queues, read from
    Redis at scrape time (one pipeline). Redis away: only `clinic_metrics_redis_up 0`."""

    def __init__(self, connection: redis.Redis, queues: Iterable[str]) -> None:
        self.connection = connection
        self.queues = tuple(queues)

    def _queue_keys(self) -> list[tuple[str, str, str, str]]:
        """(queue, state, redis type, key) for every depth read at scrape."""
        keys = []
        for name in self.queues:
            keys.append((name, "queued", "list", f"rq:queue:{name}"))
            for state, registry in (
                ("started", StartedJobRegistry),
                ("scheduled", ScheduledJobRegistry),
                ("deferred", DeferredJobRegistry),
                ("failed", FailedJobRegistry),
            ):
                keys.append((name, state, "zset", registry(name, connection=self.connection).key))
        return keys

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(f"{PREFIX}_metrics_redis_up", "1 when the metrics store (Redis) answered this scrape.")
        queue_keys = self._queue_keys()
        try:
            with self.connection.pipeline(transaction=False) as pipe:
                for family in FAMILIES:
                    pipe.hgetall(family.key)
                for _, _, kind, key in queue_keys:
                    (pipe.llen if kind == "list" else pipe.zcard)(key)
                pipe.hgetall(GAUGES_KEY)
                pipe.eval(ALIVE_SCRIPT, 1, WORKERS_ALIVE_KEY, WORKER_ALIVE_SECONDS)
                answers = pipe.execute()
        except redis.RedisError as exc:
            log.warning("metrics scrape: Redis unavailable (%s)", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        for family, stored in zip(FAMILIES, answers):
            yield self._family(family, stored)
        depths = answers[len(FAMILIES) : -2]
        gauges = {key.decode(): float(value) for key, value in answers[-2].items()}
        for name, text in GAUGES.items():
            gauge = GaugeMetricFamily(f"{PREFIX}_{name}", text)
            gauge.add_metric([], gauges.get(name, 0.0))
            yield gauge
        jobs = GaugeMetricFamily(
            f"{PREFIX}_queue_jobs",
            "RQ jobs per queue and state (queued, started, scheduled, deferred, failed).",
            labels=("queue", "state"),
        )
        for (queue, state, _, _), depth in zip(queue_keys, depths):
            jobs.add_metric([queue, state], depth)
        yield jobs
        workers = GaugeMetricFamily(
            f"{PREFIX}_workers",
            f"RQ worker processes alive now (beating every {WORKER_BEAT_SECONDS} s, within the last "
            f"{WORKER_ALIVE_SECONDS} s), whatever Redis lost.",
        )
        workers.add_metric([], answers[-1])
        yield workers

    @staticmethod
    def _family(family: Family, stored: dict[bytes, bytes]) -> Metric:
        name = f"{PREFIX}_{family.name}"
        if not family.buckets:
            counter = CounterMetricFamily(name, family.help, labels=family.labels)
            for field, value in sorted(stored.items()):
                labels, _ = _split(field)
                if len(labels) == len(family.labels):
                    counter.add_metric(labels, float(value))
            return counter
        series: dict[tuple[str, ...], dict[str, float]] = {}
        for field, value in stored.items():
            labels, part = _split(field)
            if part and len(labels) == len(family.labels):
                series.setdefault(tuple(labels), {})[part] = float(value)
        histogram = HistogramMetricFamily(name, family.help, labels=family.labels)
        for values, parts in sorted(series.items()):
            running, buckets = 0.0, []
            for bound in family.buckets:
                running += parts.get(_le(bound), 0.0)
                buckets.append((repr(float(bound)), running))
            buckets.append(("+Inf", parts.get("count", 0.0)))
            histogram.add_metric(list(values), buckets, parts.get("sum", 0.0))
        return histogram
