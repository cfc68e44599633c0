"""Delivering the outbox in the test's own process, as a worker's relay and jobs do
(jobs/outbox.py: `Outbox.claim_due`, then `deliver` of each row), by the test's clock.

The tests that do so run the clock in `FUTURE`: the session's RQ worker, when a slow test
started it in this process, relays every row due by the real clock, and would deliver a
test's rows before the test looks. A row due in 2100 is the test's alone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from config import Config
from jobs import outbox
from jobs.context import JobContext
from models import Outbox
from plumbing.database import db
from plumbing.smtp import MailError
from tests.support import SECRET_KEY
from tests.support.smtp_server import SENDER, SMTPTestServer

#: A Wednesday, 21:14 in Prague (20:14 UTC): a clinic's office is closed.
FUTURE = datetime(2100, 3, 3, 20, 14, tzinfo=UTC)
PUBLIC = "https://clinic.test"


def mail_config(config: Config, smtp: SMTPTestServer, ca_bundle: str, **changes: object) -> Config:
    """The session's settings with e-mail on, to the suite's SMTP server."""
    values = {
        "database_url": config.database_url,
        "redis_url": config.redis_url,
        "secret_key": SECRET_KEY,
        "clock": config.clock,
        "db_pool_size": 4,
        "smtp_url": smtp.url,
        "smtp_ca_bundle": ca_bundle,
        "mail_from": SENDER,
        "public_base_url": PUBLIC,
        "operator_email": "provoz@clinic.test",
        **changes,
    }
    return Config(**values)  # type: ignore[arg-type]


def deliver_due(config: Config) -> list[str]:
    """Deliver every row due by `config`'s clock, and what the events make of them; the
    outcome of each ("error:<word>" for an e-mail the server did not take)."""
    outcomes: list[str] = []
    context = JobContext.build(config)  # as a worker's start builds it (worker.create_worker)
    try:
        while True:
            with db.connection_context():
                ids = Outbox.claim_due(config.clock())
            if not ids:
                return outcomes
            for i, row_id in enumerate(ids):
                try:
                    outcomes.append(outbox.deliver(row_id, context=context))
                except MailError as error:
                    outcomes.append(f"error:{error.word}")
                    with db.connection_context():  # tried again at the next call (RQ's retry)
                        Outbox.unclaim(ids[i:])
                    return outcomes
    finally:
        context.relay.close()


@pytest.fixture
def mailing(app, clock, config, mailbox, ca_bundle) -> Iterator[Config]:
    """E-mail on for the outbox delivered in this process (`deliver_due`; the clock in
    `FUTURE`); the settings."""
    clock.set(FUTURE)
    yield mail_config(config, mailbox, ca_bundle)
