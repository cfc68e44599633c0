"""Server-side fetching restricted to public https hosts (SSRF-safe).

Three layers, used in this order for every hop (the first request and each
redirect target):

1. `validate_url` -- purely syntactic, no DNS.  Used at HTTP intake
   (a failure there is a 400) and again inside `fetch`.  The host must
   be a DNS *name* with at least two labels; IP literals in any notation are
   refused, as are internal-only names (`localhost`, `.local`,
   `.internal`, ...), userinfo, non-https schemes and odd ports.
2. `check_resolves_public` -- resolves the name exactly once and
   refuses unless *every* address is globally routable.
3. The connection is made to one of those checked addresses (never by name,
   so there is no second lookup a DNS-rebinding attacker could answer
   differently), while TLS is verified against the host *name* (SNI and
   certificate hostname check both use the name).

Why `http.client` with a custom `connect()` rather than urllib3:
the whole request needs one hard deadline (connect + TLS handshake + headers
+ body), not a per-socket-operation timeout that a server dripping one byte
at a time never trips.  That requires owning the socket: we set the socket
timeout to the time remaining before every blocking step and arm a watchdog
that shuts the socket down at the deadline.  `http.client` hands us the
socket directly, never consults proxy environment variables, never retries,
never follows redirects and never pools connections, so every behaviour here
is explicit in this package.  It is the standard library, so no pin is added.

Secrets: recording URLs carry signed query strings, and tokens or the caller's
number in their paths.  Log lines and exception messages only ever contain
`redact_url` output: scheme, host, port and a short hash of the path.

Modules: `errors` (`UnsafeURL`, `FetchError`, which HTTP
statuses are retryable), `urls` (redaction, parsing, `validate_url`),
`addresses` (public-address policy, resolving within a deadline,
`ResolutionCache`), `connection` (the pinned HTTPS connection and its
deadline), `client` (`fetch`), `download` (`sniff_audio`,
`download_audio`).  Everything public is imported here: use
`safe_fetch.X`.
"""

from __future__ import annotations

from .addresses import IPAddress as IPAddress
from .addresses import ResolutionCache, Resolver, check_resolves_public, is_public_ip
from .addresses import system_resolver as system_resolver
from .client import SNIFF_BYTES as SNIFF_BYTES
from .client import USER_AGENT as USER_AGENT
from .client import FetchResult, fetch
from .download import AUDIO_CONTENT_TYPES, DownloadResult, download_audio, sniff_audio
from .errors import FetchError, UnsafeURL, is_retryable_status
from .urls import BLOCKED_SUFFIXES as BLOCKED_SUFFIXES
from .urls import MAX_URL_LENGTH as MAX_URL_LENGTH
from .urls import redact_url, validate_url

# What `from safe_fetch import *` gives.  The constants and helpers imported
# above but not listed (BLOCKED_SUFFIXES, MAX_URL_LENGTH, USER_AGENT, ...) are
# public too, as `safe_fetch.X`.
__all__ = [
    "AUDIO_CONTENT_TYPES",
    "DownloadResult",
    "FetchError",
    "FetchResult",
    "ResolutionCache",
    "Resolver",
    "UnsafeURL",
    "check_resolves_public",
    "download_audio",
    "fetch",
    "is_public_ip",
    "is_retryable_status",
    "redact_url",
    "sniff_audio",
    "validate_url",
]
