"""What of the API is going away, and the headers that say so on every answer of it:
`Deprecation` (RFC 9745: since when, as `@<seconds since the epoch>`), `Sunset` (RFC 8594:
after when it may stop answering, an HTTP date) and a `Link` to the changelog entry that
announced it (`rel="deprecation"`). The OpenAPI document marks the same operations
`deprecated` with the two dates (web/openapi.py), so a generated client warns at its call.

The policy (CHANGELOG.md): an operation is deprecated in a release whose changelog says so
under "Deprecated", with what replaces it; it keeps working at least `MIN_NOTICE` after the
release that announced it, and goes only in a new major version of the API. A field of an
answer is never removed within a major version."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import falcon

#: The least time between the release that deprecates an operation and its Sunset.
MIN_NOTICE = timedelta(days=180)


@dataclass(frozen=True)
class Deprecation:
    """An operation going away: Falcon's route template and method, the release date that
    announced it, the date after which it may stop answering, and where the changelog says
    what replaces it."""

    method: str
    route: str
    announced: date
    sunset: date
    link: str

    def __post_init__(self) -> None:
        if self.sunset - self.announced < MIN_NOTICE:
            raise ValueError(f"{self.method} {self.route}: a sunset less than {MIN_NOTICE.days} days after its notice")

    def headers(self) -> dict[str, str]:
        since = datetime(self.announced.year, self.announced.month, self.announced.day, tzinfo=UTC)
        until = datetime(self.sunset.year, self.sunset.month, self.sunset.day, tzinfo=UTC)
        return {
            "Deprecation": f"@{int(since.timestamp())}",
            "Sunset": format_datetime(until, usegmt=True),
            "Link": f'<{self.link}>; rel="deprecation"; type="text/markdown"',
        }


#: What is deprecated now. Nothing in API 1.0.0.
DEPRECATED: tuple[Deprecation, ...] = ()


class DeprecationHeaders:
    """Sets the headers of `deprecations` on every answer of their operations, errors
    included (a client must learn of it from whatever answer it gets)."""

    def __init__(self, deprecations: tuple[Deprecation, ...] = DEPRECATED) -> None:
        self.headers = {(d.method.upper(), d.route): d.headers() for d in deprecations}

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool) -> None:
        headers = self.headers.get((req.method, req.uri_template or ""))
        if headers:
            resp.set_headers(headers)
