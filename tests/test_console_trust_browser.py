"""What the receptionist is told she can trust, in a real headless Chromium (Debian's
/usr/bin/chromium through Playwright), against gunicorn from the Procfile:

- a confirmed callback number is a tel: link; an unconfirmed one is "heard as …
  (unconfirmed)", never a link to call, with a control that plays the recording from a
  second before the number (a link to the recording at #t= without JavaScript);
- the transcript's label in words beside it: reliable, check, unreliable, in Czech and
  in English."""

from __future__ import annotations

from datetime import timedelta

import pytest

from models import Call, Clinic, Patient, PatientRequest, StaffMembership, StaffUser
from plumbing.clock import as_utc, utc_now
from plumbing.database import db
from staff.passwords import hash_password
from tests.conftest import ROOT
from tests.support import clinic, load, organization
from tests.support.console import cs
from tests.support.console_browser import PASSWORD, WAIT_MS, log_in, wait_true
from tests.support.https_server import static

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.usefixtures("wall_clock")  # the gunicorn service reads the real time
CHROMIUM_EXTRA_ARGS = ["--autoplay-policy=no-user-gesture-required"]  # the browser fixture's (tests/support/browser.py)
CLIP = ROOT / "tests" / "audio" / "voicemails" / "cs_objednani_czech_dita_mp3_8k.mp3"
HEARD_AT = 13.3  # where "sedm sedm sedm" starts in CLIP (whisper's token times)

LABELS = {
    "cs": {
        "reliable": "Přepis je spolehlivý",
        "check": cs("Přepis může místy obsahovat chyby – ověřte si ho v nahrávce"),
        "unreliable": "Přepis je nespolehlivý – poslechněte si nahrávku",
        "heard": "slyšeno jako +420\u00a0700\u00a0123\u00a0456 (nepotvrzeno)",  # no-break spaces bind the groups
        "listen": "Poslechnout číslo",
    },
    "en": {
        "reliable": "Transcript reliable",
        "check": "Transcript may be wrong in places: check it against the recording",
        "unreliable": "Transcript unreliable: listen to the recording",
        "heard": "heard as +420 700 123 456 (unconfirmed)",
        "listen": "Listen to the number",
    },
}


# What base makes of a long, unclear Czech message: long, garbled, one word without a break.
LONG_TRANSCRIPT = (
    "Dobrý den, pady nana Novákova, prosím pozavování spět klůry receptů, volám kvůli "
    "výsledkům krve z minulého týdne a chtěla bych se zeptat, jestli by paní doktorka mohla "
    "prodloužit neschopenku, protože mi pořád není dobře, mám horečku a kašlu. "
) * 3 + "nejnepravděpodobnějšímikvůlivýsledkůmkrvezminuléhotýdne" * 2


@pytest.fixture
def calls(app, https_server):
    """One clinic, a Czech-speaking and an English-speaking user, and three voice messages:
    reliable with a confirmed number, check with an unconfirmed one (a real recording),
    unreliable with none."""
    https_server.route("/rec/heard.mp3", static(CLIP.read_bytes(), "audio/mpeg"))
    load(organization(clinic("clinic-a")))
    now = utc_now()
    with db.connection_context():
        place = Clinic.get(Clinic.slug == "clinic-a")
        for email, language in (("anna@example.cz", "cs"), ("eve@example.cz", "en")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), language=language, password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=place, role="staff")
        made = {}
        for minutes, (status, name, fields) in enumerate(
            (
                ("reliable", "Jana", {"callback_number": "+420777123456", "callback_number_at": 9.5}),
                (
                    "check",
                    "Petr",
                    {
                        "heard_number": "+420700123456",
                        "callback_number_at": HEARD_AT,
                        "recording_url": https_server.url("/rec/heard.mp3"),
                        "has_recording": True,
                    },
                ),
                ("unreliable", "Eva", {"transcript": LONG_TRANSCRIPT}),
            )
        ):
            patient = Patient.create(
                organization=place.organization_id,
                first_name=name,
                last_name="Nováková",
                phone=f"+42060112345{minutes}",
            )
            call = Call.create(
                clinic=place,
                call_sid=f"CA-trust-{status}",
                call_from=patient.phone,
                call_to="+420222000111",
                state="done",
                outcome="voice_message",
                transcript_status=status,
                transcript_language="cs",
                received_at=as_utc(now - timedelta(minutes=10 - minutes)),
                **{"transcript": f"Přepis {status}.", **fields},
            )
            made[status] = PatientRequest.create(
                clinic=place,
                patient=patient,
                kind="voice_message",
                title="Hlasová zpráva",
                call=call,
                created_at=as_utc(now - timedelta(minutes=10 - minutes)),
            )
    return made


@pytest.mark.parametrize("language,email", [("cs", "anna@example.cz"), ("en", "eve@example.cz")])
def test_numbers_and_labels_in_the_inbox_and_on_the_request_page(
    service,
    calls,
    browser,
    language,
    email,
    tmp_path,
):
    words = LABELS[language]
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.set_default_timeout(WAIT_MS)
    log_in(page, service, email)
    page.wait_for_url(service + "/console/")
    rows = {status: page.locator(f"#r-{request.id}") for status, request in calls.items()}

    # The three labels, in words, beside their transcripts.
    for status in ("reliable", "check", "unreliable"):
        assert rows[status].locator("p.reliability").inner_text().strip().startswith(words[status])

    # Confirmed: a number to call. Unconfirmed: the digits as heard, no link to call them.
    assert rows["reliable"].locator('a.callback[href="tel:+420777123456"]').count() == 1
    heard = rows["check"]
    assert heard.locator("span.heard").inner_text() == words["heard"]
    assert heard.locator('a[href^="tel:+4207001"]').count() == 0 and heard.locator("a.callback").count() == 0
    listen = heard.get_by_role("link", name=words["listen"])
    start = int(HEARD_AT) - 1
    assert listen.get_attribute("href") == f"/console/requests/{calls['check'].id}/recording#t={start}"

    # The control plays the recording from a second before the number.
    listen.click()
    wait_true(
        page, f"(a => !a.paused && a.currentTime >= {start})(document.querySelector('#r-{calls['check'].id} audio'))"
    )
    at = page.evaluate(f"document.querySelector('#r-{calls['check'].id} audio').currentTime")
    assert start <= at < start + 3, at

    # The request page shows the same row.
    page.goto(f"{service}/console/requests/{calls['check'].id}")
    assert page.locator("span.heard").inner_text() == words["heard"]
    assert page.locator("p.reliability").inner_text().strip().startswith(words["check"])
    page.goto(f"{service}/console/requests/{calls['reliable'].id}")
    assert page.locator('a.callback[href="tel:+420777123456"]').count() == 1
    page.goto(f"{service}/console/requests/{calls['unreliable'].id}")
    page.screenshot(path=str(tmp_path / f"console-unreliable-request-{language}.png"), full_page=True)

    # A phone's width: the long transcript and its unbroken word wrap; nothing is wider
    # than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(service + "/console/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(tmp_path / f"console-inbox-phone-{language}.png"), full_page=True)
    page.set_viewport_size({"width": 1100, "height": 900})
    page.screenshot(path=str(tmp_path / f"console-inbox-{language}.png"), full_page=True)


def test_without_javascript_the_control_opens_the_recording_at_the_number(service, calls, browser):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    log_in(page, service)
    page.wait_for_url(service + "/console/")
    request_id = calls["check"].id
    page.locator(f"#r-{request_id}").get_by_role("link", name=LABELS["cs"]["listen"]).click()
    # The play route sends the browser on to the recording; the fragment goes with it.
    page.wait_for_url(lambda url: url.endswith("/rec/heard.mp3#t=12"))
    assert page.url.endswith("/rec/heard.mp3#t=12"), page.url
    context.close()
