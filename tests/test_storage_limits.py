"""Storage limits: the upload size cap on both backends, the purge of uploads
never registered (both backends, two purges at once, every worker and the CLI), and the
per-clinic count of open upload links. The whole service over real HTTP, real PostgreSQL,
local storage served by the service and S3 on a real SeaweedFS."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from config import Config
from documents import attachments, uploads
from jobs import storage_purge
from jobs.storage_purge import purge_storage
from models import MedicalRecord, UploadLink
from plumbing import clock
from plumbing.clock import utc_now
from plumbing.database import db
from plumbing.metrics import Recorder
from storage import ObjectInfo, S3Storage, Storage, make_storage
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY, issue_token, load, log_audit
from tests.support.live_service import api, concurrently, patient_id, serve, signing_organization, type_id
from tests.support.processes import stop_process
from tests.support.seaweed import SeaweedFS
from tests.support.servers import wait_until

PDF = "application/pdf"
CAP = 16 * 1024
TIMEOUT = 30
GRACE = 3600
#: Long enough ago that a link has expired and its grace has passed.
EXPIRED = timedelta(seconds=attachments.UPLOAD_URL_SECONDS + GRACE + 60)


def pdf(size: int) -> bytes:
    head = b"%PDF-1.7\n"
    return head + b"x" * (size - len(head))


def s3_settings(sw: SeaweedFS) -> dict[str, Any]:
    return {
        "storage_backend": "s3",
        "s3_endpoint_url": sw.s3_endpoint_url,
        "s3_bucket": sw.s3_bucket,
        "s3_region": sw.s3_region,
        "s3_access_key_id": sw.s3_access_key_id,
        "s3_secret_access_key": sw.s3_secret_access_key,
    }


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.seaweedfs)])
def settings(request: pytest.FixtureRequest, app, tmp_path: Path) -> dict[str, Any]:
    """Config fields of the chosen backend (the app fixture empties the database)."""
    if request.param == "local":
        return {"storage_backend": "local", "storage_dir": str(tmp_path / "storage")}
    return s3_settings(request.getfixturevalue("seaweedfs"))


def storage_of(settings: dict[str, Any], **extra: Any) -> Storage:
    """A storage client on the same directory or bucket as the service under test."""
    storage = make_storage(Config(secret_key=SECRET_KEY, **settings, **extra))
    storage.prepare()
    return storage


class Client:
    """The integrator's side of the signed-documents flow over HTTP."""

    def __init__(self, base_url: str, slug: str = "clinic-a") -> None:
        self.base = base_url + api(slug)
        self.slug = slug
        # No shared Session: the same client also calls from several threads at once.
        self.headers = {"Authorization": f"Bearer {issue_token([slug], ['read', 'write'])}"}

    def create(self) -> str:
        patient = patient_id("jana") if self.slug == "clinic-a" else patient_id("petr")
        answer = requests.post(
            f"{self.base}/patientRequests/create",
            headers=self.headers,
            timeout=TIMEOUT,
            json={"patientId": patient, "userECRFId": type_id("SIGNED_CONSENT", self.slug)},
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["data"]["id"]

    def link(self, rid: str) -> requests.Response:
        return requests.post(
            f"{self.base}/patientRequests/{rid}/attachments/upload-link",
            headers=self.headers,
            json={"contentType": PDF},
            timeout=TIMEOUT,
        )

    def uploaded(self, rid: str, body: bytes) -> str:
        """A fresh link's fileHash, with `body` PUT to it (which must succeed)."""
        link = self.link(rid).json()["data"]
        put = requests.put(link["url"], data=body, headers={"Content-Type": PDF}, timeout=TIMEOUT)
        assert put.status_code == 200, put.text
        return link["fileHash"]

    def register(self, rid: str, file_hash: str) -> requests.Response:
        return requests.post(
            f"{self.base}/patientRequests/{rid}/attachments",
            headers=self.headers,
            timeout=TIMEOUT,
            json={"contentType": PDF, "fileHash": file_hash, "description": "signed.pdf"},
        )


def sealed_copies(storage: Any, rid: str) -> list[Any]:
    """The registered copies of request `rid`'s uploads in the bucket."""
    return storage._client.list_objects_v2(Bucket=storage.bucket, Prefix=f"registered/{rid}/").get("Contents", [])


def backdate(*file_hashes: str, by: timedelta = EXPIRED) -> None:
    with db.connection_context():
        UploadLink.update(created_at=utc_now() - by).where(UploadLink.file_hash.in_(file_hashes)).execute()


def rows(*file_hashes: str) -> set[str]:
    with db.connection_context():
        return {r.file_hash for r in UploadLink.select().where(UploadLink.file_hash.in_(file_hashes))}


# --- the size cap ------------------------------------------------------------------------------


def test_an_upload_over_the_cap_is_refused_by_each_backend(settings: dict[str, Any]) -> None:
    """Local: the PUT itself is 413 and nothing is stored. S3 cannot refuse a presigned PUT
    by size, so registration does: 400 naming the limit, the object deleted, no record; the
    same link then takes a smaller file. A file of exactly the cap registers on both."""
    load(signing_organization())
    storage = storage_of(settings)
    with serve(upload_max_bytes=CAP, **settings) as service:
        client = Client(service)
        rid = client.create()
        link = client.link(rid).json()["data"]
        put = requests.put(link["url"], data=pdf(CAP + 1), headers={"Content-Type": PDF}, timeout=TIMEOUT)
        if settings["storage_backend"] == "local":
            assert put.status_code == 413 and put.json()["code"] == "PAYLOAD_TOO_LARGE"
            assert storage.head(link["fileHash"]) is None
        else:
            assert put.status_code == 200  # S3 stores it whatever its size ...
            refused = client.register(rid, link["fileHash"])  # ... registration refuses it
            assert refused.status_code == 400, refused.text
            assert refused.json() == {
                "code": "VALIDATION_FAILED",
                "param": "/fileHash",
                "error": (
                    f"fileHash: the uploaded file has {CAP + 1} bytes; at most {CAP} bytes (0.015625 MiB) are "
                    "accepted. Upload a smaller file."
                ),
            }
            assert storage.head(link["fileHash"]) is None
            assert not sealed_copies(storage, rid)
        with db.connection_context():
            assert not MedicalRecord.select().where(MedicalRecord.file_hash == link["fileHash"]).exists()
        put = requests.put(link["url"], data=pdf(CAP), headers={"Content-Type": PDF}, timeout=TIMEOUT)
        assert put.status_code == 200
        registered = client.register(rid, link["fileHash"])
        assert registered.status_code == 200, registered.text


def test_s3_object_replaced_by_a_larger_one_after_the_size_check_is_refused_too(
    app, seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upload URL is reusable: a larger object may replace the one registration looked
    at. The registered copy's own size is checked, and the copy and upload both deleted.
    (The local backend refuses such a PUT itself.)"""
    settings = s3_settings(seaweedfs)
    load(signing_organization())
    storage = storage_of(settings)
    with serve(upload_max_bytes=CAP, **settings) as service:
        client = Client(service)
        rid = client.create()
        file_hash = client.uploaded(rid, pdf(CAP + 1))
        monkeypatch.setattr(S3Storage, "head", lambda self, key: ObjectInfo(size=CAP, content_type=PDF))
        refused = client.register(rid, file_hash)
        assert refused.status_code == 400 and f"at most {CAP} bytes" in refused.json()["error"]
        monkeypatch.undo()
        assert storage.head(file_hash) is None
        assert not sealed_copies(storage, rid)


# --- the purge ------------------------------------------------------------------------------------


def test_purge_deletes_only_expired_unregistered_uploads(settings: dict[str, Any]) -> None:
    """Past its link's expiry and the grace, an unregistered upload goes (object and row; one
    never uploaded too), and registering it answers 400; a registered one and a fresh
    unregistered one stay. A second purge finds nothing."""
    load(signing_organization())
    storage = storage_of(settings)
    config = Config(upload_purge_grace_seconds=GRACE)
    with serve(**settings) as service:
        client = Client(service)
        rid = client.create()
        registered, stale, fresh = (client.uploaded(rid, pdf(2000)) for _ in range(3))
        never_uploaded = client.link(rid).json()["data"]["fileHash"]
        assert client.register(rid, registered).status_code == 200
        backdate(registered, stale, never_uploaded)
        backdate(fresh, by=EXPIRED - timedelta(seconds=120))  # expired, but within the grace
        partial = None
        if settings["storage_backend"] == "local":  # a killed upload's temporary file, as old
            partial = Path(settings["storage_dir"]) / "requests" / ".upload-killed.part"
            partial.write_bytes(b"%PDF-")
            os.utime(partial, (time.time() - EXPIRED.total_seconds(),) * 2)

        with db.connection_context():
            purged = purge_storage(storage, config)
        assert (purged.uploads, purged.partial_files) == (2, 1 if partial else 0)
        assert partial is None or not partial.exists()
        assert storage.head(stale) is None
        assert storage.head(fresh) == ObjectInfo(size=2000, content_type=PDF)
        assert rows(registered, stale, fresh, never_uploaded) == {registered, fresh}
        late = client.register(rid, stale)
        assert late.status_code == 400 and late.json()["code"] == "VALIDATION_FAILED"
        again = client.register(rid, registered)  # registered: its retry still answers it
        assert again.status_code == 200
        detail = requests.get(f"{client.base}/patientRequests/{rid}", headers=client.headers, timeout=TIMEOUT).json()[
            "data"
        ]
        [record] = detail["medicalRecords"]
        assert requests.get(record["downloadUrl"], timeout=TIMEOUT).content == pdf(2000)
        assert client.register(rid, fresh).status_code == 200
        with db.connection_context():
            assert purge_storage(storage, config).uploads == 0


class CountingStorage:
    """A storage whose deletes are counted per key and slowed, so purges overlap; or broken."""

    def __init__(self, inner: Storage) -> None:
        self.inner, self.deleted, self._lock = inner, Counter[str](), threading.Lock()
        self.max_upload_bytes = inner.max_upload_bytes

    broken = False  # then a delete fails after the first one, as a storage outage would

    def delete(self, key: str) -> None:
        time.sleep(0.01)
        if self.broken and self.deleted:
            raise OSError("storage unreachable")
        self.inner.delete(key)
        with self._lock:
            self.deleted[key] += 1


def stale_uploads(settings: dict[str, Any], count: int) -> tuple[Storage, list[str]]:
    """`count` uploads through the service, never registered, their links long expired."""
    load(signing_organization())
    with serve(**settings) as service:
        client = Client(service)
        rid = client.create()
        stale = [client.uploaded(rid, pdf(100)) for _ in range(count)]
    backdate(*stale)
    return storage_of(settings), stale


def test_two_purges_at_once_delete_each_object_once(settings: dict[str, Any]) -> None:
    storage, stale = stale_uploads(settings, 40)
    counting = CountingStorage(storage)
    barrier, results, errors = threading.Barrier(2), [], []

    def purge() -> None:
        try:
            barrier.wait(timeout=10)
            with db.connection_context():
                results.append(
                    uploads.purge_expired_uploads(
                        counting, clock.now(), lifetime=attachments.UPLOAD_URL_SECONDS, grace=GRACE, batch=5
                    )
                )
        except Exception as exc:  # reported below, with the other purge's outcome
            errors.append(exc)

    threads = [threading.Thread(target=purge) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and sum(results) == 40, (errors, results)
    assert all(results), results  # both took a share: they ran at the same time
    assert counting.deleted == Counter({key: 1 for key in stale})
    assert rows(*stale) == set() and all(storage.head(key) is None for key in stale)


def test_a_failed_purge_keeps_its_batch_and_the_next_round_takes_it(settings: dict[str, Any], caplog) -> None:
    """A storage error mid-batch rolls the batch back (its rows stay, so nothing is
    forgotten) and the purge thread carries on: once storage answers, a round takes it."""
    storage, stale = stale_uploads(settings, 3)
    failing = CountingStorage(storage)
    failing.broken = True
    thread, stop = storage_purge.start(Config(upload_purge_every_seconds=0.1), Recorder(), failing)
    try:
        assert wait_until(lambda: "storage purge failed (OSError)" in caplog.text, timeout=10)
        assert rows(*stale) == set(stale)
        failing.broken = False
        assert wait_until(lambda: not rows(*stale), timeout=10)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert all(storage.head(key) is None for key in stale)


@pytest.mark.rq_worker
def test_every_worker_purges_periodically_and_the_cli_once(app, tmp_path: Path) -> None:
    """`manage.py worker` purges at start and then every UPLOAD_PURGE_EVERY_SECONDS;
    `manage.py storage purge` runs one round and says how many it removed."""
    load(signing_organization())
    storage_dir = tmp_path / "storage"
    settings = {"storage_backend": "local", "storage_dir": str(storage_dir)}
    storage = storage_of(settings)
    log = tmp_path / "worker.log"
    log_audit.watch(log)
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "STORAGE_DIR": str(storage_dir),
        "UPLOAD_PURGE_EVERY_SECONDS": "0.5",
        "LOG_LEVEL": "INFO",
    }
    with serve(**settings) as service:
        client = Client(service)
        rid = client.create()
        first, second, third = (client.uploaded(rid, pdf(100)) for _ in range(3))
        backdate(first)
        # Its own queue: the session's worker keeps the real ones.
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "worker", "--no-warm-up", "storage-limits-test"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            assert wait_until(lambda: storage.head(first) is None, timeout=60, interval=0.1), log.read_text()[-3000:]
            backdate(second)  # after the worker's first round: a later round takes it
            assert wait_until(lambda: storage.head(second) is None, timeout=30, interval=0.1), log.read_text()[-3000:]
        finally:
            stop_process(proc, 30)
        assert rows(first, second) == set()
        assert "storage purge removed 1 unregistered upload(s)" in log.read_text()

        backdate(third)
        done = subprocess.run(
            [sys.executable, "manage.py", "storage", "purge"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "purged 1 unregistered upload(s) and 0 interrupted upload file(s)" in done.stderr
        assert storage.head(third) is None and rows(third) == set()


# --- open upload links per clinic -----------------------------------------------------------------


def test_a_clinic_over_its_open_links_gets_429_and_another_clinic_does_not(app, tmp_path: Path) -> None:
    load(signing_organization())
    with serve(upload_links_per_clinic=3, storage_backend="local", storage_dir=str(tmp_path)) as service:
        a, b = Client(service), Client(service, "clinic-b")
        rid = a.create()
        issued = [a.link(rid) for _ in range(3)]
        assert [r.status_code for r in issued] == [200] * 3
        refused = a.link(rid)
        assert refused.status_code == 429 and refused.json() == {
            "code": "TOO_MANY_UPLOAD_LINKS",
            "error": (
                "The clinic holds 3 open upload links (at most 3: issued within 600 seconds and not registered). "
                "Upload and register with the links already issued, or try again after Retry-After seconds."
            ),
        }
        assert 590 <= int(refused.headers["Retry-After"]) <= 600
        assert b.link(b.create()).status_code == 200  # another clinic is unaffected

        # Retry-After: until the oldest open link expires.
        oldest = issued[0].json()["data"]["fileHash"]
        backdate(oldest, by=timedelta(seconds=590))
        assert 1 <= int(a.link(rid).headers["Retry-After"]) <= 10
        # An expired link no longer counts, nor does a registered one.
        backdate(oldest, by=timedelta(seconds=601))
        link = a.link(rid).json()["data"]
        assert a.link(rid).status_code == 429
        assert requests.put(link["url"], data=pdf(100), headers={"Content-Type": PDF}, timeout=TIMEOUT).ok
        assert a.register(rid, link["fileHash"]).status_code == 200
        assert a.link(rid).status_code == 200
        assert a.link(rid).status_code == 429


def test_open_links_are_counted_one_at_a_time(app, tmp_path: Path) -> None:
    """Ten calls at once for the last three slots: exactly three links are issued."""
    load(signing_organization())
    with serve(upload_links_per_clinic=3, storage_backend="local", storage_dir=str(tmp_path)) as service:
        client = Client(service)
        rid = client.create()
        answers = concurrently(lambda: client.link(rid), n=10)
    assert sorted(a.status_code for a in answers) == [200] * 3 + [429] * 7


def test_upload_link_documents_429_with_retry_after(app) -> None:
    document = app.get("/openapi.json").json
    path = "/external/v1/clinics/{clinicSlug}/patientRequests/{requestId}/attachments/upload-link"
    answer = document["paths"][path]["post"]["responses"]["429"]
    assert answer["headers"]["Retry-After"]["schema"] == {"type": "integer"}
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


# --- configuration ---------------------------------------------------------------------------------


def test_upload_limits_configuration_and_the_former_variable_name() -> None:
    assert Config().upload_max_bytes == 25 * 1024 * 1024
    assert Config.from_env({"UPLOAD_MAX_BYTES": "1000"}).upload_max_bytes == 1000
    assert Config.from_env({"STORAGE_MAX_UPLOAD_BYTES": "2000"}).upload_max_bytes == 2000  # the former name
    # Both names set to different values: one of them would be ignored, so neither is chosen.
    with pytest.raises(ValueError, match="UPLOAD_MAX_BYTES and its former name STORAGE_MAX_UPLOAD_BYTES"):
        Config.from_env({"UPLOAD_MAX_BYTES": "1000", "STORAGE_MAX_UPLOAD_BYTES": "2000"})
    assert Config.from_env({"UPLOAD_MAX_BYTES": "1000", "STORAGE_MAX_UPLOAD_BYTES": "1000"}).upload_max_bytes == 1000
    with pytest.raises(ValueError, match="STORAGE_MAX_UPLOAD_BYTES"):
        Config.from_env({"STORAGE_MAX_UPLOAD_BYTES": "lots"})
    config = Config.from_env(
        {"UPLOAD_LINKS_PER_CLINIC": "7", "UPLOAD_PURGE_GRACE_SECONDS": "60", "UPLOAD_PURGE_EVERY_SECONDS": "30"}
    )
    assert (config.upload_links_per_clinic, config.upload_purge_grace_seconds, config.upload_purge_every_seconds) == (
        7,
        60,
        30.0,
    )
    for bad in (
        {"UPLOAD_MAX_BYTES": "0"},
        {"UPLOAD_LINKS_PER_CLINIC": "0"},
        {"UPLOAD_PURGE_GRACE_SECONDS": "-1"},
        {"UPLOAD_PURGE_EVERY_SECONDS": "0"},
    ):
        with pytest.raises(ValueError):
            Config.from_env(bad)
    s3 = make_storage(
        Config(storage_backend="s3", s3_bucket="b", s3_endpoint_url="http://127.0.0.1:9", upload_max_bytes=123)
    )
    assert s3.max_upload_bytes == 123


def test_a_database_without_the_upload_link_index_gets_it(config: Config) -> None:
    """The open links are counted by issue time on every upload-link call: an existing
    database gets the index (by the migration's name: its number may change on merge)."""
    from migrations import MIGRATIONS, migrate
    from models import SchemaMigration
    from plumbing.database import bind_database
    from tests.support.databases import recreate_database

    url = PG_URL + "_upgrade_upload_links"
    recreate_database(url)
    database = bind_database(url, pool_size=1)
    try:
        with database.connection_context():
            migrate(database)
            database.execute_sql('DROP INDEX "upload_link_created_at"')
            SchemaMigration.delete().where(SchemaMigration.name == "upload_link_created_at_index").execute()
            [(version, name)] = [(v, n) for v, n, _ in MIGRATIONS if n == "upload_link_created_at_index"]
            assert migrate(database) == [f"{version:04d}_{name}"]
            assert ("upload_link_created_at", ["created_at"]) in [
                (i.name, i.columns) for i in database.get_indexes("upload_link")
            ]
    finally:
        database.close_all()
        bind_database(config.database_url, pool_size=config.db_pool_size)
