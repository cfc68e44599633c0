"""Server-side fetching restricted to public https hosts (SSRF-safe).

Three layers, used in this order for every hop (the first request and each
redirect target):

1. :func:`validate_url` -- purely syntactic, no DNS.  Used at HTTP intake
   (a failure there is a 400) and again inside :func:`fetch`.  The host must
   be a DNS *name* with at least two labels; IP literals in any notation are
   refused, as are internal-only names (``localhost``, ``.local``,
   ``.internal``, ...), userinfo, non-https schemes and odd ports.
2. :func:`check_resolves_public` -- resolves the name exactly once and
   refuses unless *every* address is globally routable.
3. The connection is made to one of those checked addresses (never by name,
   so there is no second lookup a DNS-rebinding attacker could answer
   differently), while TLS is verified against the host *name* (SNI and
   certificate hostname check both use the name).

Why ``http.client`` with a custom ``connect()`` rather than urllib3:
the whole request needs one hard deadline (connect + TLS handshake + headers
+ body), not a per-socket-operation timeout that a server dripping one byte
at a time never trips.  That requires owning the socket: we set the socket
timeout to the time remaining before every blocking step and arm a watchdog
that shuts the socket down at the deadline.  ``http.client`` hands us the
socket directly, never consults proxy environment variables, never retries,
never follows redirects and never pools connections, so every behaviour here
is explicit in this module.  It is the standard library, so no pin is added.

Secrets: recording URLs carry signed query strings.  Log lines and exception
messages only ever contain :func:`redact_url` output.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import os
import re
import socket
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Collection, Mapping, Sequence
from urllib.parse import quote, urljoin, urlsplit

import idna

log = logging.getLogger(__name__)

__all__ = [
    "AUDIO_CONTENT_TYPES",
    "DownloadResult",
    "FetchError",
    "FetchResult",
    "Resolver",
    "ResolutionCache",
    "UnsafeURL",
    "check_resolves_public",
    "download_audio",
    "fetch",
    "is_public_ip",
    "redact_url",
    "sniff_audio",
    "validate_url",
]

# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class UnsafeURL(ValueError):
    """The URL (or what it resolves / redirects to) is not allowed.

    Always permanent: retrying cannot help.  ``str(exc)`` is safe to log and
    to return to an API client (it never contains a query string).
    """

    transient = False
    status: int | None = None

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FetchError(Exception):
    """The fetch failed.

    ``transient`` tells a job whether retrying later may succeed (timeouts,
    connection errors, 5xx, 429) or not (other 4xx, too large, wrong type).
    ``status`` is the HTTP status when the failure is an HTTP answer.
    """

    def __init__(self, message: str, transient: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.status = status


# --------------------------------------------------------------------------
# Redaction
# --------------------------------------------------------------------------

_MAX_REDACTED_PATH = 200


def redact_url(url: object) -> str:
    """Return ``scheme://host[:port]/path`` without userinfo, query or fragment.

    Never raises: anything unparseable becomes ``"<unparseable url>"``.
    Long paths are truncated (the path may itself carry a token-like segment;
    truncation keeps log lines bounded).
    """
    try:
        text = str(url)
        parts = urlsplit(text)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        try:
            port = parts.port
        except ValueError:
            port = None
        netloc = host if port is None else f"{host}:{port}"
        path = parts.path
        if len(path) > _MAX_REDACTED_PATH:
            path = path[:_MAX_REDACTED_PATH] + "..."
        # Never echo control characters into logs.
        out = f"{parts.scheme}://{netloc}{path}" if parts.scheme else f"{netloc}{path}"
        return "".join(ch if ch.isprintable() else "?" for ch in out)
    except Exception:  # pragma: no cover - defensive
        return "<unparseable url>"


# --------------------------------------------------------------------------
# Syntactic validation (no DNS)
# --------------------------------------------------------------------------

MAX_URL_LENGTH = 4096

#: Suffixes that never name a public host (RFC 6761, RFC 6762 appendix G,
#: RFC 8375 home.arpa, RFC 9476 .alt, common internal conventions).
BLOCKED_SUFFIXES: tuple[str, ...] = (
    "localhost",
    "localdomain",
    "local",
    "internal",
    "intranet",
    "private",
    "corp",
    "home",
    "lan",
    "home.arpa",
    "arpa",  # in-addr.arpa / ip6.arpa reverse names are never file hosts
    "test",
    "invalid",
    "example",
    "onion",
    "alt",
)

_LABEL_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_NUMERIC_LABEL_RE = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")
_PORT_RE = re.compile(r"^[0-9]{1,5}$")
_CONTROL_RE = re.compile(r"[\x00-\x20\x7f\\]")  # whitespace, control characters, backslash
# Characters that get a path/query percent-encoded rather than rejected.
_SAFE_PATH_CHARS = "/%:@!$&'()*+,;=-._~"
_SAFE_QUERY_CHARS = _SAFE_PATH_CHARS + "?"

_LOOPBACK_NAMES = ("localhost",)


def _reject(reason: str) -> UnsafeURL:
    return UnsafeURL(reason)


def _normalize_host(raw_host: str) -> str:
    """Lower-case, IDNA-map and syntax-check a host; raise UnsafeURL."""
    if not raw_host:
        raise _reject("URL has no host")
    if raw_host.startswith("[") or ":" in raw_host:
        raise _reject("IP address hosts are not allowed")
    if "%" in raw_host:
        raise _reject("percent-encoded hosts are not allowed")
    host = raw_host
    if not host.isascii():
        # UTS #46 mapping turns full-width digits, ideographic dots etc. into
        # their ASCII forms, so "１２７。０。０。１" becomes "127.0.0.1" and
        # is then refused as an IP literal below.
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            raise _reject("host is not a valid internationalized name") from None
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise _reject("URL has no host")
    if len(host) > 253:
        raise _reject("host name too long")
    labels = host.split(".")
    for label in labels:
        if not _LABEL_RE.match(label):
            raise _reject("host is not a valid DNS name")
    # WHATWG: a host whose last label is numeric is parsed as an IPv4 address
    # (decimal 2130706433, octal 0177.0.0.1, hex 0x7f.1, short 127.1 ...).
    if _NUMERIC_LABEL_RE.match(labels[-1]):
        raise _reject("IP address hosts are not allowed")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:  # pragma: no cover - caught by the numeric-label rule
        raise _reject("IP address hosts are not allowed")
    return host


def _is_blocked_name(host: str) -> bool:
    return any(host == s or host.endswith("." + s) for s in BLOCKED_SUFFIXES)


def _is_loopback_name(host: str) -> bool:
    return host in _LOOPBACK_NAMES or host.endswith(".localhost")


@dataclass(frozen=True)
class _ParsedURL:
    url: str  # normalized
    host: str  # ASCII name, or "127.0.0.1" under allow_loopback
    port: int
    request_target: str  # path + query, what goes on the request line


def _parse(url: str, *, allow_loopback: bool) -> _ParsedURL:
    if not isinstance(url, str):
        raise _reject("URL must be a string")
    if not url:
        raise _reject("URL is empty")
    if len(url) > MAX_URL_LENGTH:
        raise _reject("URL is too long")
    # Whichever kind of character comes first decides the message, as a per-character scan would.
    control = _CONTROL_RE.search(url)
    if not (url if control is None else url[: control.start()]).isprintable():
        raise _reject("URL contains non-printable characters")
    if control is not None:
        raise _reject("URL contains whitespace, control characters or backslashes")
    scheme, sep, rest = url.partition(":")
    if not sep or scheme.lower() != "https":
        raise _reject("only https URLs are allowed")
    if not rest.startswith("//"):
        raise _reject("URL must be absolute (https://host/...)")
    try:
        parts = urlsplit("https:" + rest)
    except ValueError:  # e.g. unbalanced "[" in the authority
        raise _reject("URL cannot be parsed") from None
    netloc = parts.netloc
    if "@" in netloc:
        raise _reject("URLs with credentials are not allowed")
    # Split host / port ourselves: urlsplit's .port accepts things we do not.
    if netloc.startswith("["):
        raise _reject("IP address hosts are not allowed")
    raw_host, colon, raw_port = netloc.rpartition(":") if ":" in netloc else (netloc, "", "")
    if colon:
        if raw_port == "":
            port = 443
        elif not _PORT_RE.match(raw_port):
            raise _reject("invalid port")
        else:
            port = int(raw_port)
    else:
        port = 443
    if not (port == 443 or 1024 <= port <= 65535):
        raise _reject("port not allowed")

    if allow_loopback and raw_host == "127.0.0.1":
        host = "127.0.0.1"  # test-only: exactly this literal, no other notation
    else:
        host = _normalize_host(raw_host)
        loopback_name = _is_loopback_name(host)
        if loopback_name and allow_loopback:
            pass
        elif _is_blocked_name(host):
            raise _reject("internal host names are not allowed")
        elif "." not in host:
            raise _reject("single-label host names are not allowed")

    path = quote(parts.path, safe=_SAFE_PATH_CHARS) or "/"
    query = quote(parts.query, safe=_SAFE_QUERY_CHARS)
    authority = host if port == 443 else f"{host}:{port}"
    target = path + ("?" + query if query else "")
    # The fragment is dropped: it is never sent to the server.
    return _ParsedURL(url=f"https://{authority}{target}", host=host, port=port, request_target=target)


def validate_url(url: str, *, allow_loopback: bool = False) -> str:
    """Check ``url`` syntactically and return its normalized form.

    No DNS lookup is done.  Raises :class:`UnsafeURL` with a human-readable
    reason (no query string in it).  Normalization: lower-case scheme and
    host, IDNA A-labels, trailing dot removed, default port removed, empty
    path becomes ``/``, fragment dropped, non-ASCII path/query
    percent-encoded.

    ``allow_loopback`` is a test-only setting: it additionally allows the
    names ``localhost`` / ``*.localhost`` and the literal ``127.0.0.1``
    (written exactly so).  It never allows private ranges.
    """
    return _parse(url, allow_loopback=allow_loopback).url


# --------------------------------------------------------------------------
# Address checks
# --------------------------------------------------------------------------

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_V4_BLOCKED = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)
_V6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_V6_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V6_BLOCKED = tuple(
    ipaddress.ip_network(n)
    for n in (
        "2001::/23",  # IETF protocol assignments incl. Teredo 2001::/32
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation (RFC 9637)
    )
)
_V6_6TO4 = ipaddress.ip_network("2002::/16")


def _v4_is_public(ip: ipaddress.IPv4Address) -> bool:
    if not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_loopback:
        return False
    if ip.is_link_local or ip.is_private or ip.is_unspecified:
        return False
    return not any(ip in net for net in _V4_BLOCKED)


def is_public_ip(address: str | IPAddress, *, allow_loopback: bool = False) -> bool:
    """True when ``address`` is a globally routable unicast address.

    IPv6 must be global unicast (2000::/3) outside documentation / protocol
    ranges; 6to4 and NAT64 (64:ff9b::/96) addresses are judged by the IPv4
    address they embed; IPv4-mapped / IPv4-compatible forms are refused.
    ``allow_loopback`` (tests only) additionally admits 127.0.0.0/8 and ::1.
    """
    try:
        if isinstance(address, str):
            if "%" in address:  # scoped (zone id) => link-local
                return False
            ip: IPAddress = ipaddress.ip_address(address)
        else:
            ip = address
    except ValueError:
        return False
    if allow_loopback and ip.is_loopback:
        return True
    if isinstance(ip, ipaddress.IPv4Address):
        return _v4_is_public(ip)
    if ip.ipv4_mapped is not None:
        return False
    if ip in _V6_NAT64:
        return _v4_is_public(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip not in _V6_GLOBAL_UNICAST:
        return False
    if any(ip in net for net in _V6_BLOCKED):
        return False
    if ip in _V6_6TO4:
        embedded = ip.sixtofour
        return embedded is not None and _v4_is_public(embedded)
    if ip.teredo is not None:  # pragma: no cover - inside 2001::/23
        return False
    return bool(ip.is_global) and not ip.is_multicast and not ip.is_private


Resolver = Callable[[str, int], Sequence[str]]
"""``resolver(host, port) -> [ip, ...]``.  Injectable for tests."""


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with ``getaddrinfo`` (TCP), preserving order, de-duplicated."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    out: list[str] = []
    for family, _type, _proto, _canon, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        addr = str(sockaddr[0])
        if addr not in out:
            out.append(addr)
    return out


def _resolve_with_deadline(resolver: Resolver, host: str, port: int, deadline: float | None) -> list[str]:
    """Run the resolver in a helper thread so DNS counts against the deadline.

    getaddrinfo cannot be interrupted; on timeout the helper thread is left
    to finish on its own (daemon) and its result is discarded.
    """
    if deadline is None:
        return list(resolver(host, port))
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["result"] = list(resolver(host, port))
        except BaseException as exc:  # noqa: BLE001 - re-raised in caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="safe-fetch-dns", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise FetchError(f"timed out resolving {host}", transient=True)
    if "error" in box:
        raise box["error"]
    return box["result"]


def check_resolves_public(
    host: str,
    port: int = 443,
    *,
    allow_loopback: bool = False,
    resolver: Resolver | None = None,
    deadline: float | None = None,
) -> list[str]:
    """Resolve ``host`` once and return its addresses if all are public.

    Raises :class:`UnsafeURL` if any address is not public (one bad address
    is enough: an attacker controlling DNS could otherwise mix a public and
    a private answer), and :class:`FetchError` when the name does not
    resolve (transient for temporary resolver failures).
    ``deadline`` is a ``time.monotonic()`` value.
    """
    resolve = resolver or system_resolver
    if allow_loopback and host == "127.0.0.1":
        addresses = ["127.0.0.1"]
    else:
        try:
            addresses = _resolve_with_deadline(resolve, host, port, deadline)
        except socket.gaierror as exc:
            transient = exc.errno in (socket.EAI_AGAIN, getattr(socket, "EAI_SYSTEM", None))
            raise FetchError(f"cannot resolve host {host}", transient=transient) from None
        except (OSError, UnicodeError) as exc:
            raise FetchError(f"cannot resolve host {host}: {type(exc).__name__}", transient=True) from None
    if not addresses:
        raise FetchError(f"host {host} has no addresses", transient=False)
    for addr in addresses:
        if not is_public_ip(addr, allow_loopback=allow_loopback):
            raise UnsafeURL(f"host {host} resolves to a non-public address")
    return list(addresses)


class ResolutionCache:
    """Verdicts of :func:`check_resolves_public` per host, kept for ``ttl`` seconds.

    For the intake check only, where a lookup per hand-off would sit on the request's
    hot path while every call of a platform names the same few hosts. It never
    weakens a fetch: :func:`fetch` always resolves and checks again.
    """

    def __init__(self, ttl: float = 60.0, max_hosts: int = 1024, resolver: Resolver | None = None) -> None:
        self.ttl = ttl
        self.max_hosts = max_hosts
        self.resolver = resolver
        self._lock = threading.Lock()
        self._verdicts: dict[tuple[str, bool], tuple[float, UnsafeURL | None]] = {}

    def check(self, host: str, *, allow_loopback: bool = False, deadline: float | None = None) -> None:
        """Raise :class:`UnsafeURL` for a host that resolves to a non-public address;
        :class:`FetchError` (not cached) when it does not resolve now."""
        key, now = (host, allow_loopback), time.monotonic()
        with self._lock:
            cached = self._verdicts.get(key)
        if cached is None or cached[0] <= now:
            try:
                check_resolves_public(host, allow_loopback=allow_loopback, deadline=deadline, resolver=self.resolver)
                verdict: UnsafeURL | None = None
            except UnsafeURL as exc:
                verdict = exc
            with self._lock:
                if len(self._verdicts) >= self.max_hosts:
                    self._verdicts.clear()
                self._verdicts[key] = (now + self.ttl, verdict)
            cached = (0.0, verdict)
        if cached[1] is not None:
            raise UnsafeURL(cached[1].reason)


# --------------------------------------------------------------------------
# Content sniffing
# --------------------------------------------------------------------------

#: Declared media types accepted for recordings.  ``application/octet-stream``
#: is listed because :func:`download_audio` always sniffs the magic bytes.
AUDIO_CONTENT_TYPES: frozenset[str] = frozenset(
    {
        "audio/mpeg",
        "audio/mp3",
        "audio/wav",
        "audio/x-wav",
        "audio/wave",
        "application/octet-stream",
    }
)

SNIFF_BYTES = 12


def sniff_audio(head: bytes) -> str | None:
    """Return ``"mp3"``, ``"wav"`` or ``None`` from the first bytes of a file."""
    if len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:3] == b"ID3":
        return "mp3"
    # MPEG audio frame sync: 11 set bits, then a valid version / layer.
    if len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0:
        version = (head[1] >> 3) & 0x03
        layer = (head[1] >> 1) & 0x03
        if version != 0x01 and layer != 0x00:
            return "mp3"
    return None


# --------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------


@dataclass
class FetchResult:
    status: int
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    content: bytes | None  # None when written to ``dest``
    bytes_written: int
    final_url: str  # normalized; may carry a query string -- log redact_url() of it
    content_type: str  # media type, lower-case, no parameters ("" if absent)
    sniffed: str | None = None  # result of the sniff callable, if one was given
    redirects: list[str] = field(default_factory=list)  # redacted hop URLs


@dataclass
class DownloadResult:
    path: str
    bytes_written: int
    content_type: str
    format: str  # "mp3" or "wav"
    final_url: str


_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_SENSITIVE_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
_CHUNK = 64 * 1024
USER_AGENT = "clinic-integration-safe-fetch/1"


def _default_ssl_context(ca_certs: str | None) -> ssl.SSLContext:
    if ca_certs:
        ctx = ssl.create_default_context(cafile=ca_certs)
    else:
        ctx = ssl.create_default_context()
        try:
            import certifi

            ctx.load_verify_locations(certifi.where())
        except Exception:  # pragma: no cover - certifi missing: system store only
            pass
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class _Deadline:
    """Hard total deadline for one hop's socket.

    Before every blocking step the socket timeout is set to the time left;
    a watchdog timer additionally shuts the socket down at the deadline so
    that a server dripping bytes inside one buffered read cannot extend it.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._timer: threading.Timer | None = None
        self.fired = False

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise FetchError("total time limit exceeded", transient=True)
        return left

    def arm(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self._timer is None:
                self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._fire)
                self._timer.daemon = True
                self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sock = self._sock
            if sock is not None:
                try:
                    # Base-class shutdown works on the fd directly, also for
                    # an SSLSocket, without touching its SSL object.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass

    def tick(self) -> None:
        """Refresh the socket timeout to the time left (or raise)."""
        left = self.remaining()
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.settimeout(left)
                except OSError:
                    pass

    def expired(self) -> bool:
        return self.fired or time.monotonic() >= self.deadline

    def disarm(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._sock = None


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS connection whose TCP peer is a pre-checked IP address.

    ``host`` (used for the Host header, SNI and the certificate check) stays
    the name from the URL; ``connect()`` never resolves it.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        addresses: Sequence[str],
        context: ssl.SSLContext,
        deadline: _Deadline,
    ) -> None:
        super().__init__(host, port, context=context)
        self._addresses = list(addresses)
        self._ctx = context
        self._deadline = deadline

    def connect(self) -> None:
        last: Exception | None = None
        for addr in self._addresses:
            ip = ipaddress.ip_address(addr)
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            try:
                self._deadline.arm(sock)
                sock.settimeout(self._deadline.remaining())
                sock.connect((addr, self.port))
            except FetchError:
                sock.close()
                raise
            except OSError as exc:
                sock.close()
                last = exc
                if self._deadline.expired():
                    raise FetchError("total time limit exceeded while connecting", transient=True) from None
                continue
            tls: ssl.SSLSocket | None = None
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # SNI and certificate hostname check use the URL's name.
                tls = self._ctx.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
                self._deadline.arm(tls)
                tls.settimeout(self._deadline.remaining())
                tls.do_handshake()
            except BaseException:
                (tls or sock).close()  # wrap_socket detaches ``sock``
                raise
            self.sock = tls
            return
        assert last is not None
        raise last


def _media_type(value: str | None) -> str:
    if not value:
        return ""
    return value.split(";", 1)[0].strip().lower()


def _classify_status(status: int, url: str) -> FetchError:
    transient = status >= 500 or status in (408, 425, 429)
    return FetchError(f"HTTP {status} from {redact_url(url)}", transient=transient, status=status)


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
    """Fetch ``url`` from a public https host; see the module docstring.

    - ``max_bytes``: body cap; a larger ``Content-Length`` fails before any
      body byte is read, otherwise reading stops at ``max_bytes + 1``.
    - ``timeout``: total seconds for everything (DNS, connect, TLS, all
      redirects, headers and body).
    - ``allowed_content_types``: media types (no parameters) accepted for the
      final response; others fail permanently.
    - ``sniff``: called with the first bytes of the final body *before*
      anything is written to ``dest``; returning ``None`` fails permanently.
      Its result is ``FetchResult.sniffed``.
    - Redirects (301/302/303/307/308) are followed at most ``max_redirects``
      times, each target fully re-validated and re-resolved.  303, and
      301/302 of a non-GET/HEAD, become GET without body.  Authorization and
      Cookie headers are dropped when the origin changes.
    - ``dest``: when given the body is streamed into it and
      ``FetchResult.content`` is ``None``.  On failure ``dest`` may hold a
      partial body; :func:`download_audio` handles cleanup.
    - ``ca_certs`` / ``ssl_context``: trust configuration (tests pass a CA
      bundle).  A supplied context must verify certificates and hostnames.
    - ``resolver``: injectable ``(host, port) -> [ip]`` (tests).
    - ``raise_for_status``: when False, a non-2xx final answer is returned
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
    # http.client has already parsed Content-Length into ``length`` (None for
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


def download_audio(
    url: str,
    dest_path: str | os.PathLike[str],
    *,
    max_bytes: int,
    timeout: float,
    allow_loopback: bool = False,
    headers: Mapping[str, str] | None = None,
    ca_certs: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    resolver: Resolver | None = None,
    max_redirects: int = 3,
) -> DownloadResult:
    """Download an MP3/WAV recording to ``dest_path`` atomically.

    The body goes to a temporary file in the same directory, is fsynced and
    renamed over ``dest_path`` only when complete and valid; on any failure
    the temporary file is removed and ``dest_path`` is left untouched.
    Accepts :data:`AUDIO_CONTENT_TYPES`; the magic bytes must always look
    like MP3 (ID3 / frame sync) or WAV (RIFF....WAVE), whatever the declared
    type -- which is what makes ``application/octet-stream`` acceptable.
    """
    dest_path = os.fspath(dest_path)
    directory = os.path.dirname(os.path.abspath(dest_path))
    fd, tmp = tempfile.mkstemp(prefix=".part-", suffix=".download", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            result = fetch(
                "GET",
                url,
                headers=headers,
                max_bytes=max_bytes,
                timeout=timeout,
                allowed_content_types=AUDIO_CONTENT_TYPES,
                sniff=sniff_audio,
                max_redirects=max_redirects,
                allow_loopback=allow_loopback,
                dest=fh,
                ca_certs=ca_certs,
                ssl_context=ssl_context,
                resolver=resolver,
            )
            if result.bytes_written == 0:
                raise FetchError(f"empty body from {redact_url(url)}", transient=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    log.info("downloaded %d bytes from %s", result.bytes_written, redact_url(result.final_url))
    assert result.sniffed is not None
    return DownloadResult(
        path=dest_path,
        bytes_written=result.bytes_written,
        content_type=result.content_type,
        format=result.sniffed,
        final_url=result.final_url,
    )

