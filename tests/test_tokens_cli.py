"""`python manage.py token create|list|revoke`, run as a real subprocess."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import PG_URL, ROOT
from tests.support import bearer, clinic, load, organization, switchboard_url


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": PG_URL}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def clinics(app):
    load(organization(clinic("clinic-a"), clinic("clinic-b")))


def test_create_prints_only_the_token_on_stdout_and_it_works(app, clinics):
    done = run("token", "create", "--name", "pbx", "--clinic", "clinic-a", "--clinic", "clinic-b",
               "--scope", "read", "--scope", "write", "--expires-in-days", "30")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("csk_")
    for slug in ("clinic-a", "clinic-b"):
        app.post(switchboard_url(slug, "is-on-vacation"), headers=bearer(lines[0]), status=200)


def test_list_shows_tokens_without_secrets_and_revoke_refuses_at_once(app, clinics):
    token = run("token", "create", "--name", "pbx", "--clinic", "clinic-a", "--scope", "read").stdout.strip()
    listed = run("token", "list").stdout
    assert "pbx" in listed and "clinic-a" in listed and "active" in listed
    assert token.split("_")[2] not in listed
    token_id = listed.split("\t")[0]
    app.post(switchboard_url("clinic-a", "is-on-vacation"), headers=bearer(token), status=200)
    assert run("token", "revoke", token_id).returncode == 0
    app.post(switchboard_url("clinic-a", "is-on-vacation"), headers=bearer(token), status=401)
    assert "revoked" in run("token", "list").stdout


@pytest.mark.parametrize("args, message", [
    (["--name", "x", "--clinic", "nowhere", "--scope", "read"], "unknown clinic"),
    (["--name", "x", "--clinic", "clinic-a", "--scope", "admin"], "invalid choice"),
    (["--name", "x", "--clinic", "clinic-a"], "--scope"),
    (["--name", "x", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "0"], "positive"),
])
def test_bad_create_arguments_fail_with_nothing_on_stdout(app, clinics, args, message):
    done = run("token", "create", *args)
    assert done.returncode == 2 and done.stdout == "" and message in done.stderr


def test_revoke_unknown_token(app, clinics):
    done = run("token", "revoke", "00000000-0000-0000-0000-000000000000")
    assert done.returncode == 2 and "no such token" in done.stderr
