"""Helpers shared by the tests and the benchmarks, one of each (fixtures most modules use
live in conftest.py; those a few import live here, in the module of their concern).

This module holds the API helpers (onboard a document, issue a token, build requests,
`assert_error`: the one check of an error answer); the others, by concern:

- `ports`: a free loopback port, whether a port accepts connections;
- `databases`: drop and create a PostgreSQL database;
- `servers`: `wait_until` (a bounded wait for a condition), the threading WSGI server;
- `processes`: stop a subprocess, its children, `manage.py` and its worker;
- `gunicorn`: the Procfile's `web` command, a launcher waiting until it serves, `serving_gunicorn`;
- `clocks`: the clock tests move instead of sleeping;
- `bodies`: the switchboard's `recording-complete` body;
- `https_server`: an HTTPS test server with a trustme CA (a pytest plugin: its fixtures);
- `live_service`: the whole service behind a real HTTP server in a thread;
- `worker`: the session's RQ worker (a pytest plugin), `processed_call` (wait for it);
- `browser`: the browser tests' headless Chromium (a pytest plugin);
- `tiers`: the markers of what a test needs (gunicorn, a worker, the engine, a browser,
  SeaweedFS), derived from its fixtures, and `--fast` (a pytest plugin);
- `isolation`: each pytest-xdist process's own databases and Redis numbers;
- `log_audit`: no secret and no personal data in any log (a pytest plugin);
- `faults`: private Redis and PostgreSQL servers the fault tests break on purpose;
- `seaweed`: a throw-away SeaweedFS (and its session fixture, a pytest plugin);
- `organizations`: fixtures of the organizations a test starts from (a pytest plugin);
- `console`: the staff console through WebTest: the `staff` fixture, logging in, CSRF tokens,
  an inbox form, a request from a call (a pytest plugin); `staff_accounts`: the staff pages'
  flows (users, set-password links, two-factor); `api_key_pages`: the API keys page;
- `console_browser`: the console's browser tests' web process, staff, log-in and screenshots
  (a pytest plugin);
- `recordings`: the fake switchboard platform and calls that re-fetch through it (a pytest
  plugin); `handoffs`: call hand-offs and their recordings (a pytest plugin); `fault_calls`:
  the fault suites' hand-offs;
- `relay`: the call relay's outbox and queue (a pytest plugin); `row_caches`: the row cache
  as the tests see it;
- `people`: a patient with a little of everything, and where traces of them could be;
- `fuzz_hooks`: schemathesis hooks (`SCHEMATHESIS_HOOKS=tests.support.fuzz_hooks`);
- `documented`: the OpenAPI document's schemas with their `$ref`s resolved;
- `contract`: every WebTest answer judged by the OpenAPI document (a pytest plugin);
  `provoke`: every code and reason the service answers, provoked.

Importing the package does not import the service: the benchmarks, `pytest -p` plugins
and schemathesis import its modules in processes of their own.
"""

from __future__ import annotations

import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
#: The service's packages, as the import contracts list them (pyproject.toml's root_packages):
#: one list, so a new package is in every test that walks the service's code.
SERVICE_PACKAGES = frozenset(
    tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["importlinter"]["root_packages"]
)
# 32 bytes or more: the web, worker and release processes refuse a shorter SECRET_KEY.
SECRET_KEY = "test-secret-key-of-at-least-32-bytes"


def load(document: dict[str, Any]) -> str:
    """Onboard `document`; its people's personal data join the log audit's."""
    from onboarding.writer import onboard
    from plumbing.database import db
    from tests.support.log_audit import remember_people

    remember_people(document)
    with db.connection_context():
        return onboard(document, secret_key=SECRET_KEY)


def issue_token(slugs: list[str], scopes: list[str], expires_in: timedelta | None = None) -> str:
    from models import ApiToken, Clinic
    from plumbing.database import db

    with db.connection_context():
        clinics = list(Clinic.select().where(Clinic.slug.in_(slugs)))
        _, text = ApiToken.issue("test-service", clinics, scopes, expires_in)
    return text


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def switchboard_url(slug: str, check: str) -> str:
    return f"/external/v1/clinics/{slug}/switchboard/{check}"


def organization(
    *clinics: dict[str, Any],
    slug: str = "test-org",
    sharing: bool = False,
    patients: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "organization": {"slug": slug, "name": slug.title(), "patientSharing": sharing},
        "clinics": list(clinics),
        "patients": patients or [],
    }


def clinic(slug: str = "clinic-a", *, tz: str = "Europe/Prague", country: str = "CZ", **extra: Any) -> dict[str, Any]:
    return {"slug": slug, "name": slug.title(), "timezone": tz, "country": country, **extra}


def assert_error(answer: Any, status: int, code: str, **fields: Any) -> None:
    """An error answer as docs/design.md has it: `status`, and a JSON body that is exactly
    `{"error": <a message>, "code": code}` (plus `fields`, where the error carries more).

    `answer` is a WebTest response or a `requests` one."""
    if hasattr(answer, "status_int"):  # WebTest
        got, content_type, body = answer.status_int, answer.content_type, answer.json
    else:  # requests
        got, content_type = answer.status_code, answer.headers.get("Content-Type", "").split(";")[0].strip()
        body = answer.json()
    assert got == status, (got, body)
    assert content_type == "application/json", content_type
    assert set(body) == {"error", "code", *fields} and body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"], body
    assert {name: body[name] for name in fields} == fields, body
