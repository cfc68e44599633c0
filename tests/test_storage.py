"""Storage backends over real HTTP: the local backend behind a real WSGI server, S3
against a real SeaweedFS (which, unlike moto, enforces presigned-URL signatures,
content type and expiry)."""

from __future__ import annotations

import dataclasses
import http.client
import io
import json
import os
import socket
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import falcon
import pytest
import requests

from config import Config
from resources.storage_objects import StoredObject
from storage import (
    SEALED_PREFIX,
    AccessDenied,
    InvalidKeyError,
    LocalStorage,
    ObjectInfo,
    S3Storage,
    Storage,
    ascii_filename,
    content_disposition,
    make_storage,
    new_object_key,
    sealed_key,
    validate_key,
)
from tests.support import assert_error
from tests.support.durability import record_fsyncs
from tests.support.seaweed import SeaweedFS
from tests.support.servers import serve_wsgi, wait_until
from web import errors

SIGNING_KEY = b"test-signing-key-0123456789abcdef"
PDF = "application/pdf"
TIMEOUT = 30


# ----------------------------------------------------------------------- servers


@dataclasses.dataclass
class LocalServer:
    base_url: str
    app: falcon.App[falcon.Request, falcon.Response]


@pytest.fixture
def local_server() -> Iterator[LocalServer]:
    """A real HTTP server in a thread; routes are added by the storage fixtures. Its errors
    are answered as the service answers them (`{error, code}`, web/errors.py)."""
    app = falcon.App()
    errors.install(app)
    with serve_wsgi(app) as httpd:
        yield LocalServer(base_url=f"http://127.0.0.1:{httpd.server_port}", app=app)


@dataclasses.dataclass
class Backend:
    name: str
    storage: Storage
    storage_dir: Path | None = None  # local only


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.seaweedfs)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        server: LocalServer = request.getfixturevalue("local_server")
        storage_dir = tmp_path / "storage"
        cfg = Config(
            storage_backend="local",
            storage_dir=str(storage_dir),
            storage_signing_key=SIGNING_KEY.decode(),
            public_base_url=server.base_url,
        )
        local = make_storage(cfg)
        assert isinstance(local, LocalStorage)
        local.prepare()
        server.app.add_route("/storage/{key:path}", StoredObject(local))
        return Backend("local", local, storage_dir)
    sw: SeaweedFS = request.getfixturevalue("seaweedfs")
    cfg = Config(
        storage_backend="s3",
        s3_endpoint_url=sw.s3_endpoint_url,
        s3_bucket=sw.s3_bucket,
        s3_region=sw.s3_region,
        s3_access_key_id=sw.s3_access_key_id,
        s3_secret_access_key=sw.s3_secret_access_key,
    )
    s3 = make_storage(cfg)
    assert isinstance(s3, S3Storage)
    s3.prepare()
    return Backend("s3", s3)


# ----------------------------------------------------------------------- helpers


def new_key(ext_type: str = PDF) -> str:
    return new_object_key(uuid.uuid4(), ext_type)


def put(url: str, body: bytes, content_type: str | None = PDF) -> requests.Response:
    headers = {"Content-Type": content_type} if content_type else {}
    return requests.put(url, data=body, headers=headers, timeout=TIMEOUT)


def sample_bytes(size: int = 300_000) -> bytes:
    return os.urandom(size)


# ------------------------------------------------------------------ both backends


def test_upload_then_download_inline_and_attachment(backend: Backend) -> None:
    key, body = new_key(), sample_bytes()
    storage = backend.storage
    assert not storage.exists(key)
    assert storage.head(key) is None

    response = put(storage.presign_put(key, PDF, 600), body)
    assert response.status_code == 200, response.text
    assert storage.exists(key)
    assert storage.head(key) == ObjectInfo(size=len(body), content_type=PDF)

    filename = "Souhlas s léčbou.pdf"
    for disposition in ("inline", "attachment"):
        url = storage.presign_get(key, 3600, content_type=PDF, disposition=disposition, filename=filename)
        got = requests.get(url, timeout=TIMEOUT)
        assert got.status_code == 200
        assert got.content == body
        assert got.headers["Content-Type"] == PDF
        assert got.headers["Content-Length"] == str(len(body))
        assert got.headers["Content-Disposition"] == (
            f"{disposition}; filename=\"Souhlas_s_lecbou.pdf\"; filename*=UTF-8''Souhlas%20s%20l%C3%A9%C4%8Dbou.pdf"
        )
        assert got.headers["Cache-Control"] == "private, no-store"


def test_served_content_type_is_the_signed_one(backend: Backend) -> None:
    key = new_key("image/png")
    assert put(backend.storage.presign_put(key, "image/png", 600), b"\x89PNG...", "image/png").status_code == 200
    url = backend.storage.presign_get(key, 60, content_type="image/png", disposition="inline", filename="x.png")
    got = requests.get(url, timeout=TIMEOUT)
    assert got.headers["Content-Type"] == "image/png"
    assert got.content == b"\x89PNG..."


def test_upload_url_is_reusable_within_its_lifetime(backend: Backend) -> None:
    key = new_key()
    url = backend.storage.presign_put(key, PDF, 600)
    assert put(url, b"first version").status_code == 200
    assert put(url, b"second, longer version").status_code == 200
    got = requests.get(
        backend.storage.presign_get(key, 60, content_type=PDF, disposition="attachment", filename="a.pdf"),
        timeout=TIMEOUT,
    )
    assert got.content == b"second, longer version"
    assert backend.storage.head(key) == ObjectInfo(size=22, content_type=PDF)


def _tamper_signature(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    changed = []
    for name, value in query:
        if name.lower() in ("signature", "x-amz-signature"):
            value = value[:-4] + ("0000" if not value.endswith("0000") else "1111")
        changed.append((name, value))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(changed)))


def test_tampered_signature_is_refused_and_nothing_stored(backend: Backend) -> None:
    key = new_key()
    response = put(_tamper_signature(backend.storage.presign_put(key, PDF, 600)), b"data")
    assert response.status_code == 403
    if backend.name == "local":  # S3 answers with the server's XML
        assert_error(response, 403, "FORBIDDEN")
    assert not backend.storage.exists(key)


def test_missing_signature_is_refused(backend: Backend) -> None:
    key = new_key()
    url = backend.storage.presign_put(key, PDF, 600).split("?", 1)[0]
    response = put(url, b"data")
    assert response.status_code == 403
    if backend.name == "local":  # S3 answers with the server's XML
        assert_error(response, 403, "FORBIDDEN")
    assert not backend.storage.exists(key)


def test_url_for_one_key_does_not_write_another(backend: Backend) -> None:
    key, other = new_key(), new_key()
    url = backend.storage.presign_put(key, PDF, 600)
    response = put(url.replace(key, other), b"data")
    assert response.status_code == 403
    if backend.name == "local":  # S3 answers with the server's XML
        assert_error(response, 403, "FORBIDDEN")
    assert not backend.storage.exists(other)
    assert not backend.storage.exists(key)


def test_other_content_type_is_refused_and_nothing_stored(backend: Backend) -> None:
    key = new_key()
    url = backend.storage.presign_put(key, PDF, 600)
    for content_type in ("text/html", "application/pdf; charset=utf-8", None):
        response = put(url, b"<html>", content_type)
        assert response.status_code == 403, content_type
        if backend.name == "local":  # S3 answers with the server's XML
            assert_error(response, 403, "FORBIDDEN")
    assert not backend.storage.exists(key)


def test_expired_upload_url_is_refused(backend: Backend) -> None:
    key = new_key()
    issued = time.time()
    url = backend.storage.presign_put(key, PDF, 1)
    # Both backends count in whole seconds from the second of issue: two full
    # seconds later the URL is past its lifetime on either.
    time.sleep(max(0.0, int(issued) + 2.2 - time.time()))
    response = put(url, b"late")
    assert response.status_code == 403
    if backend.name == "local":  # S3 answers with the server's XML
        assert_error(response, 403, "FORBIDDEN")
    assert not backend.storage.exists(key)


def test_expired_download_url_is_refused(backend: Backend) -> None:
    key = new_key()
    assert put(backend.storage.presign_put(key, PDF, 60), b"doc").status_code == 200
    issued = time.time()
    url = backend.storage.presign_get(key, 1, content_type=PDF, disposition="inline", filename="d.pdf")
    time.sleep(max(0.0, int(issued) + 2.2 - time.time()))
    assert requests.get(url, timeout=TIMEOUT).status_code == 403


def test_download_url_parameters_cannot_be_changed(backend: Backend) -> None:
    key = new_key()
    assert put(backend.storage.presign_put(key, PDF, 60), b"doc").status_code == 200
    url = backend.storage.presign_get(key, 60, content_type=PDF, disposition="inline", filename="report.pdf")
    assert "report.pdf" in url
    assert requests.get(url.replace("report.pdf", "other.pdf"), timeout=TIMEOUT).status_code == 403
    assert requests.get(_tamper_signature(url), timeout=TIMEOUT).status_code == 403
    other = new_key()
    assert put(backend.storage.presign_put(other, PDF, 60), b"other doc").status_code == 200
    assert requests.get(url.replace(key, other), timeout=TIMEOUT).status_code == 403


def test_missing_object_is_404(backend: Backend) -> None:
    url = backend.storage.presign_get(new_key(), 60, content_type=PDF, disposition="inline", filename="x.pdf")
    response = requests.get(url, timeout=TIMEOUT)
    assert response.status_code == 404
    if backend.name == "local":  # S3 answers with the server's XML
        assert_error(response, 404, "NOT_FOUND")


def test_delete(backend: Backend) -> None:
    key = new_key()
    assert put(backend.storage.presign_put(key, PDF, 60), b"doc").status_code == 200
    backend.storage.delete(key)
    assert not backend.storage.exists(key)
    backend.storage.delete(key)  # idempotent
    url = backend.storage.presign_get(key, 60, content_type=PDF, disposition="inline", filename="x.pdf")
    assert requests.get(url, timeout=TIMEOUT).status_code == 404


@pytest.mark.parametrize(
    "bad_key",
    [
        "../x.pdf",
        "requests/../../x.pdf",
        "/etc/passwd",
        "requests//x.pdf",
        "requests/./x.pdf",
        ".meta/x.json",
        "requests/.upload-1.part",
        "a\\b",
        "a%2e%2e",
        "",
        "requests/x.pdf/",
        "a b",
        "é.pdf",
        "x" * 600,
    ],
)
def test_invalid_keys_are_refused_by_both_backends(backend: Backend, bad_key: str) -> None:
    with pytest.raises(InvalidKeyError):
        backend.storage.presign_put(bad_key, PDF, 60)
    with pytest.raises(InvalidKeyError):
        backend.storage.presign_get(bad_key, 60, content_type=PDF, disposition="inline", filename="x.pdf")
    with pytest.raises(InvalidKeyError):
        backend.storage.head(bad_key)


def _raw_partial_put(url: str, content_type: str, announced: int, sent: bytes) -> socket.socket:
    """Start a PUT announcing ``announced`` bytes, send ``sent``; returns the open socket."""
    parts = urllib.parse.urlsplit(url)
    target = parts.path + ("?" + parts.query if parts.query else "")
    sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=TIMEOUT)
    head = (
        f"PUT {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {announced}\r\n\r\n"
    ).encode("ascii")
    sock.sendall(head + sent)
    return sock


def test_interrupted_upload_leaves_nothing_visible(backend: Backend) -> None:
    storage = backend.storage
    fresh, existing = new_key(), new_key()
    assert put(storage.presign_put(existing, PDF, 600), b"version one").status_code == 200

    for key in (fresh, existing):
        sock = _raw_partial_put(storage.presign_put(key, PDF, 600), PDF, 2_000_000, sample_bytes(200_000))
        if backend.storage_dir is not None:
            # Proof the server is mid-upload: its temp file exists and is not the object.
            target_dir = backend.storage_dir / key.rsplit("/", 1)[0]
            assert wait_until(
                lambda d=target_dir: any(p.name.endswith(".part") for p in d.glob(".upload-*")),
                timeout=10,
                interval=0.02,
            )
        sock.close()  # client goes away mid-body
        if backend.storage_dir is not None:
            assert wait_until(
                lambda: not list(backend.storage_dir.rglob(".upload-*.part")),  # type: ignore[union-attr]
                timeout=10,
                interval=0.02,
            )

    # The S3 server gives no sign of having dropped the upload: watch for a while.
    deadline = time.monotonic() + (1.0 if backend.name == "s3" else 0.1)
    while time.monotonic() < deadline:
        assert not storage.exists(fresh)
        time.sleep(0.05)
    assert storage.head(existing) == ObjectInfo(size=len(b"version one"), content_type=PDF)
    url = storage.presign_get(existing, 60, content_type=PDF, disposition="inline", filename="x.pdf")
    assert requests.get(url, timeout=TIMEOUT).content == b"version one"


# ----------------------------------------------------------------- local backend


@pytest.fixture
def local(local_server: LocalServer, tmp_path: Path) -> LocalStorage:
    storage = LocalStorage(tmp_path / "storage", signing_key=SIGNING_KEY, public_base_url=local_server.base_url)
    storage.prepare()
    local_server.app.add_route("/storage/{key:path}", StoredObject(storage))
    return storage


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_signed_url_made_in_the_past_has_expired(local: LocalStorage) -> None:
    past = LocalStorage(
        local.root, signing_key=SIGNING_KEY, public_base_url=local.public_base_url, clock=lambda: time.time() - 3600
    )
    key = new_key()
    response = put(past.presign_put(key, PDF, 600), b"data")
    assert response.status_code == 403
    assert response.json() == {"error": "URL has expired", "code": "FORBIDDEN"}
    assert not local.exists(key)
    # ... while the same signature with the real clock is valid (the key is the same).
    assert put(local.presign_put(key, PDF, 600), b"data").status_code == 200


def test_signature_from_another_secret_is_refused(local: LocalStorage) -> None:
    forger = LocalStorage(
        local.root, signing_key=b"another-secret-of-enough-length", public_base_url=local.public_base_url
    )
    key = new_key()
    assert put(forger.presign_put(key, PDF, 600), b"data").status_code == 403
    assert not local.exists(key)


def test_traversal_paths_write_nothing_anywhere(local: LocalStorage, tmp_path: Path) -> None:
    before = _tree(tmp_path)
    parts = urllib.parse.urlsplit(local.public_base_url)
    expires = int(time.time()) + 600
    for key in (
        "../outside.pdf",
        "requests/../../outside.pdf",
        "%2e%2e/outside.pdf",
        "requests/%2e%2e/%2e%2e/outside.pdf",
        "..%2foutside.pdf",
        ".meta/x.pdf.json",
        "/tmp/outside.pdf",
    ):
        # Even a correct signature over the bad key must not help.
        decoded = urllib.parse.unquote(key)
        signature = local._signature("PUT", decoded, expires, PDF)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=TIMEOUT)
        conn.request(
            "PUT",
            f"/storage/{key}?expires={expires}&signature={signature}",
            body=b"evil",
            headers={"Content-Type": PDF},
        )
        status = conn.getresponse().status
        conn.close()
        assert status in (400, 404), (key, status)
    assert _tree(tmp_path) == before
    assert not (tmp_path / "outside.pdf").exists()


def test_size_cap_answers_413_and_stores_nothing(local_server: LocalServer, tmp_path: Path) -> None:
    small = LocalStorage(
        tmp_path / "small",
        signing_key=SIGNING_KEY,
        public_base_url=local_server.base_url + "/small",
        max_upload_bytes=1000,
    )
    local_server.app.add_route("/small/storage/{key:path}", StoredObject(small))
    key = new_key()
    url = small.presign_put(key, PDF, 60)
    assert put(url, b"x" * 1000).status_code == 200
    response = put(url, b"y" * 1001)
    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert small.head(key) == ObjectInfo(size=1000, content_type=PDF)


def test_chunked_upload_without_length_is_refused(local: LocalStorage) -> None:
    key = new_key()
    response = requests.put(
        local.presign_put(key, PDF, 60), data=iter([b"a", b"b"]), headers={"Content-Type": PDF}, timeout=TIMEOUT
    )
    assert response.status_code == 411
    assert not local.exists(key)


def test_download_needs_all_signed_parameters(local: LocalStorage) -> None:
    key = new_key()
    assert put(local.presign_put(key, PDF, 60), b"doc").status_code == 200
    url = local.presign_get(key, 60, content_type=PDF, disposition="inline", filename="d.pdf")
    assert requests.get(url, timeout=TIMEOUT).headers["X-Content-Type-Options"] == "nosniff"
    for drop in ("expires", "signature", "content_type", "disposition", "filename"):
        parts = urllib.parse.urlsplit(url)
        query = [(n, v) for n, v in urllib.parse.parse_qsl(parts.query) if n != drop]
        stripped = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
        response = requests.get(stripped, timeout=TIMEOUT)
        assert response.status_code == 403, drop
        assert response.json()["code"] == "FORBIDDEN"
    # A PUT URL is no GET URL.
    assert requests.get(local.presign_put(key, PDF, 60), timeout=TIMEOUT).status_code == 403


def test_layout_sidecar_and_no_leftovers(local: LocalStorage) -> None:
    key = new_key()
    assert put(local.presign_put(key, PDF, 60), b"doc").status_code == 200
    assert (local.root / key).read_bytes() == b"doc"
    assert json.loads((local.root / ".meta" / f"{key}.json").read_text()) == {"content_type": PDF, "size": 3}
    assert not list(local.root.rglob(".upload-*"))


def test_purge_stale_uploads(local: LocalStorage) -> None:
    stale = local.root / "requests" / ".upload-abc.part"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fresh = local.root / "requests" / ".upload-def.part"
    fresh.write_bytes(b"x")
    assert local.purge_stale_uploads(3600) == 1
    assert not stale.exists() and fresh.exists()


def test_symlink_escape_is_refused(local: LocalStorage, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (local.root / "requests").mkdir(parents=True, exist_ok=True)
    (local.root / "requests" / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidKeyError):
        local.path_for("requests/link/x.pdf")
    response = put(local.presign_put("requests/link/x.pdf", PDF, 60), b"data")
    assert response.status_code == 400
    assert list(outside.iterdir()) == []


# ------------------------------------------------------------------- pure helpers


def test_validate_key_accepts_generated_keys() -> None:
    rid = uuid.uuid4()
    key = new_object_key(rid, PDF)
    assert validate_key(key) == key
    assert key.startswith(f"requests/{rid}/") and key.endswith(".pdf")
    assert new_object_key(rid, "image/jpeg").endswith(".jpg")
    assert new_object_key(rid, "application/x-made-up").endswith(".bin")
    assert new_object_key(rid, PDF) != key


def test_content_disposition_is_header_safe() -> None:
    value = content_disposition("attachment", 'a"b\r\nc;d.pdf')
    assert "\r" not in value and "\n" not in value
    assert value.startswith("attachment; filename=\"ab_cd.pdf\"; filename*=UTF-8''")
    assert ascii_filename("...") == "file"
    assert ascii_filename("Zpráva z vyšetření 2024.pdf") == "Zprava_z_vysetreni_2024.pdf"
    with pytest.raises(ValueError):
        content_disposition("evil", "x")  # type: ignore[arg-type]


def test_expires_in_bounds(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, signing_key=SIGNING_KEY, public_base_url="http://x")
    for bad in (0, -1, 7 * 24 * 3600 + 1):
        with pytest.raises(ValueError):
            storage.presign_put(new_key(), PDF, bad)


def test_make_storage_validates_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make_storage(Config(storage_backend="ftp"))
    with pytest.raises(ValueError):  # Config derives a key when none is set; a short one is refused
        make_storage(
            Config(
                storage_backend="local",
                storage_dir=str(tmp_path),
                storage_signing_key="too-short",
                public_base_url="http://x",
            )
        )
    with pytest.raises(ValueError):
        make_storage(Config(storage_backend="s3", s3_bucket=""))
    default = make_storage(Config(storage_dir=str(tmp_path)))
    assert isinstance(default, LocalStorage) and default.max_upload_bytes == Config().upload_max_bytes
    storage = make_storage(
        Config(
            storage_backend="local",
            storage_dir=str(tmp_path),
            storage_signing_key="k" * 32,
            public_base_url="http://x/",
            upload_max_bytes=5,
        )
    )
    assert isinstance(storage, LocalStorage) and storage.max_upload_bytes == 5
    assert storage.presign_put("a/b.pdf", PDF, 60).startswith("http://x/storage/a/b.pdf?expires=")
    assert isinstance(storage, Storage)


def test_s3_public_endpoint_url_from_the_environment_reaches_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """S3_PUBLIC_ENDPOINT_URL goes through Config and make_storage: presigned URLs (PUT
    through boto3, GET through the direct signer) name the public endpoint, while the
    service's own calls (head, delete, prepare) still go to S3_ENDPOINT_URL."""
    internal, public = "http://seaweedfs.internal:8333", "https://files.example.org"
    for name, value in {
        "STORAGE_BACKEND": "s3",
        "S3_BUCKET": "docs",
        "S3_ENDPOINT_URL": internal,
        "S3_PUBLIC_ENDPOINT_URL": public,
        "S3_REGION": "eu-central-1",
        "S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "S3_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    }.items():
        monkeypatch.setenv(name, value)
    config = Config.from_env()
    assert config.s3_public_endpoint_url == public
    s3 = make_storage(config)
    assert isinstance(s3, S3Storage)
    key = "a/b.pdf"
    assert s3.presign_put(key, PDF, 600).startswith(f"{public}/docs/{key}?")
    get = s3.presign_get(key, 600, content_type=PDF, disposition="inline", filename="b.pdf")
    assert get.startswith(f"{public}/docs/{key}?")
    assert s3._client.meta.endpoint_url == internal

    monkeypatch.delenv("S3_PUBLIC_ENDPOINT_URL")  # unset: URLs name S3_ENDPOINT_URL
    s3 = make_storage(Config.from_env())
    assert s3.presign_put(key, PDF, 600).startswith(f"{internal}/docs/{key}?")


# --------------------------------------------------- ranges, as PDF viewers read


def test_a_range_is_answered_206_with_its_bytes(backend: Backend) -> None:
    key, body = new_key(), sample_bytes(100_000)
    assert put(backend.storage.presign_put(key, PDF, 600), body).status_code == 200
    url = backend.storage.presign_get(key, 60, content_type=PDF, disposition="inline", filename="x.pdf")
    for asked, first, last in (
        ("bytes=0-1023", 0, 1023),
        ("bytes=99000-", 99_000, 99_999),
        ("bytes=-500", 99_500, 99_999),
        ("bytes=90000-200000", 90_000, 99_999),
    ):
        got = requests.get(url, headers={"Range": asked}, timeout=TIMEOUT)
        assert got.status_code == 206, (asked, got.text)
        assert got.content == body[first : last + 1]
        assert got.headers["Content-Range"] == f"bytes {first}-{last}/{len(body)}"
        assert got.headers["Content-Length"] == str(last - first + 1)
    past = requests.get(url, headers={"Range": "bytes=200000-"}, timeout=TIMEOUT)
    assert past.status_code == 416
    whole = requests.get(url, timeout=TIMEOUT)
    assert whole.status_code == 200 and whole.content == body


def test_head_on_a_download_url_answers_the_headers_only(local_backend_url: tuple[str, bytes]) -> None:
    url, body = local_backend_url
    head = requests.head(url, timeout=TIMEOUT)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["Content-Length"] == str(len(body)) and head.headers["Content-Type"] == PDF
    assert head.headers["Accept-Ranges"] == "bytes"
    forged = requests.head(url.replace("signature=", "signature=0"), timeout=TIMEOUT)
    assert forged.status_code == 403


@pytest.fixture
def local_backend_url(local_server: LocalServer, tmp_path: Path) -> tuple[str, bytes]:
    cfg = Config(
        storage_backend="local",
        storage_dir=str(tmp_path / "storage"),
        storage_signing_key=SIGNING_KEY.decode(),
        public_base_url=local_server.base_url,
    )
    local = make_storage(cfg)
    assert isinstance(local, LocalStorage)
    local.prepare()
    local_server.app.add_route("/storage/{key:path}", StoredObject(local))
    key, body = new_key(), sample_bytes(5_000)
    assert put(local.presign_put(key, PDF, 600), body).status_code == 200
    return local.presign_get(key, 60, content_type=PDF, disposition="inline", filename="x.pdf"), body


# ------------------------------------------------------------------ sealed copies


def _sealed_copy(local: LocalStorage, body: bytes) -> str:
    """An upload sealed as registration seals it; returns the sealed key."""
    upload = new_key()
    assert put(local.presign_put(upload, PDF, 600), body).status_code == 200
    target = sealed_key(upload)
    local.seal(upload, target)
    return target


def test_a_correctly_signed_put_to_a_sealed_key_is_refused_and_changes_nothing(local: LocalStorage) -> None:
    """A signing key that leaked (the built-in SECRET_KEY derives it) signs any URL; a sealed
    copy is refused by its key, whatever the signature says."""
    original = sample_bytes(10_000)
    target = _sealed_copy(local, original)
    assert target.startswith(SEALED_PREFIX)
    expires = int(time.time()) + 600
    forged = local._url(target, {"expires": str(expires), "signature": local._signature("PUT", target, expires, PDF)})
    response = put(forged, b"%PDF-1.7 forged")
    assert response.status_code == 403 and response.json()["code"] == "FORBIDDEN"
    assert local.path_for(target).read_bytes() == original
    assert local.head(target) == ObjectInfo(size=len(original), content_type=PDF)
    with pytest.raises(AccessDenied):
        local.verify_put(
            target, expires=str(expires), signature=local._signature("PUT", target, expires, PDF), content_type=PDF
        )


def test_no_backend_presigns_a_put_for_a_sealed_key(local: LocalStorage) -> None:
    # Presigning S3 is local computation: no server is needed to see that none is made.
    s3 = S3Storage(
        bucket="sealed-test",
        endpoint_url="http://127.0.0.1:9",
        access_key_id="AKTEST",
        secret_access_key="secret-test-key",
    )
    key = sealed_key(new_key())
    for storage in (local, s3):
        with pytest.raises(AccessDenied):
            storage.presign_put(key, PDF, 600)
        assert storage.presign_put(new_key(), PDF, 600)  # uploads still get their links
    assert local.presign_get(key, 60, content_type=PDF, disposition="inline", filename="x.pdf")  # reading is fine


# ------------------------------------------------------------- durability


def test_an_upload_and_its_new_directories_are_durable_once_stored(
    local: LocalStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rename is durable once its directory is fsynced, and a new directory once its
    parent is; write_stream does both before it returns (the registered copy is written by
    it too: tests/test_signed_documents.py checks that order against the upload's deletion)."""
    events = record_fsyncs(monkeypatch)
    key = new_key()
    local.write_stream(key, io.BytesIO(b"%PDF-1.7 doc"), None, PDF)
    directory = str(local.path_for(key).parent)
    synced = [path for event, path in events if event == "fsync"]
    # The file (by its temporary name), later the directory that holds its final name.
    assert any(path.startswith(directory + "/.upload-") for path in synced), synced
    assert synced[-1] == directory, synced
    # requests/ and requests/<request>/ were made: each is durable in its parent.
    assert str(local.root) in synced and str(local.root / "requests") in synced, synced
    assert str(local._meta_path(key).parent) in synced, synced  # the sidecar's rename too
