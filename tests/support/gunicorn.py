"""The web process as the Procfile runs it (gunicorn), started and waited for."""

from __future__ import annotations

import contextlib
import http.client
import re
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from tests.support import ROOT
from tests.support.ports import free_port, listening
from tests.support.processes import stop_process
from tests.support.servers import wait_until


def web_command(port: int, *options: str, app: str = "wsgi:app") -> list[str]:
    """The Procfile's `web` command, its `${VAR:-default}`s at their defaults, bound to
    127.0.0.1:`port` instead of `$PORT`; gunicorn `options` come last, so they win. Tests
    and benchmarks run the web process through this, so they run what production runs."""
    line = next(x for x in (ROOT / "Procfile").read_text().splitlines() if x.startswith("web:"))
    args = shlex.split(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", line[len("web:") :]))
    args[0] = str(Path(sys.executable).parent / args[0])  # gunicorn of this virtualenv
    args[args.index("wsgi:app")] = app
    args[args.index("--bind") + 1] = f"127.0.0.1:{port}"  # --bind appends: replace it, do not add
    return args + list(options)


def serving(base_url: str, path: str = "/healthz", timeout: float = 2) -> bool:
    """Does GET `base_url` + `path` answer 200 now?"""
    try:
        with urllib.request.urlopen(base_url + path, timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, http.client.HTTPException):
        return False


def start_gunicorn(
    port: int,
    *options: str,
    env: dict[str, str],
    app: str = "wsgi:app",
    log: Path | None = None,
    stdout: int | IO | None = None,
    stderr: int | IO | None = None,
    ready: Callable[[subprocess.Popen], bool] | None = None,
    timeout: float = 30,
    interval: float = 0.1,
) -> subprocess.Popen:
    """`web_command(port, *options, app=app)` in the repository with `env`, once
    `ready(proc)` (default: the port accepts connections), polled every `interval` s for
    up to `timeout` s. Its output is appended to `log` (stderr too) if given, else goes to
    `stdout` and `stderr` (default: this process's). If it exits or is not ready in time,
    it is stopped and AssertionError raised with the end of its log (or piped stderr)."""
    command = web_command(port, *options, app=app)
    if log is not None:
        with open(log, "ab") as out:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    else:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
    check = ready or (lambda _: listening(port))
    up = wait_until(lambda: proc.poll() is not None or check(proc), timeout=timeout, interval=interval)
    if up and proc.poll() is None:
        return proc
    stop_process(proc, 15)
    if log is not None:
        output = log.read_text(errors="replace")[-3000:]
    elif proc.stderr is not None:
        output = proc.stderr.read().decode(errors="replace")[-3000:]
    else:
        output = f"exit status {proc.returncode}"
    raise AssertionError(f"gunicorn did not start: {output}")


@contextlib.contextmanager
def serving_gunicorn(
    *options: str,
    env: dict[str, str],
    log: Path,
    port: int | None = None,
    timeout: float = 60,
    stop_timeout: float = 30,
) -> Iterator[str]:
    """The web process (`start_gunicorn`, output appended to `log`) on `port` (default: a
    free one) until the block ends, once it answers /healthz; yields its base URL."""
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}"
    proc = start_gunicorn(port, *options, env=env, log=log, ready=lambda _: serving(base_url), timeout=timeout)
    try:
        yield base_url
    finally:
        stop_process(proc, stop_timeout)
