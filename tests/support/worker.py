"""One real RQ worker for the whole test session (a pytest plugin, see conftest.py).

Started like the Procfile starts it (`python manage.py worker`), on the test Redis and
database, with the test-only loopback setting and the session CA, so it can fetch
voicemails from and talk to a fake switchboard platform on 127.0.0.1. Every module that
needs a worker shares this one: two workers on the same queues would take each other's
jobs with different settings. `processed_call` waits until it has processed a call (and
gives its transcript to the log audit).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from models import Call
from plumbing.database import db
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY, log_audit
from tests.support.processes import start_worker, stop_process
from tests.support.servers import wait_until
from tests.support.smtp_server import mail_env
from tests.support.tiers import needs

MODEL_EN = ROOT / "var" / "models" / "ggml-tiny.en.bin"
MODEL = ROOT / "var" / "models" / "ggml-base.bin"
#: Provider marker words of the tests (the spec withholds the real ones).
MARKER_WORDS = "acmevox,ringfrog"


@pytest.fixture(scope="session")
def ca_bundle(https_ca, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    https_ca.cert_pem.write_to_path(str(path))
    return str(path)


def worker_env(ca_bundle: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "UNSAFE_ALLOW_LOOPBACK_FETCH": "1",
        "FETCH_CA_BUNDLE": ca_bundle,
        "RECORDING_RETRY_DELAYS": "1,1",
        "RECORDING_FETCH_TIMEOUT": "5",
        "WHISPER_MODEL": str(MODEL),
        "WHISPER_MODEL_EN": str(MODEL_EN),
        # The former names of PLATFORM_RETRY_DELAYS and PLATFORM_FETCH_TIMEOUT, still read; and the
        # platform family's marker words as a deployment sets them.
        "PBX_RETRY_DELAYS": "1,1",
        "PBX_FETCH_TIMEOUT": "5",
        "PROVIDER_MARKER_WORDS": MARKER_WORDS,
        # One purge round at start, then none during the session: the session's worker shares
        # the test database but not a test's storage directory, and a round of its own could
        # take the rows of uploads a storage test has just expired for its own worker to purge
        # (test_storage_limits failed so once in CI: the row gone, the file left).
        "UPLOAD_PURGE_EVERY_SECONDS": "86400",
        # DEBUG: the log audit (tests/support/log_audit.py) checks everything a worker may log.
        "LOG_LEVEL": "DEBUG",
        **extra,
    }


@pytest.fixture(scope="session")
def worker_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("worker") / "worker.log"
    log_audit.watch(path)  # checked for secrets at the end of the session
    return path


@pytest.fixture(scope="session")
@needs("rq_worker", "engine")
def worker(wsgi_app, ca_bundle, worker_log, smtp_server) -> Iterator[subprocess.Popen]:
    """One real RQ worker for the session, started like the Procfile starts it; it sends
    its e-mails to the session's SMTP server (tests/support/smtp_server.py)."""
    proc = start_worker(worker_env(ca_bundle, **mail_env(smtp_server, ca_bundle)), worker_log, interval=0.2)
    try:
        yield proc
    finally:
        stop_process(proc, 30)


def processed_call(sid: str, timeout: float = 90) -> Call:
    """The call `sid` once a worker has processed it (state `done`); fails after `timeout` s."""

    def done() -> bool:
        with db.connection_context():
            return Call.select().where((Call.call_sid == sid) & (Call.state == "done")).exists()

    assert wait_until(done, timeout=timeout, interval=0.1), f"call {sid} not processed within {timeout} s"
    with db.connection_context():
        call = Call.get(Call.call_sid == sid)
    log_audit.remember_transcript(call.transcript)  # what the caller said: never in a log at INFO
    return call
