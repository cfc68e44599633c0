"""E-mail notices end to end, once each: the session's real worker (its outbox relay, its
jobs and RQ's retries) sending to the suite's SMTP server (STARTTLS, a login), gunicorn
serving the console, and Chromium asking for a new password in Czech. The rules in detail,
by the test's clock: tests/test_notices.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from models import ApiToken, Clinic, Outbox, PatientRequest, StaffMembership, StaffUser
from plumbing.clock import as_utc
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import bearer, clinic, load, organization, switchboard_url
from tests.support.console import PASSWORD, cs
from tests.support.console_browser import SHOTS
from tests.support.gunicorn import serving_gunicorn
from tests.support.handoffs import audio, call_body
from tests.support.https_server import static
from tests.support.log_audit import remember, remember_personal
from tests.support.ports import free_port
from tests.support.servers import wait_until
from tests.support.smtp_server import html_of, mail_env, text_of
from tests.support.tiers import needs
from tests.support.worker import processed_call, worker_env

#: The voicemail: chest pressure and breathing, in Czech (tests/audio/voicemails/labels.json).
URGENT_CLIP = "cs_hrudnik_czech_krb_mp3_8k.mp3"
SAID = ("Zdeněk", "Marek", "hrudi", "dýchá", "607", "+420607223344")


def staff_of_clinic(*, opted: bool = True) -> None:
    """clinic-a (Prague, no office hours: always closed) with anna, an admin who asked to be
    told of urgent messages."""
    load(organization(clinic("clinic-a", language="cs", languages=["cs"]), clinic("clinic-b")))
    with db.connection_context():
        user = StaffUser.create(email="anna@example.cz", name="Anna Nováková", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.by_slug("clinic-a"), role="admin", urgent_notices=opted)
    remember_personal("anna@example.cz", "a staff member's e-mail")


def test_an_urgent_voicemail_outside_office_hours_is_an_email_within_a_minute(
    handoff, worker, https_server, mailbox, wall_clock
):
    staff_of_clinic()
    https_server.route("/rec/CA-urgent.mp3", static(audio(f"voicemails/{URGENT_CLIP}"), "audio/mpeg"))
    token = issue("clinic-a", days=90)
    handoff.post_json(
        switchboard_url("clinic-a", "recording-complete"),
        call_body("CA-urgent", https_server.url("/rec/CA-urgent.mp3"), From="+420607223344"),
        headers=bearer(token),
    )
    call = processed_call("CA-urgent", timeout=180)
    with db.connection_context():
        request = PatientRequest.get(PatientRequest.call == call.id)
    assert request.urgent, f"the transcript flags it: {call.transcript!r}"
    made = as_utc(request.created_at).replace(tzinfo=UTC)
    (message,) = mailbox.wait_for(1, timeout=75)
    arrived = datetime.now(UTC)
    assert arrived - made < timedelta(minutes=1), f"{(arrived - made).total_seconds():.1f} s after the request"
    assert message["To"] == "anna@example.cz"
    assert f"https://clinic.test/console/requests/{request.id}" in text_of(message)
    whole = f"{message['Subject']} {text_of(message)} {html_of(message)}"
    assert not [said for said in SAID if said in whole], "no patient data"
    assert wait_until(nothing_pending, timeout=10), "the e-mail marked sent, and no other"


def nothing_pending() -> bool:
    with db.connection_context():
        return not Outbox.select().where(Outbox.state == "pending").exists()


def issue(slug: str, *, days: float = 0, expired: bool = False) -> str:
    with db.connection_context():
        moment = datetime.now(UTC) + timedelta(days=-1 if expired else days)
        _, text = ApiToken.issue("ustredna", [Clinic.by_slug(slug)], ["read", "write"], moment, expires_at=moment)
    remember(text, "an API key")
    return text


def test_the_smtp_server_down_loses_no_email(app, worker, mailbox, wall_clock):
    """A key refused while the server is down: the worker tries on RQ's short schedule
    (MAIL_RETRY_DELAYS, 1 to 30 s here) and the e-mail arrives once the server is back."""
    staff_of_clinic(opted=False)
    text = issue("clinic-a", expired=True)
    mailbox.stop()
    try:
        for n in range(3):
            app.post_json(
                switchboard_url("clinic-a", "recording-complete"),
                {"CallSid": f"CA-{n}"},
                headers=bearer(text),
                status=401,
            )

        def tried_twice() -> bool:
            with db.connection_context():
                row = Outbox.select().where(Outbox.topic == "mail").first()
                return row is not None and row.attempts >= 2

        assert wait_until(tried_twice, timeout=30, interval=0.2), "the worker tried and failed, twice"
    finally:
        mailbox.start()
    (message,) = mailbox.wait_for(1, timeout=60)
    assert message["To"] == "anna@example.cz" and "ustredna" in message["Subject"]
    assert wait_until(nothing_pending, timeout=10)


@pytest.fixture(scope="module")
@needs("gunicorn")
def mailing_service(wsgi_app, ca_bundle, smtp_server, tmp_path_factory):
    """gunicorn with e-mail on (its links lead to itself)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("mail-web") / "web.log"
    env = worker_env(ca_bundle, LOG_FORMAT="text", **mail_env(smtp_server, ca_bundle, public_base_url=base))
    with serving_gunicorn(env=env, log=log, port=port, timeout=120) as url:
        yield url


def test_forgot_password_in_czech_in_a_real_browser(mailing_service, worker, browser, mailbox, wall_clock):
    staff_of_clinic(opted=False)
    page = browser.new_page(viewport={"width": 900, "height": 800})
    page.set_default_timeout(30_000)
    page.goto(mailing_service + "/console/login")
    page.get_by_role("link", name="Zapomenuté heslo?").click()
    page.get_by_label("E-mail").fill("nikdo@example.cz")
    page.get_by_role("button", name="Poslat odkaz").click()
    unknown = page.locator("p.notice").inner_text()
    page.goto(mailing_service + "/console/login/forgot")
    page.get_by_label("E-mail").fill("anna@example.cz")
    page.get_by_role("button", name="Poslat odkaz").click()
    known = page.locator("p.notice").inner_text()
    assert known == unknown and cs("Pokud k této adrese patří účet") in known, "the same answer either way"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "forgot-password.png"), full_page=True)
    (message,) = mailbox.wait_for(1, timeout=60)
    assert message["To"] == "anna@example.cz" and message["Subject"] == "Nastavení nového hesla do konzole kliniky"
    # The worker writes it (its PUBLIC_BASE_URL is the suite's: the same service, another name).
    (path,) = re.findall(r"https://clinic\.test(/console/password/[A-Za-z0-9_-]+\?lang=cs)", text_of(message))
    remember(path.split("/password/")[1].split("?")[0], "a set-password link")
    link = mailing_service + path
    page.goto(link)
    page.get_by_label("Nové heslo", exact=True).fill("violet harbour trombone acorn")
    page.get_by_label("Nové heslo znovu").fill("violet harbour trombone acorn")
    page.get_by_role("button", name="Nastavit heslo").click()
    page.get_by_label("E-mail").fill("anna@example.cz")
    page.get_by_label("Heslo").fill("violet harbour trombone acorn")
    page.get_by_role("button", name="Přihlásit").click()
    page.wait_for_url(mailing_service + "/console/")
    again = page.goto(link)
    assert again is not None and again.status == 410, "single-use"
    assert "Tento odkaz už neplatí" in page.locator("p.error").inner_text()
    page.screenshot(path=str(SHOTS / "forgot-password-used.png"), full_page=True)
    assert wait_until(nothing_pending, timeout=10)
