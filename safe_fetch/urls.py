"""URL policy: redaction for logs and messages, and syntactic validation (no DNS)."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import idna

from .errors import UnsafeURL

# --------------------------------------------------------------------------
# Redaction
# --------------------------------------------------------------------------


def _short_hash(text: str) -> str:
    # The same short hash as plumbing.logs.short_hash (this package imports nothing of the
    # service's): a path hashed here and there reads the same.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def redact_url(url: object) -> str:
    """Return `scheme://host[:port]/…#<hash>`: the URL without userinfo, path, query or
    fragment, its path as the first 8 hex digits of the path's SHA-256 (`https://host/`
    when the path is empty or `/`).

    Real platforms put secrets in paths as well as in query strings (signed storage keys,
    tokenized download links), and a recording's path may name the caller: a log or an
    error message keeps where a URL points and which URL it was (the same hash), never
    what it carries. Whoever holds the URL finds its lines: `printf %s /the/path |
    sha256sum | cut -c1-8`. Never raises: anything unparseable becomes `"<unparseable url>"`.
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
        path = "/" if parts.path in ("", "/") else "/…#" + _short_hash(parts.path)
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
    """Check `url` syntactically and return its normalized form.

    No DNS lookup is done.  Raises `UnsafeURL` with a human-readable
    reason (no query string in it).  Normalization: lower-case scheme and
    host, IDNA A-labels, trailing dot removed, default port removed, empty
    path becomes `/`, fragment dropped, non-ASCII path/query
    percent-encoded.

    `allow_loopback` is a test-only setting: it additionally allows the
    names `localhost` / `*.localhost` and the literal `127.0.0.1`
    (written exactly so).  It never allows private ranges.
    """
    return _parse(url, allow_loopback=allow_loopback).url
