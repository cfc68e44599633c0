"""Helpers shared by the tests (fixtures live in conftest.py)."""
from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from models import ApiToken, Clinic, db
from onboarding import onboard

SECRET_KEY = "test-secret-key"


def load(document: dict[str, Any]) -> str:
    with db.connection_context():
        return onboard(document, secret_key=SECRET_KEY)


def issue_token(slugs: list[str], scopes: list[str], expires_in: timedelta | None = None) -> str:
    with db.connection_context():
        clinics = list(Clinic.select().where(Clinic.slug.in_(slugs)))
        _, text = ApiToken.issue("test-service", clinics, scopes, expires_in)
    return text


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def switchboard_url(slug: str, check: str) -> str:
    return f"/external/v1/clinics/{slug}/switchboard/{check}"


def organization(*clinics: dict[str, Any], slug: str = "test-org", sharing: bool = False,
                 patients: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"organization": {"slug": slug, "name": slug.title(), "patientSharing": sharing},
            "clinics": list(clinics), "patients": patients or []}


def clinic(slug: str = "clinic-a", *, tz: str = "Europe/Prague", country: str = "CZ", **extra: Any) -> dict[str, Any]:
    return {"slug": slug, "name": slug.title(), "timezone": tz, "country": country, **extra}


def web_command(port: int, *options: str, app: str = "wsgi:app") -> list[str]:
    """The Procfile's `web` command, its `${VAR:-default}`s at their defaults, bound to
    127.0.0.1:`port` instead of `$PORT`; gunicorn `options` come last, so they win. Tests
    and benchmarks run the web process through this, so they run what production runs."""
    line = next(x for x in (Path(__file__).resolve().parent.parent / "Procfile").read_text().splitlines()
                if x.startswith("web:"))
    args = shlex.split(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", line[len("web:"):]))
    args[0] = str(Path(sys.executable).parent / args[0])  # gunicorn of this virtualenv
    args[args.index("wsgi:app")] = app
    args[args.index("--bind") + 1] = f"127.0.0.1:{port}"  # --bind appends: replace it, do not add
    return args + list(options)


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
