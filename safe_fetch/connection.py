"""The HTTPS connection pinned to a checked address, under one hard deadline.

See the package docstring for why this owns the socket (`http.client` with a
custom `connect()`) rather than using urllib3.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Sequence

from .errors import FetchError


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
                # Base-class shutdown works on the fd directly, also for an SSLSocket,
                # without touching its SSL object.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def tick(self) -> None:
        """Refresh the socket timeout to the time left (or raise)."""
        left = self.remaining()
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.settimeout(left)

    def expired(self) -> bool:
        return self.fired or time.monotonic() >= self.deadline

    def disarm(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._sock = None


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS connection whose TCP peer is a pre-checked IP address.

    `host` (used for the Host header, SNI and the certificate check) stays
    the name from the URL; `connect()` never resolves it.
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
                (tls or sock).close()  # wrap_socket detaches `sock`
                raise
            self.sock = tls
            return
        assert last is not None
        raise last
