"""The direct SigV4 GET presigner produces botocore's URLs, and SeaweedFS accepts them."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
import requests

from storage import DOWNLOAD_CACHE_CONTROL, S3Storage, SigV4Presigner, content_disposition
from tests.support.seaweed import run_seaweedfs


def _botocore_url(storage: S3Storage, key: str, filename: str) -> str:
    fast, storage._fast_signer = storage._fast_signer, None
    try:
        return storage.presign_get(
            key, 3600, content_type="application/pdf", disposition="attachment", filename=filename
        )
    finally:
        storage._fast_signer = fast


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:8333",
        "https://s3.example.org",
        "https://s3.example.org:8443",
        "http://storage.internal:80/prefix",
    ],
)
@pytest.mark.parametrize("filename", ["a.pdf", "Souhlas s léčbou v3 (final) & co.pdf", "名前.pdf"])
def test_same_url_as_botocore(endpoint: str, filename: str) -> None:
    storage = S3Storage(
        bucket="docs",
        endpoint_url=endpoint,
        region="eu-central-1",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    )
    key = "requests/7b1c0c55-7b4e-4a43-9a56-5e0f6a4b2d10/0123abcd.pdf"
    reference = _botocore_url(storage, key, filename)
    assert storage._fast_signer is not None
    ours = storage._fast_signer.presign(
        "GET",
        "docs",
        key,
        3600,
        {
            "response-content-type": "application/pdf",
            "response-content-disposition": content_disposition("attachment", filename),
            "response-cache-control": DOWNLOAD_CACHE_CONTROL,
        },
    )
    theirs, mine = urllib.parse.urlsplit(reference), urllib.parse.urlsplit(ours)
    assert mine[:3] == theirs[:3]
    # Same signed parameters; date and signature differ only when the second ticks over.
    moving = {"X-Amz-Date", "X-Amz-Signature"}
    strip = lambda q: {k: v for k, v in urllib.parse.parse_qsl(q) if k not in moving}  # noqa: E731
    assert strip(mine.query) == strip(theirs.query)
    assert set(dict(urllib.parse.parse_qsl(mine.query))) == set(dict(urllib.parse.parse_qsl(theirs.query)))


def test_without_static_keys_boto3_signs() -> None:
    assert S3Storage(bucket="docs", endpoint_url="http://127.0.0.1:1")._fast_signer is None


@pytest.mark.seaweedfs
def test_seaweedfs_serves_a_direct_url_and_refuses_a_tampered_one(tmp_path: Path) -> None:
    with run_seaweedfs(bucket="presign-test", workdir=tmp_path / "sw") as sw:
        storage = S3Storage(
            bucket=sw.s3_bucket,
            endpoint_url=sw.s3_endpoint_url,
            region=sw.s3_region,
            access_key_id=sw.s3_access_key_id,
            secret_access_key=sw.s3_secret_access_key,
        )
        assert isinstance(storage._fast_signer, SigV4Presigner)
        sw.client().put_object(Bucket=sw.s3_bucket, Key="a/b.pdf", Body=b"%PDF-1.7 body", ContentType="application/pdf")
        url = storage.presign_get(
            "a/b.pdf", 600, content_type="application/pdf", disposition="attachment", filename="Souhlas s léčbou.pdf"
        )
        got = requests.get(url, timeout=30)
        assert got.status_code == 200 and got.content == b"%PDF-1.7 body"
        assert got.headers["Content-Disposition"] == content_disposition("attachment", "Souhlas s léčbou.pdf")
        assert got.headers["Cache-Control"] == DOWNLOAD_CACHE_CONTROL
        tampered = url.replace("response-content-type=application%2Fpdf", "response-content-type=text%2Fhtml")
        assert tampered != url and 400 <= requests.get(tampered, timeout=30).status_code < 500
