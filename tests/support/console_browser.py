"""pytest plugin: the console's browser tests' shared parts: the web process they drive
(`service`), the staff of the English clinic (`browser_staff`), logging in, bounded waits,
screenshots at the console's widths."""

from __future__ import annotations

import os
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from models import Clinic, StaffMembership, StaffUser
from plumbing.database import db
from staff.passwords import hash_password
from tests.conftest import ROOT
from tests.support import clinic, load, organization
from tests.support.clocks import Clock
from tests.support.gunicorn import serving_gunicorn
from tests.support.tiers import needs
from tests.support.worker import worker_env

PASSWORD = "a long password"


WAIT_MS = 120_000  # a loaded machine: generous bounded waits, never sleeps


def wait_true(page, expression: str, timeout: int = WAIT_MS) -> None:
    """`page.wait_for_function` without its eval: the console's Content-Security-Policy has no
    'unsafe-eval', which Playwright's in-page polling needs; `page.evaluate` goes through the
    DevTools protocol, which the policy does not govern. Polled every 100 ms, up to `timeout`."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true within {timeout} ms: {expression}"
        page.wait_for_timeout(100)


@pytest.fixture(scope="module")
@needs("gunicorn")
def service(wsgi_app, ca_bundle, tmp_path_factory):
    """gunicorn as the Procfile runs it, with the worker's settings (loopback recordings)."""
    log = tmp_path_factory.mktemp("console-web") / "web.log"
    with serving_gunicorn(env=worker_env(ca_bundle, LOG_FORMAT="text"), log=log, timeout=120) as base_url:
        yield base_url


@pytest.fixture
def wall_clock(app, clock: Clock) -> Clock:
    """The session's clock made to follow the real time: the gunicorn service reads the wall
    clock, so a test that writes rows beside it (a call received 40 minutes ago, a key that
    expires in 10 days) must date them by the same clock, not by the session's fixed
    Wednesday (`app` sets it back for the next test)."""
    clock.now = None
    clock.offset = timedelta(0)
    return clock


@pytest.fixture
def browser_staff(app):
    """clinic-en (New York, English) and clinic-b; anna works for clinic-en, bob for clinic-b."""
    load(organization(clinic("clinic-en", tz="America/New_York", country="US", language="en"), clinic("clinic-b")))
    with db.connection_context():
        for email, slug in (("anna@example.cz", "clinic-en"), ("bob@example.cz", "clinic-b")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == slug), role="staff")


def log_in(page, base: str, email: str = "anna@example.cz", password: str = PASSWORD) -> None:
    page.goto(base + "/console/login")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Heslo").fill(password)
    page.get_by_role("button", name="Přihlásit").click()


def _publish(shot: Path) -> None:
    """The README's screenshots are refreshed on request only (CONSOLE_SCREENSHOTS_TO_DOCS=1):
    a test run leaves the tracked files alone; the test's own copies stay in its tmp dir."""
    if os.environ.get("CONSOLE_SCREENSHOTS_TO_DOCS") == "1":
        shutil.copy(shot, ROOT / "docs" / shot.name)


SHOTS = ROOT / "var" / "screenshots" / "console"


def shoot(page, name: str, language: str) -> list[Path]:
    """Full-page screenshots at 1280 and 390 px; fails on text wider than the screen and, in
    Czech, on a message of the catalogue shown in English."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        wait_true(page, f"window.innerWidth === {width}")
        wide = page.evaluate("""() => [...document.querySelectorAll('body *')].filter(e => {
            const r = e.getBoundingClientRect(); return r.width > 0 && r.right > window.innerWidth + 1;
        }).map(e => e.tagName + '.' + e.className + ': ' + (e.textContent || '').slice(0, 40))""")
        assert page.evaluate("document.documentElement.scrollWidth") <= width and not wide, (name, width, wide)
        path = SHOTS / f"{name}-{language}-{width}.png"
        page.screenshot(path=str(path), full_page=True)
        shots.append(path)
    if language == "cs":
        text = page.locator("body").inner_text()
        left = [m for m in ENGLISH if m in text]
        assert not left, (name, left)
    page.set_viewport_size({"width": 1280, "height": 900})
    return shots


WIDTHS = (1280, 390)


def english_ids() -> list[str]:
    """The catalogue's English messages of a few words whose Czech differs: none may show on
    a Czech page."""
    with (ROOT / "console" / "locale" / "cs" / "LC_MESSAGES" / "messages.po").open("rb") as f:
        catalog = read_po(f, locale="cs")
    return [
        m.id
        for m in catalog
        if isinstance(m.id, str)
        and m.id
        and m.string
        and m.string != m.id
        and "%" not in m.id
        and len(m.id.split()) >= 2
    ]


ENGLISH = english_ids()
