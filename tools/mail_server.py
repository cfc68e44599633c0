"""A local SMTP server that keeps every message it receives as a file: bin/run's embedded
default (`SMTP_URL=smtp://127.0.0.1:2525?starttls=off`, mail kept in var/mail/), and the
base of the tests' SMTP server (which adds STARTTLS and a login). aiosmtpd does the protocol.

    python tools/mail_server.py --port 2525 --dir var/mail

Each message is `<UTC time>-<n>.eml` in the directory (open it with any mail program).
SIGTERM or Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import itertools
import logging
import signal
import ssl
import sys
import threading
import time
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Mailbox:
    """aiosmtpd's handler: every message kept (in memory, and as a file when `directory`)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or envelope.content
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        with self._lock:
            n = next(self._numbers)
            if self.directory is not None:
                self.directory.mkdir(parents=True, exist_ok=True)
                name = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{n}.eml"
                (self.directory / name).write_bytes(raw)
            self.messages.append(parsed)  # type: ignore[arg-type]
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
            self.changed.notify_all()
        return "250 Message accepted"

    def wait_for(self, count: int, timeout: float) -> bool:
        """Until at least `count` messages arrived (True) or `timeout` seconds passed."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.messages) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return True


def authenticator(user: str, password: str) -> Callable[..., AuthResult]:
    """An aiosmtpd authenticator accepting one login."""

    def check(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == user
            and auth_data.password.decode() == password
        )
        return AuthResult(success=ok, handled=False)

    return check


def controller(
    mailbox: Mailbox,
    port: int,
    *,
    host: str = "127.0.0.1",
    tls: ssl.SSLContext | None = None,
    login: tuple[str, str] | None = None,
) -> Controller:
    """An aiosmtpd controller (not started): STARTTLS required when `tls` is given, a
    login required (after TLS) when `login` is."""
    # aiosmtpd logs every sender and recipient at INFO: addresses, which no log of the
    # service's own processes or tests may hold at that level.
    logging.getLogger("mail.log").setLevel(logging.WARNING)
    options: dict[str, Any] = {}
    if tls is not None:
        options.update(tls_context=tls, require_starttls=True)
    if login is not None:
        options.update(authenticator=authenticator(*login), auth_required=True, auth_require_tls=tls is not None)
    return Controller(mailbox, hostname=host, port=port, ready_timeout=10, **options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a local SMTP server keeping what it receives as .eml files")
    parser.add_argument("--port", type=int, default=2525)
    parser.add_argument("--dir", default="var/mail")
    args = parser.parse_args(argv)
    directory = Path(args.dir).resolve()
    server = controller(Mailbox(directory), args.port)
    server.start()
    print(f"local SMTP server on 127.0.0.1:{args.port}: e-mails kept in {directory}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
