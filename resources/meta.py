"""Service endpoints without authentication: the OpenAPI document and the health check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import falcon
import peewee as pw
import redis

from web.errors import APIError


class OpenAPIDocument:
    def __init__(self, document: Callable[[], dict[str, Any]]) -> None:
        self.document = document

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.document()


class Healthz:
    def __init__(self, database: pw.Database, queue_redis: redis.Redis) -> None:
        self.database = database
        self.redis = queue_redis

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        checks = {
            "database": self._probe(lambda: self.database.execute_sql("SELECT 1").fetchone()),
            "redis": self._probe(self.redis.ping),
        }
        if any(state != "ok" for state in checks.values()):
            down = ", ".join(name for name, state in checks.items() if state != "ok")
            raise APIError(
                503, "SERVICE_UNAVAILABLE", f"unreachable: {down}", database=checks["database"], redis=checks["redis"]
            )
        resp.media = {"status": "ok", **checks}

    @staticmethod
    def _probe(call: Callable[[], object]) -> str:
        try:
            call()
        except Exception:  # any failure means "not reachable"; details stay in our logs
            return "down"
        return "ok"
