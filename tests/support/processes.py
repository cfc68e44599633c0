"""Subprocesses: stopping one, its children, `manage.py` and the RQ worker it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis
from rq import Worker

from jobs.companions import terminate
from tests.support import ROOT
from tests.support.servers import wait_until


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    terminate(proc, timeout)


def children(pid: int) -> set[int]:
    """Child pids of `pid` (gunicorn's workers: the same set before and after a fault
    means no worker was restarted)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def manage(env: dict[str, str], *args: str) -> str:
    """`python manage.py *args` in the repository with `env`; its output, stripped.
    It must succeed (AssertionError with its output otherwise)."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"manage.py {args[0]}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout.strip()


def start_worker(env: dict[str, str], log: Path, interval: float = 0.1) -> subprocess.Popen:
    """`python manage.py worker` as the Procfile runs it (output appended to `log`),
    once it has registered in Redis (`env["REDIS_URL"]`); polled every `interval` s for
    up to 120 s. If it exits or does not register, it is stopped and AssertionError raised."""
    connection = redis.Redis.from_url(env["REDIS_URL"])
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "worker"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    ready = wait_until(
        lambda: proc.poll() is not None or any(w.pid == proc.pid for w in Worker.all(connection=connection)),
        timeout=120,
        interval=interval,
    )
    if not ready or proc.poll() is not None:
        stop_process(proc, 30)
        raise AssertionError(log.read_text()[-3000:])
    return proc


def run_manage(*args: str) -> subprocess.CompletedProcess:
    """`python manage.py *args` against the test process's database; its outcome, whatever it is."""
    from tests.conftest import PG_URL

    env = {**os.environ, "DATABASE_URL": PG_URL}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
