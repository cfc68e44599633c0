"""What a job needs from its process, once: the worker's configuration and the database."""

from __future__ import annotations

import threading

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
