"""Safe retries: an `Idempotency-Key` on every document write (docs/integrators/signed-documents.md,
"Safe retries").

- Without the header nothing changes; with it the first request runs and its answer is
  stored in the write's own transaction; a retry with the key and the same body is that
  answer, byte for byte, `Idempotent-Replayed: true`, and writes nothing.
- The key with another body: 422 IDEMPOTENCY_KEY_REUSED; while the first runs: 409
  IDEMPOTENCY_KEY_IN_PROGRESS with Retry-After; a malformed key: 400 IDEMPOTENCY_KEY_INVALID.
- A request that fails (4xx, a 5xx whose transaction rolled back) stores nothing: its
  retry runs. Keys are per token. Past IDEMPOTENCY_KEY_HOURS and the workers' purge, a key
  runs anew.
- Each of the six writes: create, upload link (a fresh URL for the same fileHash),
  registration, PATCH, import, import-bulk.
- With real processes: a create whose connection is cut after the commit, retried with
  its key, leaves one request; 20 concurrent creates with one key make one request; with
  Redis unreachable the database's unique key still lets one write commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
import requests

import web.idempotency
from config import Config
from jobs.storage_purge import purge_storage
from models import AuditEvent, IdempotencyKey, MedicalRecord, Patient, PatientRequest, UploadLink
from plumbing.database import db
from storage import make_storage
from tests.conftest import PG_URL, REDIS_URL
from tests.support import SECRET_KEY, assert_error, bearer, issue_token, load
from tests.support.gunicorn import serving_gunicorn
from tests.support.live_service import api, concurrently, patient_id, serve, signing_organization, type_id
from tests.support.ports import free_port
from tests.support.servers import wait_until
from tests.support.tiers import needs

CREATE = api() + "/patientRequests/create"
PDF = b"%PDF-1.7\n" + bytes(range(256)) * 16 + b"\n%%EOF\n"


@pytest.fixture
def token(app) -> str:
    load(signing_organization())
    return issue_token(["clinic-a"], ["read", "write"])


def creation(note: str = "Signed consent") -> dict[str, str]:
    return {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT"), "userNote": note}


def keyed(token: str, key: str) -> dict[str, str]:
    return {**bearer(token), "Idempotency-Key": key}


def requests_made() -> int:
    with db.connection_context():
        return PatientRequest.select().where(PatientRequest.kind == "standard").count()


def stored_keys() -> list[IdempotencyKey]:
    with db.connection_context():
        return list(IdempotencyKey.select())


# --- without the header ------------------------------------------------------------------


def test_without_the_header_every_create_writes_and_nothing_is_stored(app, token) -> None:
    first = app.post_json(CREATE, creation(), headers=bearer(token))
    second = app.post_json(CREATE, creation(), headers=bearer(token))
    assert first.json["data"]["id"] != second.json["data"]["id"]
    assert "Idempotent-Replayed" not in first.headers and "Idempotent-Replayed" not in second.headers
    assert requests_made() == 2 and stored_keys() == []


# --- create: the first runs, a retry is its answer ----------------------------------------


def test_a_retry_with_the_key_is_the_first_answer_byte_for_byte_and_writes_nothing(app, token) -> None:
    key = str(uuid.uuid4())
    first = app.post_json(CREATE, creation(), headers=keyed(token, key))
    assert "Idempotent-Replayed" not in first.headers
    # The same body with its keys in another order and other spacing is the same request.
    body = json.dumps(dict(reversed(list(creation().items()))), indent=2)
    again = app.post(CREATE, body, headers={**keyed(token, key), "Content-Type": "application/json"})
    assert again.status_int == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.body == first.body
    assert again.headers["Content-Type"].startswith("application/json")
    assert requests_made() == 1
    with db.connection_context():
        assert AuditEvent.select().where(AuditEvent.action == "patient_request.create").count() == 1
    [row] = stored_keys()
    assert bytes(row.answer) == first.body and row.status == 200 and row.operation == "createPatientRequest"


def test_the_same_key_with_another_body_is_422_and_writes_nothing(app, token) -> None:
    key = "order-2026-11-27-0001"
    app.post_json(CREATE, creation("first"), headers=keyed(token, key))
    answer = app.post_json(CREATE, creation("second"), headers=keyed(token, key), expect_errors=True)
    assert_error(answer, 422, "IDEMPOTENCY_KEY_REUSED")
    assert requests_made() == 1


def test_the_same_key_on_another_path_is_422(app, token) -> None:
    key = str(uuid.uuid4())
    created = app.post_json(CREATE, creation(), headers=keyed(token, key)).json["data"]
    request = f"{api()}/patientRequests/{created['id']}"
    patched = app.patch_json(request, {"done": True}, headers=keyed(token, "patch-1"))
    other = app.post_json(CREATE, creation(), headers=keyed(token, str(uuid.uuid4()))).json["data"]
    # The PATCH's key on another request: another path, so another request.
    answer = app.patch_json(
        f"{api()}/patientRequests/{other['id']}", {"done": True}, headers=keyed(token, "patch-1"), expect_errors=True
    )
    assert_error(answer, 422, "IDEMPOTENCY_KEY_REUSED")
    assert patched.json["data"]["doneAt"] is not None
    with db.connection_context():
        assert PatientRequest.get_by_id(other["id"]).done_at is None


def test_keys_are_per_token(app, token) -> None:
    other_token = issue_token(["clinic-a"], ["read", "write"])
    key = "shared-by-accident"
    mine = app.post_json(CREATE, creation("mine"), headers=keyed(token, key)).json["data"]
    # Another token's identical key never sees this one's answer, with the same body or another.
    theirs = app.post_json(CREATE, creation("mine"), headers=keyed(other_token, key))
    assert "Idempotent-Replayed" not in theirs.headers and theirs.json["data"]["id"] != mine["id"]
    assert app.post_json(CREATE, creation("theirs"), headers=keyed(other_token, str(uuid.uuid4()))).status_int == 200
    assert requests_made() == 3


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\tinside", "control\x01", "klíč"])
def test_a_malformed_key_is_400_and_nothing_is_written(app, token, key: str) -> None:
    environ = {"HTTP_IDEMPOTENCY_KEY": key.encode("utf-8").decode("latin-1")}  # as a WSGI server hands it on
    answer = app.post_json(CREATE, creation(), headers=bearer(token), extra_environ=environ, expect_errors=True)
    assert_error(answer, 400, "IDEMPOTENCY_KEY_INVALID")
    assert requests_made() == 0 and stored_keys() == []


def test_the_longest_key_and_any_printable_ascii_are_accepted(app, token) -> None:
    for key in ("x" * 255, "~ !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}", "a"):
        assert app.post_json(CREATE, creation(key[:20]), headers=keyed(token, key)).status_int == 200
    assert requests_made() == 3


def test_a_request_refused_before_writing_stores_nothing_and_its_retry_runs(app, token) -> None:
    key = str(uuid.uuid4())
    refused = app.post_json(
        CREATE, {**creation(), "patientId": str(uuid.uuid4())}, headers=keyed(token, key), expect_errors=True
    )
    assert_error(refused, 404, "PATIENT_NOT_FOUND")
    invalid = app.post_json(CREATE, {"patientId": "nope"}, headers=keyed(token, key), expect_errors=True)
    assert invalid.status_int == 400
    assert stored_keys() == []
    # The same key again, now with a body that works: it runs (nothing was stored).
    assert app.post_json(CREATE, creation(), headers=keyed(token, key)).status_int == 200
    assert requests_made() == 1


def test_a_5xx_whose_transaction_rolled_back_stores_nothing_and_the_retry_with_the_key_writes_once(
    app, token, monkeypatch: pytest.MonkeyPatch
) -> None:
    record, failures = AuditEvent.record, []

    def fail_once(*args, **kwargs):
        if not failures:
            failures.append(1)
            raise RuntimeError("the disk is full")
        return record(*args, **kwargs)

    monkeypatch.setattr(AuditEvent, "record", staticmethod(fail_once))
    key = str(uuid.uuid4())
    failed = app.post_json(CREATE, creation(), headers=keyed(token, key), expect_errors=True)
    assert_error(failed, 500, "INTERNAL_ERROR")
    assert "safe to retry with the same Idempotency-Key" in failed.json["error"]
    assert requests_made() == 0 and stored_keys() == []
    assert app.post_json(CREATE, creation(), headers=keyed(token, key)).status_int == 200
    replay = app.post_json(CREATE, creation(), headers=keyed(token, key))
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert requests_made() == 1


def test_a_5xx_without_a_key_says_to_retry_with_one_or_check_first(app, token, monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(AuditEvent, "record", staticmethod(fail))
    failed = app.post_json(CREATE, creation(), headers=bearer(token), expect_errors=True)
    assert_error(failed, 500, "INTERNAL_ERROR")
    assert "retry with the same Idempotency-Key, or check with patientRequests/search" in failed.json["error"]


def test_while_the_first_runs_the_key_is_409_with_retry_after(app, token) -> None:
    key = str(uuid.uuid4())
    token_id = uuid.UUID(token.split("_")[1])  # csk_<id hex>_<secret>
    claim = "idempotency:{}:{}".format(token_id, hashlib.sha256(f"createPatientRequest\0{key}".encode()).hexdigest())
    client = redis.Redis.from_url(REDIS_URL)
    client.set(claim, "another request", ex=30)  # as the first request's claim, while it runs
    try:
        answer = app.post_json(CREATE, creation(), headers=keyed(token, key), expect_errors=True)
        assert_error(answer, 409, "IDEMPOTENCY_KEY_IN_PROGRESS")
        assert answer.headers["Retry-After"] == "1"
        assert requests_made() == 0
    finally:  # the first is done and gives its claim back: the key runs
        client.delete(claim)
    assert app.post_json(CREATE, creation(), headers=keyed(token, key)).status_int == 200
    assert client.get(claim) is None, "the claim is given back once the write is answered"


# --- the key's lifetime -----------------------------------------------------------------------


def test_a_key_is_replayed_for_24_hours_then_purged_by_the_workers_round_and_runs_anew(
    app, token, clock, config: Config, tmp_path: Path
) -> None:
    key = str(uuid.uuid4())
    first = app.post_json(CREATE, creation(), headers=keyed(token, key)).json["data"]
    clock.set(clock() + timedelta(hours=23, minutes=59))
    assert app.post_json(CREATE, creation(), headers=keyed(token, key)).json["data"]["id"] == first["id"]
    with db.connection_context():
        assert purge_storage(make_storage(config), config).idempotency_keys == 0
    clock.set(clock() + timedelta(minutes=2))
    with db.connection_context():  # the round every worker runs (jobs/storage_purge.py)
        assert purge_storage(make_storage(config), config).idempotency_keys == 1
    assert stored_keys() == []
    anew = app.post_json(CREATE, creation(), headers=keyed(token, key))
    assert "Idempotent-Replayed" not in anew.headers and anew.json["data"]["id"] != first["id"]
    assert requests_made() == 2


def test_a_key_past_its_time_runs_anew_even_before_the_purge(app, token, clock) -> None:
    key = str(uuid.uuid4())
    first = app.post_json(CREATE, creation(), headers=keyed(token, key)).json["data"]
    clock.set(clock() + timedelta(hours=24, seconds=1))
    assert app.post_json(CREATE, creation("other"), headers=keyed(token, key)).json["data"]["id"] != first["id"]
    assert len(stored_keys()) == 1


def test_idempotency_key_hours_below_a_day_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="IDEMPOTENCY_KEY_HOURS must be at least 24"):
        Config.from_env({"IDEMPOTENCY_KEY_HOURS": "12"})
    assert Config.from_env({"IDEMPOTENCY_KEY_HOURS": "72"}).idempotency_key_hours == 72


# --- the other writes ---------------------------------------------------------------------------


def _request(app, token) -> str:
    return app.post_json(CREATE, creation(), headers=bearer(token)).json["data"]["id"]


def test_upload_link_replayed_is_the_same_file_hash_with_a_fresh_url(app, token) -> None:
    request_id = _request(app, token)
    url = f"{api()}/patientRequests/{request_id}/attachments/upload-link"
    first = app.post_json(url, {"contentType": "application/pdf"}, headers=keyed(token, "link-1")).json["data"]
    again = app.post_json(url, {"contentType": "application/pdf"}, headers=keyed(token, "link-1"))
    replayed_at = time.time()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json["data"]["fileHash"] == first["fileHash"]
    # Presigned at the replay, valid its full ten minutes from then (the first one may have expired).
    expires = int(parse_qs(urlsplit(again.json["data"]["url"]).query)["expires"][0])
    assert replayed_at + 590 <= expires <= replayed_at + 601
    # The fresh URL takes the upload; the stored answer holds no URL (a credential).
    put = app.put(
        urlsplit(again.json["data"]["url"]).path + "?" + urlsplit(again.json["data"]["url"]).query,
        PDF,
        headers={"Content-Type": "application/pdf"},
    )
    assert put.status_int in (200, 201, 204)
    with db.connection_context():
        assert UploadLink.select().where(UploadLink.request == request_id).count() == 1
    [row] = [k for k in stored_keys() if k.operation == "createUploadLink"]
    assert b"url" not in bytes(row.answer) and b"signature" not in bytes(row.answer)


def test_registration_retried_with_its_key_registers_one_attachment(app, token) -> None:
    request_id = _request(app, token)
    base = f"{api()}/patientRequests/{request_id}/attachments"
    link = app.post_json(base + "/upload-link", {"contentType": "application/pdf"}, headers=bearer(token)).json["data"]
    parts = urlsplit(link["url"])
    app.put(f"{parts.path}?{parts.query}", PDF, headers={"Content-Type": "application/pdf"})
    body = {"fileHash": link["fileHash"], "contentType": "application/pdf", "description": "consent.pdf"}
    first = app.post_json(base, body, headers=keyed(token, "register-1"))
    again = app.post_json(base, body, headers=keyed(token, "register-1"))
    assert again.body == first.body and again.headers["Idempotent-Replayed"] == "true"
    with db.connection_context():
        assert MedicalRecord.select().where(MedicalRecord.request == request_id).count() == 1
    reused = app.post_json(
        base, {**body, "description": "other.pdf"}, headers=keyed(token, "register-1"), expect_errors=True
    )
    assert_error(reused, 422, "IDEMPOTENCY_KEY_REUSED")


def test_patch_import_and_import_bulk_replay_their_first_answer(app, token) -> None:
    request_id = _request(app, token)
    url = f"{api()}/patientRequests/{request_id}"
    first = app.patch_json(url, {"userNote": "called back"}, headers=keyed(token, "p"))
    app.patch_json(url, {"userNote": "changed since"}, headers=bearer(token))
    again = app.patch_json(url, {"userNote": "called back"}, headers=keyed(token, "p"))
    assert again.body == first.body and again.headers["Idempotent-Replayed"] == "true"
    with db.connection_context():
        assert PatientRequest.get_by_id(request_id).user_note == "changed since"  # the replay wrote nothing

    one = {"externalId": "IDEM-1", "firstName": "Eva", "lastName": "Malá"}
    imported = app.post_json(api() + "/patients/import", one, headers=keyed(token, "i"))
    replayed = app.post_json(api() + "/patients/import", one, headers=keyed(token, "i"))
    assert imported.json["data"]["created"] is True and replayed.body == imported.body

    bulk = {
        "patients": [
            {"externalId": "IDEM-2", "firstName": "Adam", "lastName": "Beneš"},
            {"externalId": "IDEM-3", "firstName": "Běla", "lastName": "Černá", "phone": "not a phone"},
        ]
    }
    first_bulk = app.post_json(api() + "/patients/import-bulk", bulk, headers=keyed(token, "b"))
    again_bulk = app.post_json(api() + "/patients/import-bulk", bulk, headers=keyed(token, "b"))
    assert [item["status"] for item in first_bulk.json["data"]] == ["created", "failed"]
    assert again_bulk.body == first_bulk.body and again_bulk.headers["Idempotent-Replayed"] == "true"
    with db.connection_context():
        assert Patient.select().where(Patient.first_name.in_(["Eva", "Adam"])).count() == 2
    assert {k.operation for k in stored_keys()} == {"updatePatientRequest", "importPatient", "importPatientsBulk"}


def test_a_bulk_import_whose_every_item_failed_wrote_nothing_and_stores_nothing(app, token) -> None:
    bulk = {"patients": [{"externalId": "IDEM-4", "firstName": "Bad", "lastName": "Phone", "phone": "x"}]}
    answer = app.post_json(api() + "/patients/import-bulk", bulk, headers=keyed(token, "bulk-failed"))
    assert [item["status"] for item in answer.json["data"]] == ["failed"]
    assert stored_keys() == []


def test_the_header_on_a_read_or_the_switchboard_changes_nothing(app, token) -> None:
    for _ in range(2):
        found = app.post_json(api() + "/patientRequests/search", {}, headers=keyed(token, "search"))
        assert "Idempotent-Replayed" not in found.headers
    assert stored_keys() == []


# --- real processes ---------------------------------------------------------------------------


def test_without_redis_the_unique_key_still_lets_one_of_twenty_concurrent_creates_write(
    app, token, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The claim's Redis unreachable (a port nothing listens on): every request runs; the database decides.
    original, down = web.idempotency.IdempotencyKeys._claim, redis.Redis(port=free_port(), socket_connect_timeout=1)

    def claim_on_a_redis_that_is_down(self, pending):
        self.client = down
        return original(self, pending)

    monkeypatch.setattr(web.idempotency.IdempotencyKeys, "_claim", claim_on_a_redis_that_is_down)
    key = str(uuid.uuid4())
    with serve(storage_dir=str(tmp_path)) as base_url:
        answers = concurrently(
            lambda: requests.post(base_url + CREATE, json=creation(), headers=keyed(token, key), timeout=30), n=20
        )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 20, statuses
    assert len({a.json()["data"]["id"] for a in answers}) == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 19
    assert requests_made() == 1


@pytest.fixture
@needs("gunicorn")
def web_process(app, token, tmp_path: Path) -> Iterator[str]:
    """The web process as the Procfile runs it (gunicorn, gevent, two workers) on the suite's database."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "DB_POOL_SIZE": "4",
        "STORAGE_DIR": str(tmp_path / "storage"),
        "LOG_LEVEL": "WARNING",
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",
    }
    with serving_gunicorn(
        "--workers", "2", env=env, log=tmp_path / "gunicorn.log", port=port, timeout=60, stop_timeout=15
    ) as base_url:
        yield base_url


class CutAfterTheAnswerStarts:
    """A TCP proxy that forwards a client's request to the service and, as soon as the
    service's answer starts (the write has committed), closes both connections without
    handing a byte of it on: the client sees its connection cut, as after a timeout."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answers_cut = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
        client.settimeout(30)
        request = b""
        while b"\r\n\r\n" not in request:
            request += client.recv(65536)
        head, _, body = request.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += client.recv(65536)
        upstream.sendall(head + b"\r\n\r\n" + body)
        if upstream.recv(1):  # the answer starts: committed
            self.answers_cut += 1
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset: no status line reaches the client
        upstream.close()

    def close(self) -> None:
        self.listener.close()


def test_a_create_cut_after_its_commit_and_retried_with_its_key_leaves_one_request(web_process, token) -> None:
    proxy = CutAfterTheAnswerStarts(int(web_process.rsplit(":", 1)[1]))
    key = str(uuid.uuid4())
    try:
        with pytest.raises(requests.ConnectionError):
            requests.post(
                f"http://127.0.0.1:{proxy.port}{CREATE}", json=creation(), headers=keyed(token, key), timeout=30
            )
    finally:
        proxy.close()
    assert proxy.answers_cut == 1
    assert requests_made() == 1, "the write committed although its answer never arrived"
    # The client retries blindly, with the same key: the request it did not hear about.
    retried = requests.post(web_process + CREATE, json=creation(), headers=keyed(token, key), timeout=30)
    assert retried.status_code == 200 and retried.headers["Idempotent-Replayed"] == "true"
    with db.connection_context():
        [made] = PatientRequest.select().where(PatientRequest.kind == "standard")
    assert retried.json()["data"]["id"] == str(made.id)
    assert requests_made() == 1
    # Without a key the same blind retry would have made a second one.
    assert requests.post(web_process + CREATE, json=creation(), headers=bearer(token), timeout=30).status_code == 200
    assert requests_made() == 2


def test_twenty_concurrent_creates_with_one_key_make_one_request(web_process, token) -> None:
    key = str(uuid.uuid4())
    answers = concurrently(
        lambda: requests.post(web_process + CREATE, json=creation(), headers=keyed(token, key), timeout=30), n=20
    )
    assert not [a for a in answers if isinstance(a, Exception)], answers
    statuses = [a.status_code for a in answers]
    assert set(statuses) <= {200, 409} and statuses.count(200) >= 1, statuses
    assert all(
        a.headers["Retry-After"] == "1" and a.json()["code"] == "IDEMPOTENCY_KEY_IN_PROGRESS"
        for a in answers
        if a.status_code == 409
    )
    assert len({a.json()["data"]["id"] for a in answers if a.status_code == 200}) == 1
    assert requests_made() == 1
    # Once the first is done, every retry is its answer.
    assert wait_until(
        lambda: (
            requests.post(web_process + CREATE, json=creation(), headers=keyed(token, key), timeout=30).status_code
            == 200
        ),
        timeout=10,
    )
    assert requests_made() == 1
