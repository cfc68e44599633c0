"""Address policy: which IP addresses are public, resolving a name once within a
deadline, and `ResolutionCache` for the intake check."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .errors import FetchError, UnsafeURL

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
    """True when `address` is a globally routable unicast address.

    IPv6 must be global unicast (2000::/3) outside documentation / protocol
    ranges; 6to4 and NAT64 (64:ff9b::/96) addresses are judged by the IPv4
    address they embed; IPv4-mapped / IPv4-compatible forms are refused.
    `allow_loopback` (tests only) additionally admits 127.0.0.0/8 and ::1.
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
"""`resolver(host, port) -> [ip, ...]`.  Injectable for tests."""


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with `getaddrinfo` (TCP), preserving order, de-duplicated."""
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
        except BaseException as exc:
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
    """Resolve `host` once and return its addresses if all are public.

    Raises `UnsafeURL` if any address is not public (one bad address
    is enough: an attacker controlling DNS could otherwise mix a public and
    a private answer), and `FetchError` when the name does not
    resolve (transient for temporary resolver failures).
    `deadline` is a `time.monotonic()` value.
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
    """Verdicts of `check_resolves_public` per host, kept for `ttl` seconds.

    For the intake check only, where a lookup per hand-off would sit on the request's
    hot path while every call of a platform names the same few hosts. It never
    weakens a fetch: `fetch` always resolves and checks again.
    """

    def __init__(self, ttl: float = 60.0, max_hosts: int = 1024, resolver: Resolver | None = None) -> None:
        self.ttl = ttl
        self.max_hosts = max_hosts
        self.resolver = resolver
        self._lock = threading.Lock()
        self._verdicts: dict[tuple[str, bool], tuple[float, UnsafeURL | None]] = {}

    def check(self, host: str, *, allow_loopback: bool = False, deadline: float | None = None) -> None:
        """Raise `UnsafeURL` for a host that resolves to a non-public address;
        `FetchError` (not cached) when it does not resolve now."""
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
