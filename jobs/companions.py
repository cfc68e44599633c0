"""Processes the worker starts end with it, even when it is killed with SIGKILL.

`python manage.py worker` is one Procfile process, but it runs more: itself (the
transcription worker, holding the warmed whisper model), RQ's scheduler (forked by RQ),
the playback worker (`PlaybackWorker`: a second RQ worker on the `recordings` and
`outbox` queues only, so neither a doctor's play nor an e-mail waits behind a transcription)
and WEBHOOK_WORKERS webhook workers (`PlaybackWorker` too, on the `webhooks` queue alone:
`webhook_worker_argv`). A parent killed with
SIGKILL cannot stop its children, so each child asks the kernel to send it SIGTERM when
its parent dies (Linux `PR_SET_PDEATHSIG`), and watches for that death itself should the
signal not come; on SIGTERM an RQ worker or scheduler finishes what it is doing, releases
its locks and exits.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
ROOT = Path(__file__).resolve().parent.parent


def die_with_parent(
    parent_pid: int,
    sig: int = signal.SIGTERM,
    *,
    told: Callable[[], bool] | None = None,
    check_every: float = 1.0,
) -> None:
    """Have the kernel send `sig` to this process when its parent dies (Linux), and watch
    for the parent's death too: once it is gone, a daemon thread sends `sig` itself unless
    `told()` says the process already took a stop (a second SIGTERM would turn an RQ
    worker's warm stop into a cold one; without `told`, `sig` must be harmless twice). The
    kernel's signal was once not seen in the suite: a playback worker outlived its SIGKILLed
    parent, serving its queue, until the test's end. For a parent that already died between
    the fork and this call, the signal is sent at once."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the watching thread alone ties them
        prctl = None
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(check_every)
        time.sleep(check_every)  # the kernel's signal, if it came, has had its handler run
        if told is None or not told():
            log.warning("parent process %d is gone and no stop was signalled: stopping", parent_pid)
            os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def terminate(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def webhook_worker_argv() -> list[str]:
    """A webhook worker: a child RQ worker on the `webhooks` queue alone (jobs/webhooks.py),
    tied to this process as the playback worker is."""
    return [
        sys.executable,
        str(ROOT / "manage.py"),
        "worker",
        "webhooks",
        "--playback",
        "--parent-pid",
        str(os.getpid()),
    ]


class PlaybackWorker:
    """Keeps one child `manage.py worker --playback` running while this process runs.

    The child is started from this object's thread, and the kernel's parent-death signal
    belongs to the thread that forked, so the thread lives until `stop()`. A child that
    exits on its own (a crash, an OOM kill) is started again after a backoff, unless the
    worker is stopping (`stop_soon`): nothing starts then."""

    def __init__(self, argv: Sequence[str] | None = None, *, restart_after: float = 1.0) -> None:
        # The child ties itself to this process first thing (`--parent-pid`), rather than
        # in a `preexec_fn`, which is unsafe in a process with threads.
        self.argv = list(
            argv or [sys.executable, str(ROOT / "manage.py"), "worker", "--playback", "--parent-pid", str(os.getpid())]
        )
        self.restart_after = restart_after
        self.proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="playback-worker", daemon=True)

    def start(self) -> PlaybackWorker:
        self._thread.start()
        return self

    def _run(self) -> None:
        backoff = self.restart_after
        while not self._stopping.is_set():
            with self._lock:
                if self._stopping.is_set():
                    return
                # Output goes where the worker's goes (the Procfile's log stream).
                self.proc = subprocess.Popen(self.argv, cwd=ROOT)
            log.info("playback worker started (pid %d)", self.proc.pid)
            code = self.proc.wait()
            if self._stopping.is_set():
                return
            log.warning("playback worker exited with code %s; starting it again in %.0f s", code, backoff)
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, 30.0)

    def stop_soon(self) -> None:
        """The worker is stopping: no restart from now on, and SIGTERM to the child (a
        platform may signal the worker's process alone), which finishes its re-fetch and
        exits; `stop` waits for it."""
        with self._lock:
            self._stopping.set()
            proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 130.0) -> None:
        """SIGTERM the child and wait for it (a play's re-fetch may be finishing: at most
        its job timeout), then SIGKILL."""
        with self._lock:
            self._stopping.set()
            proc = self.proc
        if proc is not None:
            terminate(proc, timeout)
        self._thread.join(timeout=5)
