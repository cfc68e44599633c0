"""`fetch`: one request to a public https host, redirects re-checked hop by hop,
the body capped and sniffed, everything within one total deadline."""

from __future__ import annotations

import http.client
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import IO
from urllib.parse import urljoin

from .addresses import Resolver, check_resolves_public
from .connection import _Deadline, _default_ssl_context, _PinnedHTTPSConnection
from .errors import FetchError, UnsafeURL, is_retryable_status
from .urls import _parse, _ParsedURL, redact_url

# The package's one logger ("safe_fetch"), whichever module logs.
log = logging.getLogger(__package__)

# --------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------


@dataclass
class FetchResult:
    status: int
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    content: bytes | None  # None when written to `dest`
    bytes_written: int
    final_url: str  # normalized; may carry a query string -- log redact_url() of it
    content_type: str  # media type, lower-case, no parameters ("" if absent)
    sniffed: str | None = None  # result of the sniff callable, if one was given
    redirects: list[str] = field(default_factory=list)  # redacted hop URLs


_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_SENSITIVE_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
_CHUNK = 64 * 1024
USER_AGENT = "clinic-integration-safe-fetch/1"

#: How many leading bytes of the body `fetch` gathers before calling `sniff`
#: (enough for a RIFF....WAVE header).
SNIFF_BYTES = 12


def _media_type(value: str | None) -> str:
    if not value:
        return ""
    return value.split(";", 1)[0].strip().lower()


def _classify_status(status: int, url: str) -> FetchError:
    return FetchError(f"HTTP {status} from {redact_url(url)}", transient=is_retryable_status(status), status=status)


def _header_dict(msg: http.client.HTTPMessage) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in msg.items():
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def fetch(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    max_bytes: int,
    timeout: float,
    allowed_content_types: Collection[str] | None = None,
    sniff: Callable[[bytes], str | None] | None = None,
    max_redirects: int = 3,
    allow_loopback: bool = False,
    dest: IO[bytes] | None = None,
    ca_certs: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    resolver: Resolver | None = None,
    raise_for_status: bool = True,
) -> FetchResult:
    """Fetch `url` from a public https host; see the package docstring.

    - `max_bytes`: body cap; a larger `Content-Length` fails before any
      body byte is read, otherwise reading stops at `max_bytes + 1`.
    - `timeout`: total seconds for everything (DNS, connect, TLS, all
      redirects, headers and body).
    - `allowed_content_types`: media types (no parameters) accepted for the
      final response; others fail permanently.
    - `sniff`: called with the first bytes of the final body *before*
      anything is written to `dest`; returning `None` fails permanently.
      Its result is `FetchResult.sniffed`.
    - Redirects (301/302/303/307/308) are followed at most `max_redirects`
      times, each target fully re-validated and re-resolved.  303, and
      301/302 of a non-GET/HEAD, become GET without body.  Authorization and
      Cookie headers are dropped when the origin changes.
    - `dest`: when given the body is streamed into it and
      `FetchResult.content` is `None`.  On failure `dest` may hold a
      partial body; `download_audio` handles cleanup.
    - `ca_certs` / `ssl_context`: trust configuration (tests pass a CA
      bundle).  A supplied context must verify certificates and hostnames.
    - `resolver`: injectable `(host, port) -> [ip]` (tests).
    - `raise_for_status`: when False, a non-2xx final answer is returned
      (body still capped) instead of raising.
    """
    if max_bytes < 0 or timeout <= 0:
        raise ValueError("max_bytes must be >= 0 and timeout > 0")
    if ssl_context is not None:
        if ssl_context.verify_mode != ssl.CERT_REQUIRED or not ssl_context.check_hostname:
            raise ValueError("ssl_context must verify certificates and host names")
        ctx = ssl_context
    else:
        ctx = _default_ssl_context(ca_certs)
    method = method.upper()
    if not re.fullmatch(r"[A-Z]{1,16}", method):
        raise ValueError("invalid HTTP method")
    deadline = time.monotonic() + timeout
    allowed = None if allowed_content_types is None else {t.lower() for t in allowed_content_types}
    req_headers = {k: v for k, v in (headers or {}).items() if k.lower() not in ("host", "content-length")}
    for k, v in req_headers.items():
        if any(c in str(k) + str(v) for c in "\r\n\0"):
            raise ValueError("header names and values must not contain CR, LF or NUL")

    current = _parse(url, allow_loopback=allow_loopback)
    hops: list[str] = []
    while True:
        log.debug("safe_fetch %s %s", method, redact_url(current.url))
        response, conn, watchdog = _open(method, current, req_headers, body, ctx, deadline, allow_loopback, resolver)
        try:
            status = response.status
            if status in _REDIRECT_STATUSES:
                location = response.getheader("Location")
                if not location:
                    raise FetchError(
                        f"HTTP {status} without Location from {redact_url(current.url)}", transient=False, status=status
                    )
                if len(hops) >= max_redirects:
                    raise FetchError(f"too many redirects from {redact_url(url)}", transient=False, status=status)
                try:
                    target = _parse(urljoin(current.url, location.strip()), allow_loopback=allow_loopback)
                except UnsafeURL as exc:
                    raise UnsafeURL(f"redirect from {redact_url(current.url)} refused: {exc.reason}") from None
                if (target.host, target.port) != (current.host, current.port):
                    req_headers = {k: v for k, v in req_headers.items() if k.lower() not in _SENSITIVE_HEADERS}
                if status == 303 or (status in (301, 302) and method not in ("GET", "HEAD")):
                    method, body = "GET", None
                hops.append(redact_url(current.url))
                log.info("safe_fetch redirect %s -> %s", redact_url(current.url), redact_url(target.url))
                current = target
                continue
            if raise_for_status and not 200 <= status < 300:
                raise _classify_status(status, current.url)
            ctype = _media_type(response.getheader("Content-Type"))
            if allowed is not None and (ctype or "application/octet-stream") not in allowed:
                raise FetchError(
                    f"content type {ctype or '(none)'!r} not allowed from {redact_url(current.url)}",
                    transient=False,
                    status=status,
                )
            result = _read_body(response, current, watchdog, method, max_bytes, sniff, dest)
            result.status = status
            result.headers = _header_dict(response.msg)
            result.content_type = ctype
            result.redirects = hops
            return result
        except (ssl.SSLError, OSError, http.client.HTTPException) as exc:
            raise _io_error(exc, watchdog, current) from None
        finally:
            watchdog.disarm()
            # The response owns the socket once headers are read (http.client
            # hands it over on "Connection: close"): close both.
            response.close()
            conn.close()


def _io_error(exc: BaseException, watchdog: _Deadline, current: _ParsedURL) -> FetchError:
    where = redact_url(current.url)
    if watchdog.expired() or isinstance(exc, (socket.timeout, TimeoutError)):
        return FetchError(f"total time limit exceeded fetching {where}", transient=True)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return FetchError(f"TLS certificate verification failed for {where}", transient=False)
    if isinstance(exc, ssl.SSLError):
        return FetchError(f"TLS error fetching {where}: {exc.reason or type(exc).__name__}", transient=True)
    return FetchError(f"connection error fetching {where}: {type(exc).__name__}", transient=True)


def _open(
    method: str,
    target: _ParsedURL,
    headers: Mapping[str, str],
    body: bytes | None,
    ctx: ssl.SSLContext,
    deadline: float,
    allow_loopback: bool,
    resolver: Resolver | None,
) -> tuple[http.client.HTTPResponse, http.client.HTTPSConnection, _Deadline]:
    """Resolve, check, connect, send the request and read the response head."""
    if time.monotonic() >= deadline:
        raise FetchError("total time limit exceeded", transient=True)
    addresses = check_resolves_public(
        target.host, target.port, allow_loopback=allow_loopback, resolver=resolver, deadline=deadline
    )
    watchdog = _Deadline(deadline)
    conn = _PinnedHTTPSConnection(target.host, target.port, addresses=addresses, context=ctx, deadline=watchdog)
    try:
        conn.connect()
        watchdog.tick()
        conn.putrequest(method, target.request_target, skip_accept_encoding=True)
        send = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", "Connection": "close", **headers}
        for name, value in send.items():
            conn.putheader(name, value)
        if body is not None or method in ("POST", "PUT", "PATCH"):
            conn.putheader("Content-Length", str(len(body or b"")))
        conn.endheaders(body)
        watchdog.tick()
        response = conn.getresponse()
        return response, conn, watchdog
    except FetchError:
        watchdog.disarm()
        conn.close()
        raise
    except (ssl.SSLError, OSError, http.client.HTTPException) as exc:
        err = _io_error(exc, watchdog, target)
        watchdog.disarm()
        conn.close()
        raise err from None
    except BaseException:
        watchdog.disarm()
        conn.close()
        raise


def _read_body(
    response: http.client.HTTPResponse,
    current: _ParsedURL,
    watchdog: _Deadline,
    method: str,
    max_bytes: int,
    sniff: Callable[[bytes], str | None] | None,
    dest: IO[bytes] | None,
) -> FetchResult:
    where = redact_url(current.url)
    # http.client has already parsed Content-Length into `length` (None for
    # chunked or close-delimited bodies, and for HEAD / 204 / 304).
    declared: int | None = response.length
    if declared is not None and declared > max_bytes:
        raise FetchError(f"response from {where} too large (Content-Length)", transient=False)
    buf = bytearray()
    total = 0
    head = b""
    sniffed: str | None = None
    sniff_pending = sniff is not None

    def emit(data: bytes) -> None:
        if dest is not None:
            dest.write(data)
        else:
            buf.extend(data)

    if method != "HEAD":
        while True:
            watchdog.tick()
            # Never ask for more than one byte past the cap.
            chunk = response.read(min(_CHUNK, max_bytes + 1 - total))
            if watchdog.fired:
                raise FetchError(f"total time limit exceeded fetching {where}", transient=True)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise FetchError(f"response from {where} exceeds {max_bytes} bytes", transient=False)
            if sniff_pending:
                head += chunk
                if len(head) < SNIFF_BYTES:
                    continue
                sniff_pending = False
                sniffed = _run_sniff(sniff, head, where)
                emit(head)
                continue
            emit(chunk)
    if declared is not None and total < declared:
        # read(amt) does not raise IncompleteRead on a short body; we must.
        raise FetchError(f"response from {where} truncated", transient=True)
    if sniff_pending:
        sniffed = _run_sniff(sniff, head, where)
        if head:
            emit(head)
    if watchdog.expired():
        raise FetchError(f"total time limit exceeded fetching {where}", transient=True)
    return FetchResult(
        status=0,
        headers={},
        content=None if dest is not None else bytes(buf),
        bytes_written=total,
        final_url=current.url,
        content_type="",
        sniffed=sniffed,
    )


def _run_sniff(sniff: Callable[[bytes], str | None] | None, head: bytes, where: str) -> str:
    assert sniff is not None
    kind = sniff(head)
    if kind is None:
        raise FetchError(f"content from {where} does not have the expected format", transient=False)
    return kind
