"""The web process's metrics: every answer counted and timed (`RequestMetrics`), and
`GET /metrics` reading the service-wide totals from Redis (plumbing/metrics.py)."""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable

import falcon
import redis
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from plumbing.metrics import METHODS, Flusher, Recorder, RedisCollector
from web.errors import APIError


class RequestMetrics:
    """Falcon middleware: count and time every answer by route template, method, status."""

    def __init__(self, flusher: Flusher) -> None:
        self.flusher, self.recorder = flusher, flusher.recorder

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.metrics_started = time.perf_counter()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        started = getattr(req.context, "metrics_started", None)
        if started is None:
            return
        seconds = time.perf_counter() - started
        route = req.uri_template or "unmatched"  # unknown paths: one label, never the raw path
        method = req.method if req.method in METHODS else "OTHER"
        self.recorder.request(route, method, resp.status_code, seconds)
        self.flusher.ensure_running()


class MetricsEndpoint:
    """`GET /metrics`: Prometheus text format. Open unless `METRICS_TOKEN` is set, then
    `Authorization: Bearer <METRICS_TOKEN>`; it carries no tenant data either way."""

    def __init__(self, connection: redis.Redis, queues: Iterable[str], recorder: Recorder, token: str = "") -> None:
        self.connection, self.token, self.recorder = connection, token, recorder
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RedisCollector(connection, queues))

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self.token:
            kind, _, given = (req.get_header("Authorization") or "").partition(" ")
            if kind.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                raise APIError(
                    401,
                    "UNAUTHORIZED",
                    "Metrics need the metrics bearer token.",
                    headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
                )
        self.recorder.flush(self.connection)  # this process's latest requests, the scrape itself excluded
        resp.content_type = CONTENT_TYPE_LATEST
        resp.data = generate_latest(self.registry)
