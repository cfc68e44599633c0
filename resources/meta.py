"""Service endpoints without authentication: the OpenAPI document and the health checks.

- `GET /livez` (liveness): the process answers. It looks at nothing else, so a platform
  that restarts on it restarts a hung process, never a healthy one whose database or
  Redis is away (a restart would only lose what the process knows).
- `GET /readyz` (readiness; `/healthz` is the same): whether the process can serve. The
  web needs the database, with its schema migrated; while the database is unreachable it
  still serves the routing checks from the last known state (plumbing/row_cache.py), so it
  stays ready, `degraded`, as long as that state is within `ROUTING_LAST_KNOWN_SECONDS`.
  Redis down degrades it (no jobs queued, rate limits off) but does not fail it:
  hand-offs and routing checks work without Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import falcon
import peewee as pw
import redis

from plumbing.forwarded import public_origin
from plumbing.row_cache import RowCache
from web.errors import APIError


class OpenAPIDocument:
    """The document, naming the deployment's address in `servers`: the configured
    PUBLIC_BASE_URL, else the origin the request reached as the trusted proxy reports it,
    else "/" (relative: the address the document was fetched from; a client-written Host
    is not repeated back)."""

    def __init__(
        self,
        document: Callable[[str], dict[str, Any]],
        public_base_url: str = "",
        trust_forwarded_proto: bool = False,
        trusted_proxy_hops: int = 0,
    ) -> None:
        self.document = document
        self.public_base_url = public_base_url
        self.trust = trust_forwarded_proto
        self.hops = trusted_proxy_hops

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        base = self.public_base_url or public_origin(req, self.trust, self.hops) or "/"
        resp.media = self.document(base)


class Liveness:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"status": "alive"}


class Readiness:
    """200 `ok` (everything answers), 200 `degraded` (serving without Redis, or the routing
    checks from the last known state), 503 `SERVICE_UNAVAILABLE` (cannot serve: the
    database unreachable and nothing recent known, or its schema not migrated). The body
    says each part's state: `database` ok | last_known | down, `schema` ok | behind,
    `redis` ok | down."""

    def __init__(
        self,
        database: pw.Database,
        queue_redis: redis.Redis,
        pending_migrations: Callable[[], list[str]],
        cache: RowCache | None = None,
    ) -> None:
        self.database = database
        self.redis = queue_redis
        self.pending_migrations = pending_migrations
        self.cache = cache

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        checks: dict[str, Any] = {"database": "ok", "schema": "ok", "redis": "ok"}
        try:
            if self.pending_migrations():
                checks["schema"] = "behind"
        except Exception:  # any failure means "not reachable"; details stay in our logs
            del checks["schema"]  # unknown while the database does not answer
            age = self.cache.last_known_age() if self.cache is not None else None
            if age is not None and age <= self.cache.max_stale:  # type: ignore[union-attr]  # age implies a cache
                checks["database"] = "last_known"
                checks["lastKnownSeconds"] = round(age, 1)
            else:
                checks["database"] = "down"
        if not self._answers(self.redis.ping):
            checks["redis"] = "down"
        if checks["database"] == "down" or checks.get("schema") == "behind":
            problem = "unreachable: database" if checks["database"] == "down" else "database schema not migrated"
            raise APIError(503, "SERVICE_UNAVAILABLE", problem, headers={"Retry-After": "5"}, **checks)
        degraded = checks["database"] != "ok" or checks["redis"] != "ok"
        resp.media = {"status": "degraded" if degraded else "ok", **checks}

    @staticmethod
    def _answers(call: Callable[[], object]) -> bool:
        try:
            call()
        except Exception:  # any failure means "not reachable"; details stay in our logs
            return False
        return True
