"""Upload and download a large file through each storage backend, against a raw copy.

    .venv/bin/python bench/storage_bench.py [--size-mb 50] [--repeat 5] [--backends local,s3]

Every transfer goes client -> PUT -> server and back through a GET (written to a
file), over real HTTP on 127.0.0.1, with the same client code and 1 MiB chunks.

Baseline (measured in the same run, rounds interleaved with the backend's): the raw
bytes over the same loopback HTTP path to a trivial handler in the same gunicorn sync
worker, which writes the PUT body to a plain file in 1 MiB pieces and serves the GET
from a plain file (no signature, no temp file, no fsync, no sidecar). The ratio is the
backend's throughput over that baseline's. The local backend runs in that gunicorn
worker (as in production); S3 is a SeaweedFS (``weed mini``) started by
``tests/support/seaweed.py``, so its ratio is SeaweedFS's against our raw HTTP path.

Extra reference lines: a Python read/write copy loop (1 MiB chunks) and
``shutil.copyfile`` (an in-kernel copy: no user-space pass over the bytes, so no
network transfer can approach it), plus the gunicorn worker reading a PUT body and
dropping it (the transport's ceiling).

Memory: the server process's peak RSS above its idle RSS (kernel high-water mark,
VmHWM) over all rounds of the backend (gunicorn worker; ``weed mini`` for S3).

Targets: ratio >= 0.5, peak RSS < 50 MB above idle. Exit status 1 if one is missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from storage import LocalStorage, S3Storage, Storage  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.processes import stop_process  # noqa: E402

SIGNING_KEY = "bench-signing-key-0123456789abcdef"
BLOCK = 1024 * 1024
PDF = "application/pdf"
MIB = 1024 * 1024


# ------------------------------------------------------------------ server mode


class _Sink:
    """Reads a PUT body the way StoredObject does and drops it: the transport's ceiling."""

    def on_put(self, req: Any, resp: Any) -> None:
        stream = req.bounded_stream
        while stream.read(BLOCK):
            pass
        resp.text = "{}"


class _RawFile:
    """The baseline: a trivial handler moving the raw bytes between the socket and a
    plain file, with the same chunk size and the same streaming as the backend."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def on_put(self, req: Any, resp: Any, name: str) -> None:
        stream = req.bounded_stream
        with open(self.directory / name, "wb", buffering=0) as out:
            while block := stream.read(BLOCK):
                out.write(block)
        resp.text = "{}"

    def on_get(self, req: Any, resp: Any, name: str) -> None:
        path = self.directory / name
        resp.content_type = PDF
        resp.set_stream(open(path, "rb"), path.stat().st_size)  # noqa: SIM115 (Falcon closes the stream)

    def on_delete(self, req: Any, resp: Any, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)
        resp.text = "{}"


def serve(storage_dir: str, port: int, fsync: bool) -> None:
    """Run the local backend's resource under gunicorn (the production server)."""
    import falcon
    from gunicorn.app.base import BaseApplication

    from resources.storage_objects import StoredObject

    storage = LocalStorage(
        storage_dir, signing_key=SIGNING_KEY, public_base_url=f"http://127.0.0.1:{port}", fsync=fsync
    )
    storage.prepare()
    app = falcon.App()
    app.add_route("/storage/{key:path}", StoredObject(storage))
    app.add_route("/sink", _Sink())
    app.add_route("/raw/{name}", _RawFile(Path(storage_dir).parent / "raw"))

    class _Gunicorn(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            for name, value in {
                "bind": f"127.0.0.1:{port}",
                "workers": 1,
                "worker_class": "sync",
                "timeout": 120,
                "accesslog": None,
                "loglevel": "warning",
            }.items():
                self.cfg.set(name, value)

        def load(self) -> falcon.App[falcon.Request, falcon.Response]:
            return app

    _Gunicorn().run()


# ------------------------------------------------------------------ measurement


class PeakRss:
    """Peak RSS of a process over a block, from the kernel's own high-water mark.

    Writing 5 to ``/proc/PID/clear_refs`` resets ``VmHWM`` to the current RSS, so
    the peak costs no sampling (a sampling thread in the client would compete with
    the transfer for the GIL and for the 2 cores). Falls back to sampling with
    psutil every 5 ms where ``clear_refs`` is not writable.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.process = psutil.Process(pid)
        self.peak = 0
        self._sampling: threading.Thread | None = None
        self._stop = threading.Event()

    def rss(self) -> int:
        return int(self.process.memory_info().rss)

    def _hwm(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM")

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.005)

    def __enter__(self) -> PeakRss:
        self.peak = self.rss()
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as clear:
                clear.write("5")
        except OSError:
            self._sampling = threading.Thread(target=self._sample, daemon=True)
            self._sampling.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sampling is not None:
            self._stop.set()
            self._sampling.join()
            self.peak = max(self.peak, self.rss())
        else:
            self.peak = self._hwm()
        self.method = "sampled" if self._sampling is not None else "VmHWM"


def http_put(url: str, source: Path, content_type: str) -> int:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120, blocksize=BLOCK)
    try:
        with open(source, "rb") as body:
            conn.request(
                "PUT",
                f"{parts.path}?{parts.query}",
                body=body,
                headers={"Content-Type": content_type, "Content-Length": str(source.stat().st_size)},
            )
            response = conn.getresponse()
            response.read()
            return response.status
    finally:
        conn.close()


def http_get(url: str, target: Path | None) -> int:
    """GET into ``target``, or read and drop the body when ``target`` is None."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
    buffer = bytearray(BLOCK)
    view = memoryview(buffer)
    try:
        conn.request("GET", f"{parts.path}?{parts.query}")
        response = conn.getresponse()
        with open(target if target is not None else os.devnull, "wb") as out:
            while n := response.readinto(buffer):
                if target is not None:
                    out.write(view[:n])
        return response.status
    finally:
        conn.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclasses.dataclass
class Result:
    backend: str
    up_seconds: float
    down_seconds: float
    raw_up_seconds: float
    raw_down_seconds: float
    idle_rss: int
    peak_rss: int
    server: str


def run_transfers(
    name: str,
    storage: Storage,
    server_pid: int,
    raw_base_url: str,
    source: Path,
    workdir: Path,
    repeat: int,
    server: str,
) -> Result:
    """``repeat`` timed rounds (after one untimed), each moving the file through the
    backend and through the raw baseline, alternating which goes first."""
    size = source.stat().st_size
    received = workdir / f"received-{name}.bin"
    raw_url = f"{raw_base_url}/raw/payload.bin?"
    # Warm-up: every code path imported and touched once before idle RSS is taken.
    warm = workdir / "warm.bin"
    warm.write_bytes(os.urandom(64 * 1024))
    assert http_put(storage.presign_put("bench/warm.bin", PDF, 600), warm, PDF) == 200
    assert (
        http_get(
            storage.presign_get("bench/warm.bin", 600, content_type=PDF, disposition="attachment", filename="warm.pdf"),
            received,
        )
        == 200
    )
    storage.delete("bench/warm.bin")
    time.sleep(0.2)  # let the server settle before the idle reading (not a readiness wait)
    sampler = PeakRss(server_pid)
    idle = sampler.rss()
    ups: list[float] = []
    downs: list[float] = []
    raw_ups: list[float] = []
    raw_downs: list[float] = []

    def backend_round(i: int) -> None:
        key = f"bench/run-{i}.pdf"
        put_url = storage.presign_put(key, PDF, 600)
        status: list[int] = []
        ups.append(timed(lambda: status.append(http_put(put_url, source, PDF))))
        get_url = storage.presign_get(key, 600, content_type=PDF, disposition="attachment", filename="b.pdf")
        downs.append(timed(lambda: status.append(http_get(get_url, received))))
        assert status == [200, 200], status
        assert received.stat().st_size == size
        storage.delete(key)
        received.unlink()

    def raw_round(i: int) -> None:
        status: list[int] = []
        raw_ups.append(timed(lambda: status.append(http_put(raw_url, source, PDF))))
        raw_downs.append(timed(lambda: status.append(http_get(raw_url, received))))
        assert status == [200, 200], status
        assert received.stat().st_size == size
        http_request("DELETE", raw_url)
        received.unlink()

    with sampler:
        # Every round deletes what it wrote, so both sides write to recycled page
        # cache rather than one of them to pages the VM never touched.
        for i in range(repeat + 1):
            if i % 2:
                raw_round(i)
                backend_round(i)
            else:
                backend_round(i)
                raw_round(i)
        # Integrity: one more backend round whose download is kept and compared.
        key = "bench/check.pdf"
        assert http_put(storage.presign_put(key, PDF, 600), source, PDF) == 200
        assert (
            http_get(
                storage.presign_get(key, 600, content_type=PDF, disposition="attachment", filename="c.pdf"), received
            )
            == 200
        )
        storage.delete(key)
    assert _sha256(received) == _sha256(source), "downloaded bytes differ"
    received.unlink()
    return Result(
        name,
        statistics.median(ups[1:]),
        statistics.median(downs[1:]),
        statistics.median(raw_ups[1:]),
        statistics.median(raw_downs[1:]),
        idle,
        sampler.peak,
        server,
    )


def http_request(method: str, url: str) -> int:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
    try:
        conn.request(method, f"{parts.path}?{parts.query}")
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def python_copy(source: Path, target: Path) -> None:
    """The user-space copy loop: read and write in the same 1 MiB chunks."""
    with open(source, "rb", buffering=0) as src, open(target, "wb", buffering=0) as dst:
        while block := src.read(BLOCK):
            dst.write(block)


@contextmanager
def local_server(workdir: Path, fsync: bool) -> Iterator[tuple[LocalStorage, int]]:
    port = free_port()
    storage_dir = workdir / "local-storage"
    proc = subprocess.Popen(
        [sys.executable, __file__, "serve", "--dir", str(storage_dir), "--port", str(port)]
        + ([] if fsync else ["--no-fsync"]),
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        worker: int | None = None
        while time.monotonic() < deadline and worker is None:
            if proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {proc.returncode}")
            children = psutil.Process(proc.pid).children()
            if children:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        worker = children[0].pid
                except OSError:
                    pass
            if worker is None:
                time.sleep(0.05)
        if worker is None:
            raise RuntimeError("gunicorn did not come up in 30 s")
        storage = LocalStorage(storage_dir, signing_key=SIGNING_KEY, public_base_url=f"http://127.0.0.1:{port}")
        yield storage, worker
    finally:
        stop_process(proc, 15)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    serve_cmd = sub.add_parser("serve", help=argparse.SUPPRESS)
    serve_cmd.add_argument("--dir", required=True)
    serve_cmd.add_argument("--port", type=int, required=True)
    serve_cmd.add_argument("--no-fsync", dest="fsync", action="store_false")
    parser.add_argument("--size-mb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--backends",
        default="local,s3",
        help="comma-separated: local, s3, local-nofsync (the local backend without its fsync)",
    )
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.dir, args.port, args.fsync)
        return 0

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    with tempfile.TemporaryDirectory(
        prefix="storage-bench-", dir=ROOT / "var" if (ROOT / "var").is_dir() else None
    ) as tmp:
        workdir = Path(tmp)
        source = workdir / "payload.bin"
        with open(source, "wb") as out:
            for _ in range(args.size_mb):
                out.write(os.urandom(MIB))
        size = source.stat().st_size

        def median_of(copy: Callable[[Path, Path], object]) -> float:
            times = []
            for i in range(args.repeat + 1):
                dst = workdir / f"copy-{i}.bin"
                times.append(timed(lambda dst=dst: copy(source, dst)))
                dst.unlink()
            return statistics.median(times[1:])

        copyfile = median_of(shutil.copyfile)
        pycopy = median_of(python_copy)

        results: list[Result] = []
        sink = drop = 0.0
        for backend in backends:
            fsync = backend != "local-nofsync"
            with local_server(workdir / backend, fsync=fsync) as (storage, worker_pid):
                raw_base = storage.public_base_url
                if backend in ("local", "local-nofsync"):
                    server = f"gunicorn sync worker, fsync {'on' if fsync else 'off'}"
                    results.append(
                        run_transfers(backend, storage, worker_pid, raw_base, source, workdir, args.repeat, server)
                    )
                    if backend == "local":
                        sink_url = f"{raw_base}/sink?"
                        sink = statistics.median(
                            [timed(lambda url=sink_url: http_put(url, source, PDF)) for _ in range(args.repeat + 1)][1:]
                        )
                        assert http_put(storage.presign_put("bench/keep.pdf", PDF, 600), source, PDF) == 200
                        keep_url = storage.presign_get(
                            "bench/keep.pdf", 600, content_type=PDF, disposition="inline", filename="k.pdf"
                        )
                        drop = statistics.median(
                            [timed(lambda url=keep_url: http_get(url, None)) for _ in range(args.repeat + 1)][1:]
                        )
                elif backend == "s3":
                    from tests.support.seaweed import run_seaweedfs

                    with run_seaweedfs(bucket="bench", workdir=workdir / "seaweed") as sw:
                        s3 = S3Storage(
                            bucket=sw.s3_bucket,
                            endpoint_url=sw.s3_endpoint_url,
                            region=sw.s3_region,
                            access_key_id=sw.s3_access_key_id,
                            secret_access_key=sw.s3_secret_access_key,
                        )
                        results.append(
                            run_transfers(
                                "s3", s3, sw.pid, raw_base, source, workdir, args.repeat, "weed mini (SeaweedFS)"
                            )
                        )
                else:
                    parser.error(f"unknown backend {backend!r}")

    def mbps(seconds: float) -> float:
        return size / MIB / seconds

    ok = True
    print(f"payload {size / MIB:.0f} MiB, median of {args.repeat} interleaved rounds")
    print(
        f"{'backend':14} {'upload MiB/s':>12} {'raw':>6} {'ratio':>6} {'download MiB/s':>14} {'raw':>6} "
        f"{'ratio':>6} {'idle RSS MiB':>12} {'peak +MiB':>9}  server process"
    )
    for r in results:
        up_ratio, down_ratio = r.raw_up_seconds / r.up_seconds, r.raw_down_seconds / r.down_seconds
        extra = (r.peak_rss - r.idle_rss) / MIB
        print(
            f"{r.backend:14} {mbps(r.up_seconds):12.0f} {mbps(r.raw_up_seconds):6.0f} {up_ratio:6.2f} "
            f"{mbps(r.down_seconds):14.0f} {mbps(r.raw_down_seconds):6.0f} {down_ratio:6.2f} "
            f"{r.idle_rss / MIB:12.1f} {extra:9.1f}  {r.server}"
        )
        ok &= up_ratio >= 0.5 and down_ratio >= 0.5 and extra < 50
    print(
        "raw = the same bytes over the same loopback HTTP path to a trivial file handler in the same "
        "gunicorn worker, same run"
    )
    print(
        f"reference: Python read/write copy loop, 1 MiB chunks: {mbps(pycopy):.0f} MiB/s; "
        f"shutil.copyfile (in-kernel): {mbps(copyfile):.0f} MiB/s"
    )
    if sink:
        print(
            f"reference: gunicorn worker reading a PUT body and discarding it: {mbps(sink):.0f} MiB/s; "
            f"local download with the client discarding the bytes: {mbps(drop):.0f} MiB/s"
        )
    print("targets (ratio >= 0.50, peak < 50 MiB above idle):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
