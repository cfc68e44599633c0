"""The suite's SMTP server (a pytest plugin, see conftest.py): aiosmtpd on 127.0.0.1, the
same server bin/run starts (tools/mail_server.py), here requiring STARTTLS with a
certificate of the session's CA and a login, as a real provider does. One per test process,
shared by the session's worker (its SMTP_URL) and the tests that deliver in-process; a test
can stop it and start it again on the same port (an outage) and wait for what arrives.
"""

from __future__ import annotations

import email.policy
import ssl
import sys
from collections.abc import Iterator
from email.message import EmailMessage

import pytest
import trustme

from tests.conftest import ROOT
from tests.support.ports import free_port

sys.path.insert(0, str(ROOT / "tools"))
import mail_server

USER, PASSWORD = "clinic-mailer", "smtp-password-of-the-suite-4f1b"
SENDER = "ordinace@clinic.test"


class SMTPTestServer:
    def __init__(self, ca: trustme.CA, port: int | None = None) -> None:
        self.port = port or free_port()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.tls)
        self.mailbox = mail_server.Mailbox()
        self._controller = None

    @property
    def url(self) -> str:
        return f"smtp://{USER}:{PASSWORD}@127.0.0.1:{self.port}"

    def start(self) -> SMTPTestServer:
        self._controller = mail_server.controller(self.mailbox, self.port, tls=self.tls, login=(USER, PASSWORD))
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    @property
    def running(self) -> bool:
        return self._controller is not None

    @property
    def messages(self) -> list[EmailMessage]:
        return list(self.mailbox.messages)

    def clear(self) -> None:
        with self.mailbox.changed:
            self.mailbox.messages.clear()
            self.mailbox.envelopes.clear()

    def wait_for(self, count: int, timeout: float = 30.0) -> list[EmailMessage]:
        assert self.mailbox.wait_for(count, timeout), (
            f"{count} e-mail(s) expected within {timeout} s, {len(self.mailbox.messages)} arrived"
        )
        return self.messages

    def to(self, address: str) -> list[EmailMessage]:
        return [m for m in self.messages if m["To"] == address]


def text_of(message: EmailMessage) -> str:
    """The plain text part of an e-mail."""
    part = message.get_body(preferencelist=("plain",))
    assert part is not None
    return part.get_content()


def html_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("html",))
    assert part is not None
    return part.get_content()


def parsed(raw: bytes) -> EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)  # type: ignore[return-value]


def mail_env(server: SMTPTestServer, ca_bundle: str, public_base_url: str = "https://clinic.test") -> dict[str, str]:
    """A service process's e-mail settings, to this server: short retries and a short
    gathering of urgent messages (a test waits them; the default's gathering is
    tests/test_notices.py's, by the test's clock)."""
    return {
        "SMTP_URL": server.url,
        "SMTP_CA_BUNDLE": ca_bundle,
        "MAIL_FROM": SENDER,
        "PUBLIC_BASE_URL": public_base_url,
        "MAIL_RETRY_DELAYS": "1,2,4,8,15,30",
        "URGENT_NOTICE_GATHER_SECONDS": "5",
    }


@pytest.fixture(scope="session")
def smtp_server(https_ca: trustme.CA) -> Iterator[SMTPTestServer]:
    server = SMTPTestServer(https_ca).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mailbox(smtp_server: SMTPTestServer) -> Iterator[SMTPTestServer]:
    """The session's SMTP server, running and empty at the test's start."""
    if not smtp_server.running:
        smtp_server.start()
    smtp_server.clear()
    yield smtp_server
