"""Upload and download a large file through each storage backend, against a raw copy.

    .venv/bin/python bench/storage_bench.py [--size-mb 50] [--repeat 3] [--backends local,s3]

For each backend the file goes client -> presigned PUT -> server and back through a
presigned GET (written to a file, as the raw copy does), over real HTTP on
127.0.0.1. The local backend runs in gunicorn (one sync worker, as in production);
S3 is a SeaweedFS started by ``tests/seaweed.py``. Reported: median throughput, the
ratio to ``shutil.copyfile`` of the same bytes measured in the same run, and the
server process's peak RSS above its idle RSS (kernel high-water mark, VmHWM).

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
    idle_rss: int
    peak_rss: int
    fsync: bool


def run_transfers(
    name: str, storage: Storage, server_pid: int, source: Path, workdir: Path, repeat: int, fsync: bool
) -> Result:
    size = source.stat().st_size
    received = workdir / f"received-{name}.bin"
    # Warm-up: every code path imported and touched once before idle RSS is taken.
    warm = workdir / "warm.bin"
    warm.write_bytes(os.urandom(64 * 1024))
    assert http_put(storage.presign_put("bench/warm.bin", PDF, 600), warm, PDF) == 200
    assert http_get(storage.presign_get("bench/warm.bin", 600, content_type=PDF, disposition="attachment",
                                        filename="warm.pdf"), received) == 200
    time.sleep(0.2)  # let the server settle before the idle reading (not a readiness wait)
    sampler = PeakRss(server_pid)
    idle = sampler.rss()
    ups: list[float] = []
    downs: list[float] = []
    with sampler:
        # One untimed round first, as for the raw copy; every round deletes its
        # object again, as the raw copy deletes its copy, so both write to recycled
        # page cache rather than one of them to pages the VM never touched.
        for i in range(repeat + 1):
            key = f"bench/run-{i}.pdf"
            put_url = storage.presign_put(key, PDF, 600)
            status: list[int] = []
            ups.append(timed(lambda: status.append(http_put(put_url, source, PDF))))
            get_url = storage.presign_get(key, 600, content_type=PDF, disposition="attachment", filename="b.pdf")
            downs.append(timed(lambda: status.append(http_get(get_url, received))))
            assert status == [200, 200], status
            assert received.stat().st_size == size
            storage.delete(key)
            if i == 0:
                ups.pop()
                downs.pop()
    assert _sha256(received) == _sha256(source), "downloaded bytes differ"
    received.unlink()
    return Result(name, statistics.median(ups), statistics.median(downs), idle, sampler.peak, fsync)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    serve_cmd = sub.add_parser("serve", help=argparse.SUPPRESS)
    serve_cmd.add_argument("--dir", required=True)
    serve_cmd.add_argument("--port", type=int, required=True)
    serve_cmd.add_argument("--no-fsync", dest="fsync", action="store_false")
    parser.add_argument("--size-mb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backends", default="local,s3")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.dir, args.port, args.fsync)
        return 0

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    with tempfile.TemporaryDirectory(prefix="storage-bench-", dir=ROOT / "var" if (ROOT / "var").is_dir() else None) as tmp:
        workdir = Path(tmp)
        source = workdir / "payload.bin"
        with open(source, "wb") as out:
            for _ in range(args.size_mb):
                out.write(os.urandom(MIB))
        size = source.stat().st_size

        copies = []
        for i in range(args.repeat + 1):
            dst = workdir / f"copy-{i}.bin"
            copies.append(timed(lambda: shutil.copyfile(source, dst)))
            dst.unlink()
        raw = statistics.median(copies[1:])

        results: list[Result] = []
        sink: float | None = None
        drop = local_up = 0.0
        if "local-nofsync" in backends:
            with local_server(workdir, fsync=False) as (storage, worker_pid):
                results.append(run_transfers("local", storage, worker_pid, source, workdir, args.repeat, False))
        if "local" in backends:
            with local_server(workdir, fsync=True) as (storage, worker_pid):
                results.append(run_transfers("local", storage, worker_pid, source, workdir, args.repeat, True))
                sink_url = f"{storage.public_base_url}/sink?"
                local_up = results[-1].up_seconds
                assert http_put(storage.presign_put("bench/keep.pdf", PDF, 600), source, PDF) == 200
                keep_url = storage.presign_get("bench/keep.pdf", 600, content_type=PDF, disposition="inline",
                                               filename="k.pdf")
                drop = statistics.median(
                    [timed(lambda: http_get(keep_url, None)) for _ in range(args.repeat + 1)][1:]
                )
                sink = statistics.median(
                    [timed(lambda: http_put(sink_url, source, PDF)) for _ in range(args.repeat + 1)][1:]
                )
        if "s3" in backends:
            from tests.seaweed import run_seaweedfs

            with run_seaweedfs(bucket="bench", workdir=workdir / "seaweed") as sw:
                s3 = S3Storage(bucket=sw.s3_bucket, endpoint_url=sw.s3_endpoint_url, region=sw.s3_region,
                               access_key_id=sw.s3_access_key_id, secret_access_key=sw.s3_secret_access_key)
                results.append(run_transfers("s3", s3, sw.pid, source, workdir, args.repeat, False))

    def mbps(seconds: float) -> float:
        return size / MIB / seconds

    ok = True
    print(f"payload {size / MIB:.0f} MiB, median of {args.repeat}; raw shutil.copyfile {mbps(raw):.0f} MiB/s")
    print(f"{'backend':8} {'upload MiB/s':>13} {'ratio':>6} {'download MiB/s':>15} {'ratio':>6} "
          f"{'idle RSS MiB':>13} {'peak +MiB':>10}  server process")
    for r in results:
        up_ratio, down_ratio = raw / r.up_seconds, raw / r.down_seconds
        extra = (r.peak_rss - r.idle_rss) / MIB
        proc = f"gunicorn sync worker (fsync {'on' if r.fsync else 'off'})" if r.backend == "local" else "weed mini"
        print(f"{r.backend:8} {mbps(r.up_seconds):13.0f} {up_ratio:6.2f} {mbps(r.down_seconds):15.0f} "
              f"{down_ratio:6.2f} {r.idle_rss / MIB:13.1f} {extra:10.1f}  {proc}")
        ok &= up_ratio >= 0.5 and down_ratio >= 0.5 and extra < 50
    if sink is not None:
        print(f"reference: same gunicorn worker reading a PUT body and discarding it: {mbps(sink):.0f} MiB/s "
              f"(ratio {raw / sink:.2f}); local upload reaches {sink / local_up:.2f} of that")
        print(f"reference: local download with the client dropping the bytes: {mbps(drop):.0f} MiB/s "
              f"(ratio {raw / drop:.2f})")
    print("targets (ratio >= 0.50, peak < 50 MiB above idle):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
