"""`python manage.py migrate` (the release step) also prepares document storage."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_URL, ROOT
from tests.support import SECRET_KEY
from tests.support.seaweed import run_seaweedfs


def migrate(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "migrate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DATABASE_URL": PG_URL, "SECRET_KEY": SECRET_KEY, **env},
    )


def test_migrate_creates_the_local_storage_directory(app, tmp_path: Path) -> None:
    target = tmp_path / "a" / "storage"
    done = migrate(STORAGE_BACKEND="local", STORAGE_DIR=str(target))
    assert done.returncode == 0, done.stderr
    assert target.is_dir()
    assert migrate(STORAGE_BACKEND="local", STORAGE_DIR=str(target)).returncode == 0  # idempotent


@pytest.mark.seaweedfs
def test_migrate_creates_a_missing_bucket_and_keeps_an_existing_one(app, tmp_path: Path) -> None:
    with run_seaweedfs(bucket="existing-bucket", workdir=tmp_path / "sw") as sw:
        client = sw.client()
        client.put_object(Bucket="existing-bucket", Key="keep.txt", Body=b"kept")
        env = {
            "STORAGE_BACKEND": "s3",
            "S3_ENDPOINT_URL": sw.s3_endpoint_url,
            "S3_REGION": sw.s3_region,
            "S3_ACCESS_KEY_ID": sw.s3_access_key_id,
            "S3_SECRET_ACCESS_KEY": sw.s3_secret_access_key,
        }
        for bucket in ("new-bucket", "new-bucket", "existing-bucket"):
            done = migrate(**env, S3_BUCKET=bucket)
            assert done.returncode == 0, done.stderr
        client.head_bucket(Bucket="new-bucket")
        assert client.get_object(Bucket="existing-bucket", Key="keep.txt")["Body"].read() == b"kept"
