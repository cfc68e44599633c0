"""What a job needs from its process, once: the worker's configuration and the database;
and whether the process is stopping, so that a long job stops at a checkpoint in time."""

from __future__ import annotations

import threading
import time

from config import Config
from plumbing.database import bind_database, db

_config: Config | None = None
_lock = threading.Lock()


def start(config: Config) -> None:
    """Give jobs the configuration the worker command already read (the environment is
    read once per process)."""
    global _config
    with _lock:
        _config = config


def job_config() -> Config:
    """The worker's configuration (from the environment when no command gave one: a job
    run by hand); binds the database unless the process has (manage.py does, before the
    relay starts). Rebinding would swap `db.obj` under the relay thread while it is inside
    `db.connection_context()`, whose exit then fails (IndexError)."""
    global _config
    with _lock:
        if _config is None:
            _config = Config.from_env()
        if db.obj is None:
            bind_database(_config.database_url, pooled=False)
        return _config


# --- stopping: the platform's SIGTERM, and the grace it leaves (WORKER_STOP_SECONDS) ---------

#: Seconds of the grace kept for what follows a job's stop: handing it back, the worker's
#: and its children's exit (at most a quarter of the grace).
STOP_MARGIN = 5.0
_stop_asked: float | None = None  # time.monotonic() of the first stop request
_stop_grace = 0.0


def request_stop(grace: float) -> bool:
    """The process is asked to stop and must be gone within `grace` seconds. The first call
    records it (True); later ones change nothing (False)."""
    global _stop_asked, _stop_grace
    with _lock:
        if _stop_asked is not None:
            return False
        _stop_asked, _stop_grace = time.monotonic(), grace
        return True


def stopping() -> bool:
    """Whether this process was asked to stop: a job not begun yet gives its work back."""
    return _stop_asked is not None


def stop_due() -> bool:
    """Whether a job must stop at its next checkpoint (a transcription's abort callback):
    the grace is nearly spent (`STOP_MARGIN` of it left)."""
    return _stop_asked is not None and time.monotonic() >= _stop_asked + _stop_grace - _margin()


def stop_left(default: float) -> float:
    """Seconds left of the grace (at least 0), or `default` when no stop was asked."""
    if _stop_asked is None:
        return default
    return max(0.0, _stop_asked + _stop_grace - time.monotonic())


def _margin() -> float:
    return min(STOP_MARGIN, _stop_grace / 4)


def forget_stop() -> None:
    """No stop asked any more (the worker that was asked has stopped; a process running
    workers one after another, as the tests do, starts the next one afresh)."""
    global _stop_asked, _stop_grace
    with _lock:
        _stop_asked, _stop_grace = None, 0.0
