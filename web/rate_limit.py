"""Per-token request rates: one token cannot flood the service.

Any write token could send unlimited `recording-complete` calls or document writes; a
misbehaving integration would fill the database and the transcription queue. Every
request a resource serves with the `write` scope counts against its token's budget:
`recording-complete` against `RATE_LIMIT_HANDOFFS_PER_MINUTE` (the resource declares
`rate_limit = "handoffs"`), every other write (patientRequests create, PATCH, attachment
upload links and registration, patients import and import-bulk) against
`RATE_LIMIT_WRITES_PER_MINUTE`. Over it: 429 `RATE_LIMITED` with `Retry-After`, its body's
`rateLimit` the same numbers as the fields below.

Every answer to a counted request says where the token stands, in the IETF httpapi draft's
fields (draft-ietf-httpapi-ratelimit-headers-10): `RateLimit-Policy: "writes";q=600;w=60`
(the budget's name, its quota and its window in seconds) and `RateLimit: "writes";r=599;t=1`
(the requests left now and the seconds until the budget is whole again). `r` counts down
with each request and is back at `q` once `t` has passed without one; on a 429 it is 0.

Where 429 sits: after the token (401), the clinic (404) and the scope (403), whose checks
it needs (it counts a known token, never an unauthenticated caller), and before the body
is read (400, 415): a flood costs neither parsing nor validation, and a refused request
counts, so invalid bodies are no way around the budget.

The count lives in Redis, so every web process and every web dyno shares it: a GCRA
(generic cell rate algorithm, a token bucket of `limit` requests refilled evenly over a
minute) in one Lua script, atomic, one round trip, one key per token and budget that
expires once the bucket is full again; Redis's clock, so processes' clocks do not matter.

Redis down fails open: the hand-off path never depends on Redis (docs/operations.md, "Faults and recovery"), and a
limit that cannot be counted is not enforced rather than refusing calls. After a Redis
error the limiter does not ask again for `PAUSE_SECONDS`, so a Redis that hangs costs
one short timeout per process per pause, not one per request.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import falcon
import redis

from web.errors import APIError

log = logging.getLogger(__name__)

PERIOD_MS = 60_000  # limits are per minute
PAUSE_SECONDS = 5.0  # after a Redis error, requests pass uncounted this long

# KEYS[1]: the token's key for one budget. ARGV[1]: the period (ms), ARGV[2]: requests
# allowed per period. The key holds the theoretical arrival time (TAT, ms): when the
# bucket would be full again. A request is allowed when, with its own share of the
# period added, the TAT stays within one period of now; else the answer is how many
# milliseconds until it would. Returns {over, remaining, reset}: `over` 0 when allowed (and
# counted), `remaining` the requests the bucket still holds, `reset` the ms until it is full.
_GCRA = """
if redis.replicate_commands then redis.replicate_commands() end
local period = tonumber(ARGV[1])
local interval = period / tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next_tat = tat + interval
local over = next_tat - now - period
if over > 0 then
  return {math.ceil(over), 0, math.ceil(tat - now)}
end
redis.call('SET', KEYS[1], string.format('%.3f', next_tat), 'PX', math.ceil(next_tat - now))
return {0, math.floor((period - (next_tat - now)) / interval + 1e-6), math.ceil(next_tat - now)}
"""


@dataclass(frozen=True)
class Standing:
    """Where a token stands on one budget after a request: `wait` seconds until it may send
    another (None: this one is allowed and counted), the quota `limit` per `window` seconds,
    the requests `remaining` and the seconds until the budget is whole again (`reset`)."""

    budget: str
    wait: int | None
    limit: int
    window: int
    remaining: int
    reset: int

    def headers(self) -> dict[str, str]:
        """The draft's RateLimit-Policy and RateLimit fields (structured fields: the policy's
        name a quoted string, then its parameters)."""
        return {
            "RateLimit-Policy": f'"{self.budget}";q={self.limit};w={self.window}',
            "RateLimit": f'"{self.budget}";r={self.remaining};t={self.reset}',
        }

    def body(self) -> dict[str, Any]:
        """The same numbers for a 429's body (`rateLimit`, web/schemas/common.py): a generated
        client types the body, never the headers, so the error object it hands over carries them."""
        return {
            "policy": self.budget,
            "limit": self.limit,
            "window": self.window,
            "remaining": self.remaining,
            "reset": self.reset,
        }


class RateLimiter:
    """Budgets per token, counted in Redis; `limits` maps a budget's name to requests
    per minute (0 or less: not limited)."""

    def __init__(
        self,
        connection: redis.Redis,
        limits: dict[str, int],
        clock: Callable[[], float] = time.monotonic,
        period_ms: int = PERIOD_MS,
    ) -> None:
        self.connection = connection
        self.limits = limits
        self.period_ms = period_ms
        self.clock = clock
        self._script = connection.register_script(_GCRA)
        self._paused_until = 0.0

    def count(self, budget: str, token_id: Any) -> Standing | None:
        """Count a request of the token on `budget`: where it stands after it, or None when
        the budget is unlimited or cannot be counted now (Redis down: the request passes)."""
        limit = self.limits.get(budget, 0)
        if limit <= 0 or self.clock() < self._paused_until:
            return None
        try:
            over_ms, remaining, reset_ms = (
                int(n) for n in self._script(keys=[f"clinic:rate:{budget}:{token_id}"], args=[self.period_ms, limit])
            )
        except redis.RedisError as exc:
            self._paused_until = self.clock() + PAUSE_SECONDS
            log.warning("rate limits not counted for %.0f s: Redis unavailable (%s)", PAUSE_SECONDS, type(exc).__name__)
            return None
        return Standing(
            budget=budget,
            wait=max(1, math.ceil(over_ms / 1000)) if over_ms > 0 else None,
            limit=limit,
            window=max(1, math.ceil(self.period_ms / 1000)),
            remaining=max(0, min(limit, remaining)),
            reset=math.ceil(reset_ms / 1000),
        )

    def retry_after(self, budget: str, token_id: Any) -> int | None:
        """Seconds until the token may send another request on `budget` (at least 1), or
        None when this one is allowed (and counted), unlimited, or not countable now."""
        standing = self.count(budget, token_id)
        return None if standing is None else standing.wait


class RateLimit:
    """Middleware, after `TokenAuth`: counts the requests a resource serves with the
    `write` scope against the token's budget (`rate_limit` on the resource, else
    "writes"); 429 over it. Every answer to a counted request carries the RateLimit-Policy
    and RateLimit fields (set on the response here, so an error raised later keeps them)."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object, params: dict) -> None:
        scopes: dict[str, str] = getattr(resource, "scopes", None) or {}
        token = getattr(req.context, "token", None)
        if scopes.get(req.method) != "write" or token is None:
            return
        budget = getattr(resource, "rate_limit", "writes")
        standing = self.limiter.count(budget, token.id)
        if standing is None:
            return
        headers = standing.headers()
        resp.set_headers(headers)
        if standing.wait is not None:
            raise APIError(
                429,
                "RATE_LIMITED",
                f"This token's rate limit for {budget} is reached; retry after {standing.wait} s.",
                headers={"Retry-After": str(standing.wait), **headers},
                rateLimit=standing.body(),
            )
