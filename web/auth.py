"""Bearer-token authentication and clinic authorization for `/external/v1/clinics/{slug}`.

Check order (docs/design.md): token (401), clinic exists (404), token covers the clinic and
the scope (403); the body is validated later, by the resource (400). A resource opts in
by declaring `scopes = {"POST": "read", ...}`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import falcon

from models import ApiToken
from plumbing.clock import Clock, as_utc
from plumbing.database import UNREACHABLE
from plumbing.row_cache import RowCache
from web.errors import APIError

_TOUCH_EVERY = timedelta(minutes=1)  # last_used_at is advisory; spare a write per request


def _unauthorized(message: str) -> APIError:
    return APIError(401, "UNAUTHORIZED", message, headers={"WWW-Authenticate": 'Bearer realm="clinic-api"'})


def _known_refusal(text: str, slug: str, now: Any) -> tuple[ApiToken, Any, str] | None:
    try:
        return ApiToken.refused_reason(text, slug, now)
    except UNREACHABLE:
        return None  # the database away: the answer stands, the count has it


class TokenAuth:
    def __init__(self, clock: Clock, cache: RowCache | None = None) -> None:
        self.clock = clock
        self.cache = cache
        # token id -> when this process last wrote its last_used_at; a cached token row
        # keeps the value it was read with, and the touch must not repeat every request.
        self._touched: dict[Any, Any] = {}

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict) -> None:
        scopes: dict[str, str] | None = getattr(resource, "scopes", None)
        if scopes is None or req.method not in scopes:
            return  # public resource, or a method Falcon will answer with 405
        header = req.get_header("Authorization") or ""
        kind, _, text = header.partition(" ")
        if kind.lower() != "bearer" or not text.strip():
            raise _unauthorized("Missing bearer token.")
        now = self.clock()
        found = ApiToken.authorize(text.strip(), params.get("clinic_slug", ""), now, self.cache)
        if found is None:
            if getattr(resource, "records_refusals", False):
                # A known key that expired or was revoked is a refusal of its clinic, to
                # record and tell (web/handoff_refusals.py); an unknown or forged one is only counted.
                req.context.key_refusal = _known_refusal(text.strip(), params.get("clinic_slug", ""), now)
            raise _unauthorized("Invalid, expired or revoked token.")
        token, clinic = found
        # Authenticated from here on: the access log names the token even when the
        # clinic or scope check below refuses it (resources run only if none does).
        req.context.token = token
        if clinic is None:
            raise APIError(404, "CLINIC_NOT_FOUND", "Unknown clinic.")
        if scopes[req.method] not in token.scope_set or not clinic.covered:
            raise APIError(403, "FORBIDDEN", "The token has no access to this clinic or lacks the scope.")
        # Last use, at most a minute stale, at most one write a minute per token: this
        # process asks only when its own record is a minute old, and the conditional UPDATE
        # writes only when no process recorded a use within the minute (then it reads when).
        # Advisory, so never a reason to fail: while the database is unreachable (the token
        # then came from the last known state, plumbing/row_cache.py) it is skipped for a minute.
        last_used = max(filter(None, (token.last_used_at, self._touched.get(token.id))), default=None)
        if last_used is None or as_utc(now) - last_used >= _TOUCH_EVERY:
            if len(self._touched) > 10_000:
                self._touched.clear()
            if self.cache is not None and self.cache.database_unreachable:
                self._touched[token.id] = as_utc(now)
            else:
                try:
                    if self.cache is not None:  # within the routing path's deadline
                        self._touched[token.id] = self.cache.guarded(
                            lambda: ApiToken.touch(token.id, now, _TOUCH_EVERY)
                        )
                    else:
                        self._touched[token.id] = ApiToken.touch(token.id, now, _TOUCH_EVERY)
                except UNREACHABLE:
                    self._touched[token.id] = as_utc(now)
        req.context.clinic = clinic
