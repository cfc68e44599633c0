"""no production process runs on a SECRET_KEY anyone can know.

The built-in key is in config.py; a database dump decrypts the platform passwords with it,
and the storage signing key follows from it. Outside the embedded run (a database other
than SQLite) the web process, the worker and the release step (`manage.py migrate`) refuse
it, and a key shorter than 32 bytes, as real subprocesses started the Procfile's way.
`bin/run` makes a random key of its own instead (tests/test_first_run.py runs it).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from config import DEVELOPMENT_SECRET_KEY, Config, InsecureConfiguration
from plumbing.local_secret import ensure_secret_key_file
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY
from tests.support.gunicorn import serving, start_gunicorn, web_command
from tests.support.ports import free_port
from tests.support.processes import stop_process

SHORT_KEY = "k" * 20
HOW = "python -c 'import secrets; print(secrets.token_urlsafe(48))'"
# Unset: the built-in key, the mistake a deployment makes by forgetting the variable.
WEAK = {"unset": None, "built-in": DEVELOPMENT_SECRET_KEY, "20 bytes": SHORT_KEY}


def environment(secret_key: str | None, **extra: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": PG_URL, "REDIS_URL": REDIS_URL, "LOG_LEVEL": "WARNING", **extra}
    env.pop("SECRET_KEY", None)
    if secret_key is not None:
        env["SECRET_KEY"] = secret_key
    return env


def assert_refused(done: subprocess.CompletedProcess, secret_key: str | None) -> None:
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "SECRET_KEY" in output and HOW in output, output
    if secret_key:
        assert secret_key not in output, "the message never shows the key"


# ------------------------------------------------------------------------------ the rule


@pytest.mark.parametrize(
    "database_url", [PG_URL, "postgres://db.internal:5432/clinic"], ids=["the suite's database", "a production host"]
)  # ids alike in every xdist process
def test_the_built_in_or_a_short_key_is_refused_outside_the_embedded_run(database_url: str) -> None:
    for key, problem in [(DEVELOPMENT_SECRET_KEY, "built-in"), (SHORT_KEY, "20 bytes long"), ("é" * 15, "30 bytes")]:
        with pytest.raises(InsecureConfiguration, match="SECRET_KEY") as refused:
            Config(database_url=database_url, secret_key=key).require_production_secrets()
        assert problem in str(refused.value) and HOW in str(refused.value)
    Config(database_url=database_url, secret_key="k" * 32).require_production_secrets()
    Config(database_url=database_url, secret_key=SECRET_KEY).require_production_secrets()


def test_the_embedded_run_may_use_any_key(tmp_path: Path) -> None:
    """The keys PostgreSQL refuses, the embedded run's SQLite takes."""
    for key in (DEVELOPMENT_SECRET_KEY, SHORT_KEY):
        with pytest.raises(InsecureConfiguration):
            Config(database_url=PG_URL, secret_key=key).require_production_secrets()
        assert Config(database_url=f"sqlite:///{tmp_path}/app.db", secret_key=key).require_production_secrets() is None
    assert Config().require_production_secrets() is None  # every default: the embedded run's


# -------------------------------------------------------------- the processes, as started


@pytest.mark.parametrize("secret_key", WEAK.values(), ids=WEAK.keys())
def test_the_release_step_refuses_a_weak_key_and_migrates_nothing(secret_key: str | None, tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(secret_key, STORAGE_DIR=str(storage)),
    )
    assert_refused(done, secret_key)
    assert not storage.exists(), "refused before anything is done"


def test_the_release_step_runs_with_a_good_key(app, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(SECRET_KEY, STORAGE_DIR=str(tmp_path / "storage")),
    )
    assert done.returncode == 0, done.stderr
    assert "database is up to date" in done.stderr and (tmp_path / "storage").is_dir()


@pytest.mark.rq_worker
@pytest.mark.parametrize("secret_key", WEAK.values(), ids=WEAK.keys())
def test_the_worker_refuses_a_weak_key(secret_key: str | None) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "worker"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(secret_key),
    )
    assert_refused(done, secret_key)


def test_the_worker_runs_with_a_good_key(worker: subprocess.Popen) -> None:
    # The session's one worker (tests/support/worker.py: two on the same queues would
    # take each other's jobs) is started with the tests' key, as the Procfile starts it.
    assert worker.poll() is None


@pytest.mark.gunicorn
@pytest.mark.parametrize("secret_key", [None, SHORT_KEY], ids=["unset", "20 bytes"])
def test_the_web_process_refuses_a_weak_key(secret_key: str | None) -> None:
    done = subprocess.run(
        web_command(free_port()), cwd=ROOT, capture_output=True, text=True, timeout=120, env=environment(secret_key)
    )
    assert_refused(done, secret_key)


@pytest.mark.gunicorn
def test_the_web_process_serves_with_a_good_key(wsgi_app) -> None:
    port = free_port()
    web = start_gunicorn(
        port,
        "--workers",
        "1",
        env=environment(SECRET_KEY),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        ready=lambda _: serving(f"http://127.0.0.1:{port}"),
        timeout=60,
    )
    try:
        assert web.poll() is None and serving(f"http://127.0.0.1:{port}"), "it started and answers"
    finally:
        stop_process(web, 30)


# --------------------------------------------------------------- the embedded run's key


def test_the_embedded_key_file_is_made_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secret_key"
    old_umask = os.umask(0o022)
    try:
        key = ensure_secret_key_file(path)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key.encode()) >= 64 and path.read_text() == key + "\n"
    assert ensure_secret_key_file(path) == key, "kept: the local database's passwords are encrypted with it"
    assert ensure_secret_key_file(tmp_path / "other" / "secret_key") != key, "random"
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"], "no temporary file is left"
    Config(database_url=PG_URL, secret_key=key).require_production_secrets()  # good enough anywhere


def test_a_damaged_key_file_is_an_error_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    path.write_text("short\n")
    with pytest.raises(ValueError, match="secret key of at least 32 bytes"):
        ensure_secret_key_file(path)
    assert path.read_text() == "short\n"
    done = subprocess.run(
        [sys.executable, "-m", "plumbing.local_secret", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "secret key of at least 32 bytes" in done.stderr and done.stdout == ""


def test_commands_on_the_embedded_database_use_the_key_beside_it(tmp_path: Path) -> None:
    """`manage.py onboard` run by hand against bin/run's database encrypts with the key the
    running service decrypts with: SECRET_KEY unset, the file beside the SQLite database."""
    key = ensure_secret_key_file(tmp_path / "secret_key")
    database = f"sqlite:///{tmp_path}/app.db"
    assert Config.from_env({"DATABASE_URL": database}).secret_key == key
    assert Config.from_env({"DATABASE_URL": database, "SECRET_KEY": "s" * 40}).secret_key == "s" * 40  # set: it wins
    assert Config.from_env({"DATABASE_URL": PG_URL}).secret_key == DEVELOPMENT_SECRET_KEY  # production: never a file
    assert (
        Config.from_env({"DATABASE_URL": f"sqlite:///{tmp_path}/elsewhere/app.db"}).secret_key == DEVELOPMENT_SECRET_KEY
    )
