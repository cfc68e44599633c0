"""The API keys and the audit pages in a real headless Chromium (Debian's /usr/bin/chromium
via Playwright) against gunicorn started from the Procfile (2 workers): an admin creates a
key (its secret shown once), the key works against the API, is rotated (both keys work
until the chosen time, then only the new one) and revoked (401 from every web process);
a staff member gets 403 on every settings page; the audit page shows each action with its
author; and no secret appears in any other page, in the web log or in an audit row."""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import requests

from models import AuditEvent, Clinic, StaffMembership, StaffUser
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import switchboard_url
from tests.support.console_browser import PASSWORD, WAIT_MS, _publish, log_in
from tests.support.gunicorn import serving_gunicorn
from tests.support.log_audit import remember, watch
from tests.support.tiers import needs
from tests.support.worker import worker_env

WORKERS = 2  # the Procfile's default WEB_CONCURRENCY
ADMIN = "adam@example.cz"


@pytest.fixture(scope="module")
@needs("gunicorn")
def service(wsgi_app, ca_bundle, tmp_path_factory):
    """gunicorn as the Procfile runs it, JSON logs (the access line names its process)."""
    log = tmp_path_factory.mktemp("keys-web") / "web.log"
    watch(log)  # the session's log audit checks it for secrets too
    with serving_gunicorn(env=worker_env(ca_bundle, LOG_FORMAT="json"), log=log, timeout=120) as base_url:
        yield base_url, log


@pytest.fixture
def admin(browser_staff):
    """Adam, clinic-en's admin (the login throttle's counters are cleared by `app`)."""
    with db.connection_context():
        user = StaffUser.create(email=ADMIN, name="Adam Správce", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == "clinic-en"), role="admin")


class Api:
    """Calls to the API on fresh connections, each with its own request id, and which web
    process answered it (from the access log's pid)."""

    def __init__(self, base: str, log: Path) -> None:
        self.base, self.log = base, log
        self.url = base + switchboard_url("clinic-en", "is-on-vacation")

    def call(self, key: str) -> tuple[str, float, int]:
        rid = uuid.uuid4().hex
        sent = time.monotonic()
        status = requests.post(
            self.url,
            json={},
            timeout=30,
            headers={"Authorization": f"Bearer {key}", "X-Request-Id": rid, "Connection": "close"},
        ).status_code
        return rid, sent, status

    def burst(self, key: str, n: int = 8) -> list[tuple[str, float, int]]:
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(lambda _: self.call(key), range(n)))

    def pids(self, rids: set[str]) -> dict[str, int]:
        deadline = time.monotonic() + 10
        while True:
            found = {}
            for line in self.log.read_text(errors="replace").splitlines():
                if line.startswith("{") and '"pid"' in line:
                    entry = json.loads(line)
                    if entry.get("request_id") in rids and entry.get("logger") == "access":
                        found[entry["request_id"]] = entry["pid"]
            if len(found) == len(rids) or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def in_every_process(self, key: str, want: int, since: float = 0.0) -> dict[int, int]:
        """Bursts until each web process has answered a call sent after `since`; every such
        call must answer `want`. Returns calls per process."""
        per_process: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while len(per_process) < WORKERS:
            assert time.monotonic() < deadline, f"not every web process answered: {per_process}"
            calls = [c for c in self.burst(key) if c[1] >= since]
            assert all(status == want for _, _, status in calls), [s for _, _, s in calls]
            for pid in self.pids({rid for rid, _, _ in calls}).values():
                per_process[pid] = per_process.get(pid, 0) + 1
        return per_process


def secret_part(key: str) -> str:
    return key.split("_", 2)[2]


def key_id(key: str) -> str:
    return str(uuid.UUID(hex=key.split("_")[1]))


def test_create_use_rotate_revoke_a_key_with_its_audit_and_no_secret_anywhere(service, admin, browser, tmp_path):
    base, log = service
    api = Api(base, log)
    pages: list[str] = []  # every page but the two that show a new key once
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(WAIT_MS)
    log_in(page, base, ADMIN)
    page.wait_for_url(base + "/console/")
    page.get_by_role("link", name="Nastavení").click()
    page.get_by_role("link", name="Klíče API").click()
    page.wait_for_url(base + "/console/settings/api-keys?clinic=clinic-en")
    pages.append(page.content())

    # Create: a write key for the switchboard, 90 days by default; the secret is shown once.
    page.get_by_label("Servisní účet").fill("pbx-switchboard")
    page.get_by_label("zápis").check()
    assert page.get_by_label("Platnost (ve dnech)").input_value() == "90"
    page.get_by_role("button", name="Vytvořit klíč").click()
    first = page.locator("#new-key").inner_text()
    remember(first, "an API key made in the console")  # the session's log audit looks for it too
    assert first.startswith("csk_") and "Zobrazí se jen teď" in page.content()
    page.goto(base + "/console/settings/api-keys?clinic=clinic-en")
    assert secret_part(first) not in page.content() and page.locator("#new-key").count() == 0
    pages.append(page.content())

    # Use it: from every web process; and a write attributed to its service account.
    assert len(api.in_every_process(first, 200)) == WORKERS
    imported = requests.post(
        base + "/external/v1/clinics/clinic-en/patients/import",
        timeout=30,
        headers={"Authorization": f"Bearer {first}"},
        json={"externalId": "EXT-77", "firstName": "Eva", "lastName": "Nová"},
    )
    assert imported.status_code in (200, 201), imported.text

    # Rotate: the old key keeps working until a time a few seconds ahead (the clinic's wall clock).
    until = datetime.now(ZoneInfo("America/New_York")).replace(microsecond=0) + timedelta(seconds=10)
    row = page.locator(f"#key-{key_id(first)}")
    row.get_by_label("Starý klíč platí do").fill(until.replace(tzinfo=None).isoformat())
    row.get_by_role("button", name="Vyměnit").click()
    second = page.locator("#new-key").inner_text()
    remember(second, "an API key made by a rotation")
    assert second.startswith("csk_") and second != first
    cutoff = time.monotonic() + (until - datetime.now(ZoneInfo("America/New_York"))).total_seconds()
    old_calls = []
    while time.monotonic() < cutoff - 1.0:  # well before the chosen time: both keys work
        old_calls.append(api.call(first)[2])
        assert api.call(second)[2] == 200
    assert old_calls and set(old_calls) == {200}, old_calls
    deadline = cutoff + 5.0  # then the old one stops, in every process, and the new one goes on
    while api.call(first)[2] != 401:
        assert time.monotonic() < deadline, "the rotated key kept working past its time"
        time.sleep(0.1)
    api.in_every_process(first, 401, since=time.monotonic())
    api.in_every_process(second, 200)

    page.goto(base + "/console/settings/api-keys?clinic=clinic-en")
    assert page.locator(f"#key-{key_id(first)}").get_attribute("class").split() == ["key", "expired"]
    pages.append(page.content())
    page.screenshot(path=str(tmp_path / "console-api-keys.png"), full_page=True)
    _publish(tmp_path / "console-api-keys.png")

    # Revoke: the next calls are refused by every web process (within the cache's 1 s poll).
    page.locator(f"#key-{key_id(second)}").get_by_role("button", name="Zneplatnit").click()
    page.wait_for_url(base + "/console/settings/api-keys?clinic=clinic-en")
    revoked = time.monotonic()
    pages.append(page.content())
    first_after = api.call(second)
    assert first_after[2] == 401, "the very next call"
    api.in_every_process(second, 401, since=revoked + 1.0)
    early = api.in_every_process(second, 401, since=revoked)
    print(f"after the revocation: calls answered 401 per web process {early}")

    # The audit page: each action with its author.
    page.goto(base + "/console/audit?clinic=clinic-en")
    pages.append(page.content())
    rows = [r.inner_text() for r in page.locator("table.audit tbody tr").all()]
    # In words, in the admin's Czech (the code in the cell's title).
    for action, who in (
        ("Vytvořen klíč API", "Adam Správce"),
        ("Klíč API nahrazen novým", "Adam Správce"),
        ("Klíč API zneplatněn", "Adam Správce"),
        ("Přihlášení", "Adam Správce"),
        ("Importován nový pacient", "klíč API pbx-switchboard"),
    ):
        assert any(action in r and who in r and "127.0.0.1" in r for r in rows), (action, rows)
    assert "token.rotate" not in "\n".join(rows), "no raw action codes"
    page.screenshot(path=str(tmp_path / "console-audit.png"), full_page=True)
    page.get_by_label("Co").select_option("token.rotate")
    page.get_by_role("button", name="Filtrovat").click()
    assert page.locator("table.audit tbody tr").count() == 1
    pages.append(page.content())

    # A staff member: 403 on the settings, every section of it, and the audit page.
    page.goto(base + "/console/settings")
    sections = [a.get_attribute("href") for a in page.locator("ul.sections a").all()]
    assert any(s.startswith("/console/settings/api-keys") for s in sections)
    other = browser.new_page()
    other.set_default_timeout(WAIT_MS)
    log_in(other, base, "anna@example.cz")
    other.wait_for_url(base + "/console/")
    for path in ["/console/settings", "/console/audit", *sections, "/console/settings/api-keys"]:
        answer = other.goto(base + path)
        assert answer.status == 403, path
        pages.append(other.content())

    # No secret anywhere: the pages (but the two showing a new key once), the log, the trail.
    secrets = [secret_part(first), secret_part(second)]
    for html in pages:
        assert not any(s in html for s in secrets)
    text = log.read_text(errors="replace")
    assert not any(s in text for s in secrets) and "Bearer csk_" not in text and PASSWORD not in text
    with db.connection_context():
        trail = repr([e.__data__ for e in AuditEvent.select()])
    assert not any(s in trail for s in secrets) and PASSWORD not in trail and "csk_" not in trail
