"""`python manage.py token create|list|rotate|revoke`, run as a real subprocess, under the
key rules of api_keys.rules (an expiry required, at most a year; never only when asked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import PG_URL, ROOT
from tests.support import bearer, clinic, load, organization, switchboard_url


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": PG_URL}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def clinics(app):
    load(organization(clinic("clinic-a"), clinic("clinic-b")))


def test_create_prints_only_the_token_on_stdout_and_it_works(app, clinics):
    done = run(
        "token",
        "create",
        "--name",
        "pbx",
        "--clinic",
        "clinic-a",
        "--clinic",
        "clinic-b",
        "--scope",
        "read",
        "--scope",
        "write",
        "--expires-in-days",
        "30",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("csk_")
    for slug in ("clinic-a", "clinic-b"):
        app.post(switchboard_url(slug, "is-on-vacation"), headers=bearer(lines[0]), status=200)


def test_list_shows_tokens_without_secrets_and_revoke_refuses_at_once(app, clinics):
    token = run(
        "token", "create", "--name", "pbx", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "30"
    ).stdout.strip()
    listed = run("token", "list").stdout
    assert "pbx" in listed and "clinic-a" in listed and "active" in listed
    assert token.split("_", 2)[2] not in listed
    token_id = listed.split("\t")[0]
    app.post(switchboard_url("clinic-a", "is-on-vacation"), headers=bearer(token), status=200)
    assert run("token", "revoke", token_id).returncode == 0
    app.post(switchboard_url("clinic-a", "is-on-vacation"), headers=bearer(token), status=401)
    assert "revoked" in run("token", "list").stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--name", "x", "--clinic", "nowhere", "--scope", "read", "--expires-in-days", "9"], "unknown clinic"),
        (["--name", "x", "--clinic", "clinic-a", "--scope", "admin", "--expires-in-days", "9"], "invalid choice"),
        (["--name", "x", "--clinic", "clinic-a", "--expires-in-days", "9"], "--scope"),
        (
            ["--name", "x", "--clinic", "clinic-a", "--scope", "read"],
            "one of the arguments --expires-in-days --never-expires",
        ),
        (["--name", "x", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "0"], "between 1 and 365"),
        (["--name", "x", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "366"], "between 1 and 365"),
        (
            ["--name", "x", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "9", "--never-expires"],
            "not allowed with",
        ),
        (["--name", " ", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "9"], "needs a name"),
    ],
)
def test_bad_create_arguments_fail_with_nothing_on_stdout(app, clinics, args, message):
    done = run("token", "create", *args)
    assert done.returncode == 2 and done.stdout == "" and message in done.stderr


def test_revoke_unknown_token(app, clinics):
    done = run("token", "revoke", "00000000-0000-0000-0000-000000000000")
    assert done.returncode == 2 and "no such token" in done.stderr


def test_a_key_that_never_expires_only_by_the_explicit_flag_and_the_list_says_so(app, clinics):
    done = run("token", "create", "--name", "forever", "--clinic", "clinic-a", "--scope", "read", "--never-expires")
    assert done.returncode == 0 and "NEVER expires" in done.stderr
    line = next(x for x in run("token", "list").stdout.splitlines() if "\tforever\t" in x)
    assert "expires=never(--never-expires)" in line and "created_by=operator:" in line


def test_the_list_flags_a_key_expiring_within_14_days(app, clinics):
    run("token", "create", "--name", "soon", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "14")
    run("token", "create", "--name", "later", "--clinic", "clinic-a", "--scope", "read", "--expires-in-days", "15")
    lines = run("token", "list").stdout.splitlines()
    assert "active expiring-soon" in next(x for x in lines if "\tsoon\t" in x)
    assert "expiring-soon" not in next(x for x in lines if "\tlater\t" in x)


def test_rotate_issues_a_key_with_the_same_grants_and_bounds_the_old_ones_overlap(app, clinics, clock):
    clock.now = None  # the app checks expiry by the real time, as the CLI subprocess sets it
    old = run(
        "token",
        "create",
        "--name",
        "pbx",
        "--clinic",
        "clinic-a",
        "--clinic",
        "clinic-b",
        "--scope",
        "read",
        "--expires-in-days",
        "30",
    ).stdout.strip()
    old_id = run("token", "list").stdout.split("\t")[0]
    too_long = run("token", "rotate", old_id, "--old-valid-hours", "169")
    assert too_long.returncode == 2 and "at most 7 days" in too_long.stderr and too_long.stdout == ""
    rotated = run("token", "rotate", old_id, "--old-valid-hours", "0")  # the old one stops now
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    for slug in ("clinic-a", "clinic-b"):
        app.post(switchboard_url(slug, "is-on-vacation"), headers=bearer(new), status=200)
        app.post(switchboard_url(slug, "is-on-vacation"), headers=bearer(old), status=401)
    listed = run("token", "list").stdout
    assert listed.count("clinic-a,clinic-b\tread\t") == 2 and "expired" in listed
    assert run("token", "rotate", old_id, "--old-valid-hours", "1").returncode == 2, "an expired key is not rotated"
