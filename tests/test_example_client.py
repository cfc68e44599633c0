"""examples/signed_document.py, run as a process against the service on a real HTTP
server: the happy path, and the retry rules with faults injected on the server side."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from documents import attachments
from models import MedicalRecord, PatientRequest
from patient_requests import changes
from plumbing.database import db
from tests.support import issue_token, load
from tests.support.live_service import serve, signing_organization

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "signed_document.py"


@pytest.fixture
def service(app, tmp_path: Path) -> Iterator[str]:
    load(signing_organization())
    with serve(storage_backend="local", storage_dir=str(tmp_path / "storage")) as base_url:
        yield base_url


def run_client(base_url: str, token: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--base-url",
            base_url,
            "--clinic",
            "clinic-a",
            "--external-id",
            "EXT-1",
            "--external-id-source",
            "signing-system",
            *extra,
        ],
        env={"CLINIC_API_TOKEN": token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def counts() -> tuple[int, int]:
    with db.connection_context():
        return PatientRequest.select().count(), MedicalRecord.select().count()


def test_client_stores_a_pdf_and_reads_back_the_same_bytes(service: str, tmp_path: Path) -> None:
    pdf = tmp_path / "signed.pdf"
    pdf.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 100 + b"%%EOF\n")
    token = issue_token(["clinic-a"], ["read", "write"])
    done = run_client(service, token, "--file", str(pdf))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7. read back: 25615 bytes, identical" in done.stdout
    assert "signature=" not in done.stdout + done.stderr and token not in done.stdout + done.stderr
    assert counts() == (1, 1)


def test_client_retries_its_writes_with_their_keys_and_re_requests_a_refused_upload(service: str, monkeypatch) -> None:
    """Create and register succeed but answer 500 once (written, the answer lost); the
    first upload link is refused."""
    real_create, real_register, real_link = (
        changes.create,
        attachments.register_attachment,
        attachments.issue_upload_link,
    )
    calls = {"create": 0, "register": 0, "link": 0}

    def create_then_fail(*args, **kwargs):
        calls["create"] += 1
        request = real_create(*args, **kwargs)
        if calls["create"] == 1:
            raise RuntimeError("written, then the answer was lost")
        return request

    def register_then_fail(*args, **kwargs):
        calls["register"] += 1
        record = real_register(*args, **kwargs)
        if calls["register"] == 1:
            raise RuntimeError("written, then the answer was lost")
        return record

    def spoiled_first_link(*args, **kwargs):
        calls["link"] += 1
        url, key = real_link(*args, **kwargs)
        if calls["link"] == 1:
            url = url.replace("signature=", "signature=00")
        return url, key

    monkeypatch.setattr(changes, "create", create_then_fail)
    monkeypatch.setattr(attachments, "register_attachment", register_then_fail)
    monkeypatch.setattr(attachments, "issue_upload_link", spoiled_first_link)
    done = run_client(service, issue_token(["clinic-a"], ["read", "write"]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "identical" in done.stdout
    assert done.stderr.count("retrying with the same Idempotency-Key") == 2 and "requesting a new link" in done.stderr
    # Each retry was answered the stored answer of its write: neither ran twice.
    assert calls == {"create": 1, "register": 1, "link": 2}
    assert counts() == (1, 1)
