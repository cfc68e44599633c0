"""Sending one e-mail over SMTP: the server's address (`SMTP_URL`), TLS verified, and the
errors sorted into "try again later" and "never".

`smtps://host[:465]` speaks TLS from the first byte; `smtp://host[:587]` must offer
STARTTLS, which is always used, except where the URL says `?starttls=off` for a server on
the loopback (a local relay, the embedded run's server): mail and password
never cross a network in clear. The server's certificate is verified against the system's
authorities or `ca_file`, its name included. `user:password@` logs in after TLS.

Python's `smtplib` and `email` do the protocol and the message; this module only chooses
how to connect and what a failure means. No address or message text is logged here.
"""

from __future__ import annotations

import ipaddress
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formataddr, make_msgid
from urllib.parse import parse_qs, unquote, urlsplit

SCHEMES = {"smtp": 587, "smtps": 465}


class MailError(Exception):
    """A message was not sent. `transient`: the server was unreachable, slow or said to
    try again (4xx); otherwise it refused the message for good (5xx: a bad address)."""

    def __init__(self, word: str, transient: bool) -> None:
        super().__init__(word)
        self.word = word  # a short word for logs and metrics: never an address
        self.transient = transient


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    implicit_tls: bool
    starttls: bool
    username: str
    password: str

    @classmethod
    def parse(cls, url: str) -> Server:
        """The server `url` names; `ValueError` naming what is wrong (never the password)."""
        parts = urlsplit(url.strip())
        if parts.scheme not in SCHEMES:
            raise ValueError("must start with smtp:// (STARTTLS) or smtps:// (TLS)")
        if not parts.hostname:
            raise ValueError("names no host")
        try:
            port = parts.port or SCHEMES[parts.scheme]
        except ValueError:
            raise ValueError("has a port that is not a number") from None
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = sorted(set(query) - {"starttls"})
        if unknown:
            raise ValueError(f"has an unknown parameter {unknown[0]!r} (known: starttls)")
        starttls = query.get("starttls", "on").lower()
        if starttls not in ("on", "off"):
            raise ValueError("starttls must be on or off")
        if starttls == "off" and (parts.scheme == "smtps" or not is_loopback(parts.hostname)):
            raise ValueError("starttls=off is only for a server on the loopback (127.0.0.1, ::1, localhost)")
        return cls(
            host=parts.hostname,
            port=port,
            implicit_tls=parts.scheme == "smtps",
            starttls=parts.scheme == "smtp" and starttls == "on",
            username=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
        )

    @property
    def where(self) -> str:
        """Host and port, for a log line (the URL may carry a password)."""
        return f"{self.host}:{self.port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_context(ca_file: str = "") -> ssl.SSLContext:
    """Certificates verified, the name included; `ca_file` instead of the system's."""
    return ssl.create_default_context(cafile=ca_file or None)


def message(
    sender: str,
    to: str,
    subject: str,
    text: str,
    html: str | None = None,
    *,
    sender_name: str = "",
    language: str = "cs",
    headers: dict[str, str] | None = None,
) -> EmailMessage:
    """A message with a plain text part and, when given, an HTML alternative."""
    mail = EmailMessage()
    mail["From"] = formataddr((sender_name, sender)) if sender_name else sender
    mail["To"] = to
    mail["Subject"] = subject
    mail["Content-Language"] = language
    mail["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    # Automatic: no out-of-office answers (RFC 3834).
    mail["Auto-Submitted"] = "auto-generated"
    for name, value in (headers or {}).items():
        mail[name] = value
    mail.set_content(text)
    if html is not None:
        mail.add_alternative(html, subtype="html")
    return mail


def send(server: Server, mail: EmailMessage, *, ca_file: str = "", timeout: float = 15.0) -> None:
    """Deliver `mail` to `server`; `MailError` when it was not accepted."""
    context = tls_context(ca_file)
    try:
        client: smtplib.SMTP
        if server.implicit_tls:
            client = smtplib.SMTP_SSL(server.host, server.port, timeout=timeout, context=context)
        else:
            client = smtplib.SMTP(server.host, server.port, timeout=timeout)
        with client:
            client.ehlo()
            if server.starttls:
                if not client.has_extn("starttls"):
                    raise MailError("no_starttls", transient=False)
                client.starttls(context=context)
                client.ehlo()
            if server.username:
                client.login(server.username, server.password)
            refused = client.send_message(mail)
        if refused:  # some recipients refused, the others accepted: ours is one, so all
            raise MailError("recipient_refused", transient=False)
    except MailError:
        raise
    except smtplib.SMTPAuthenticationError:
        raise MailError("login_refused", transient=True) from None
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        raise MailError("recipient_refused", transient=all(400 <= c < 500 for c in codes)) from None
    except smtplib.SMTPResponseException as exc:
        raise MailError(f"smtp_{exc.smtp_code}", transient=not 500 <= exc.smtp_code < 600) from None
    except ssl.SSLCertVerificationError:
        raise MailError("certificate_refused", transient=True) from None
    except (TimeoutError, smtplib.SMTPException, ssl.SSLError, OSError) as exc:
        # Unreachable, closed, slow, TLS failed: the server may be back soon.
        raise MailError(type(exc).__name__.lower()[:40], transient=True) from None
