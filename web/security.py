"""Security headers on every answer, in one place (the console's and the API's alike).

- `X-Content-Type-Options: nosniff` and `Referrer-Policy: same-origin` everywhere: a browser
  never guesses a type, and console addresses (request ids, `?q=` names and phone numbers)
  never leave the service in a Referer.
- `Strict-Transport-Security` on answers the browser reached over https (the WSGI scheme, or
  the proxy's X-Forwarded-Proto when TRUST_FORWARDED_PROTO says the proxy sets it).
- The console's pages may not be framed (`X-Frame-Options: DENY`, CSP `frame-ancestors
  'none'`: no clickjacking of one-click Resolve or Revoke) and run only the console's own
  script and stylesheet (no inline script). The recordings play from the switchboard
  platform's https host (the console's recording address redirects there), so `media-src`
  allows https.
- An answer with no Cache-Control of its own gets `no-store`: the API's answers carry patient
  data and presigned links, which no shared or browser cache may keep.
- An answer that sets its own Content-Security-Policy (the API reference at /docs) keeps it.
"""

from __future__ import annotations

from typing import Any

import falcon

from plumbing.forwarded import is_secure

HSTS = "max-age=31536000"
CONSOLE_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "media-src 'self' https:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
# The API's JSON is data, never a document: nothing in it may load or be framed.
DATA_POLICY = "default-src 'none'; frame-ancestors 'none'"


class SecurityHeaders:
    def __init__(self, trust_forwarded_proto: bool, console_prefix: str) -> None:
        self.trust = trust_forwarded_proto
        #: The console's pages are documents, under this path (console/pages.py's PREFIX).
        self.console_prefix = console_prefix

    def _is_console(self, req: falcon.Request) -> bool:
        return req.path == self.console_prefix or req.path.startswith(self.console_prefix + "/")

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool) -> None:
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.set_header("Referrer-Policy", "same-origin")
        if is_secure(req, self.trust):
            resp.set_header("Strict-Transport-Security", HSTS)
        if resp.get_header("Cache-Control") is None:
            resp.set_header("Cache-Control", "no-store")
        if resp.get_header("Content-Security-Policy") is not None:
            return
        if self._is_console(req):
            resp.set_header("X-Frame-Options", "DENY")
            resp.set_header("Content-Security-Policy", CONSOLE_POLICY)
        elif (resp.content_type or falcon.MEDIA_JSON).startswith(falcon.MEDIA_JSON):  # None: the JSON default
            resp.set_header("Content-Security-Policy", DATA_POLICY)
