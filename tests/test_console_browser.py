"""The staff console in a real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright; never `playwright install`), against gunicorn started from the Procfile, the
session's real RQ worker, PostgreSQL and Redis: a real voicemail hand-off becomes an inbox
row without a reload, its recording plays, resolve and reopen drive has-active-request."""

from __future__ import annotations

import pytest
import requests
import soundfile

from models import Call
from plumbing.database import db
from tests.conftest import ROOT
from tests.support import bearer, issue_token, switchboard_url
from tests.support.console_browser import PASSWORD, WAIT_MS, _publish, log_in, wait_true
from tests.support.handoffs import audio, call_body
from tests.support.https_server import static
from tests.support.worker import processed_call

playwright_api = pytest.importorskip("playwright.sync_api")


def test_a_voicemail_arrives_live_plays_and_is_resolved(
    service, browser_staff, app, browser, https_server, worker, tmp_path
):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.set_default_timeout(WAIT_MS)
    log_in(page, service)
    page.wait_for_url(service + "/console/")
    assert page.locator("h1").inner_text().startswith("Příchozí – ")

    https_server.route("/rec/CA-live.mp3", static(audio("msg_appointment.mp3"), "audio/mpeg"))
    token = issue_token(["clinic-en"], ["read", "write"])
    # To gunicorn itself: it allows the test server's loopback recording URL (worker_env).
    handed = requests.post(
        service + switchboard_url("clinic-en", "recording-complete"),
        json=call_body("CA-live", https_server.url("/rec/CA-live.mp3")),
        headers=bearer(token),
        timeout=60,
    )
    assert handed.status_code == 200, handed.text
    call = processed_call("CA-live", timeout=180)
    row = page.locator("li.row.voice_message")
    row.wait_for()  # inserted by the live update, no reload
    text = row.inner_text()
    assert "appointment" in text.lower() and ("Přepis je" in text or "Přepis se" in text)
    assert call.transcript_status in ("reliable", "unreliable")
    assert page.locator("p.empty").count() == 0, "the live update removes 'Nothing here.'"

    # The <audio> loads the recording through the session-authenticated play route.
    wait_true(page, "document.querySelector('li.row audio').readyState >= 2")
    duration = page.evaluate("document.querySelector('li.row audio').duration")
    info = soundfile.info(str(ROOT / "tests" / "audio" / "msg_appointment.mp3"))
    assert abs(duration - info.duration) <= 0.5, (duration, info.duration)

    page.screenshot(path=str(tmp_path / "console-inbox.png"), full_page=True)
    _publish(tmp_path / "console-inbox.png")

    def active() -> bool:
        return app.post_json(
            switchboard_url("clinic-en", "has-active-request"), {"callFrom": call.call_from}, headers=bearer(token)
        ).json["hasActiveRequest"]

    assert active()
    row.get_by_role("button", name="Vyřídit").click()
    page.wait_for_url(service + "/console/?clinic=clinic-en")
    assert page.locator("li.row").count() == 0 and not active()
    page.goto(service + "/console/?state=resolved")
    page.locator("li.row").get_by_role("button", name="Znovu otevřít").click()
    page.wait_for_url(service + "/console/?clinic=clinic-en")
    assert page.locator("li.row").count() == 1 and active()

    # The request page, with its history (the resolve and the reopen by Anna).
    request_id = page.locator("li.row").get_attribute("id").removeprefix("r-")
    page.locator("li.row a.who").click()
    page.wait_for_url(f"{service}/console/requests/{request_id}")
    history = page.locator("ol.history").inner_text()
    assert "Označeno jako vyřízené – Anna" in history and "Znovu otevřeno – Anna" in history
    page.screenshot(path=str(tmp_path / "console-request.png"), full_page=True)
    _publish(tmp_path / "console-request.png")

    # A hostile transcript is text, never markup: no dialog opens.
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with db.connection_context():
        stored = Call.get(Call.call_sid == "CA-live")
        Call.update(transcript="<script>alert(1)</script>").where(Call.id == stored.id).execute()
    page.goto(service + "/console/")
    assert page.locator("li.row .transcript").inner_text() == "<script>alert(1)</script>" and dialogs == []

    # Clinic B's user cannot reach clinic A's request.
    other = browser.new_page()
    log_in(other, service, "bob@example.cz")
    other.wait_for_url(service + "/console/")
    assert other.goto(f"{service}/console/requests/{request_id}/recording").status == 404


def test_csrf_throttling_languages_and_escaping_in_the_browser(service, browser_staff, app, browser):
    page = browser.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(service + "/console/login?lang=en")
    assert page.get_by_role("button", name="Log in").is_visible()
    page.goto(service + "/console/login?lang=cs")
    assert page.get_by_role("button", name="Přihlásit").is_visible()
    # A form without its CSRF token is refused.
    page.evaluate("document.querySelector('input[name=csrf_token]').remove()")
    page.get_by_label("E-mail").fill("anna@example.cz")
    page.get_by_label("Heslo").fill(PASSWORD)
    with page.expect_response(lambda r: r.url.endswith("/console/login") and r.request.method == "POST") as answer:
        page.get_by_role("button", name="Přihlásit").click()
    assert answer.value.status == 403
    for _ in range(5):
        log_in(page, service, password="wrong password")
        assert "Nesprávný e-mail nebo heslo." in page.content()
    log_in(page, service)
    assert "Příliš mnoho neúspěšných přihlášení" in page.content()
