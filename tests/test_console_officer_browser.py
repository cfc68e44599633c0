"""The data-protection officer in a real headless Chromium (Debian's /usr/bin/chromium driven by
Playwright) against gunicorn: logging in lands on the read trail, not an inbox; the header
offers the audit and read trails and neither the inbox nor the settings; asking what a staff
member read lists their reads, with the CSV link beside them; a settings page refuses."""

from __future__ import annotations

import uuid

from models import Clinic, Reader, ReadEvent, StaffMembership, StaffUser
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import clinic, load, organization
from tests.support.console_browser import PASSWORD, WAIT_MS, log_in


def test_the_officer_reads_the_trail_and_has_no_inbox_and_no_settings(service, app, wall_clock, browser):
    load(organization(clinic("clinic-a", name="Ordinace Vinohrady")))
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        for email, role in (("olga@example.cz", "officer"), ("bob@example.cz", "staff")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=a, role=role)
        bob = StaffUser.by_email("bob@example.cz")
        assert bob is not None
        requests = [uuid.uuid4() for _ in range(3)]
        for request_id in requests:
            ReadEvent.record(Reader.of(bob), a.id, "request", [(uuid.uuid4(), request_id)], at=wall_clock())
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(WAIT_MS)
    log_in(page, service, "olga@example.cz")
    page.wait_for_url(service + "/console/reads")
    nav = page.locator("header nav").inner_text()
    assert "Záznam přístupů" in nav and "Auditní záznam" in nav
    assert "Příchozí" not in nav and "Nastavení" not in nav
    page.get_by_label("Kdo").fill("bob@example.cz")
    page.get_by_role("button", name="Zobrazit").click()
    page.wait_for_load_state()
    shown = page.locator("table.reads tbody tr").evaluate_all("rows => rows.map(r => r.dataset.request)")
    assert sorted(shown) == sorted(str(r) for r in requests)
    assert "format=csv" in (page.get_by_role("link", name="Stáhnout jako CSV").get_attribute("href") or "")
    refused = page.goto(service + "/console/settings?clinic=clinic-a")
    assert refused is not None and refused.status == 403
