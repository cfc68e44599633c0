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
    """Whether this process was asked to stop: a job stops at its next checkpoint (a
    transcription's abort callback) and gives its work back. At once, not at the grace's
    end: a checkpoint may be seconds away (an encoder pass on a busy CPU), and what
    follows (handing the job back, the worker's and its children's exit) needs time too."""
    return _stop_asked is not None


def forget_stop() -> None:
    """No stop asked any more (the worker that was asked has stopped; a process running
    workers one after another, as the tests do, starts the next one afresh)."""
    global _stop_asked, _stop_grace
    with _lock:
        _stop_asked, _stop_grace = None, 0.0
