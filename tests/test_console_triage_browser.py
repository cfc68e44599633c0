"""The inbox sorts itself, in a real headless Chromium (Debian's /usr/bin/chromium through
Playwright) against gunicorn from the Procfile: the message that may be urgent is first,
flagged "možná naléhavé" / "may be urgent" with its words marked in the transcript and the
"hint, not a diagnosis" beside it; each message's suggested type is shown and confirmed in
one click; a flag is cleared in one click; in Czech and English, at 1280 and 390 px (nothing
wider than a phone), with screenshots."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from jobs import calls as ingest
from models import Call, Clinic, Patient, PatientRecord, PatientRequest, StaffMembership, StaffUser
from plumbing.clock import as_utc, utc_now
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import clinic, load, organization
from tests.support.clocks import claimed_now, job_context
from tests.support.console import cs
from tests.support.console_browser import PASSWORD, WAIT_MS, log_in
from voicemail.transcription import Transcript

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

TYPES = [
    {"ecrfId": "RX", "name": "Recept", "transcriptWords": {"preset": "prescription"}},
    {"ecrfId": "CANCEL", "name": "Zrušení termínu", "transcriptWords": {"preset": "cancellation"}},
    {"ecrfId": "APPT", "name": "Objednání", "transcriptWords": {"preset": "appointment"}},
]
# (name, transcript as base writes a rough recording, minutes ago)
MESSAGES = [
    ("Klára", "sem těhod na a od rána mám silné bolestí brychá. Prosím, zavolejte mi co nejdřív.", 30),
    ("Josef", "Dobrý den, došly mi prášky na tlak, potřeboval bych nový recept. Děkuji.", 5),
    ("Dana", "Dobrý den, musím bohužel zrušit zítřejší termín v devět. Omlouvám se.", 10),
]
WORDS = {
    "cs": {
        "flag": "možná naléhavé",
        "hint": cs("nejde o diagnózu"),
        "suggested": "Typ podle přepisu: Recept",
        "confirm": "Potvrdit typ",
        "confirmed": "Typ: Recept",
        "clear": "Zrušit označení",
        "cleared": "Označení „možná naléhavé“ zrušil uživatel.",
    },
    "en": {
        "flag": "may be urgent",
        "hint": "not a diagnosis",
        "suggested": "Type from the transcript: Recept",
        "confirm": "Confirm the type",
        "confirmed": "Type: Recept",
        "clear": "Clear the flag",
        "cleared": "Marked “may be urgent”, cleared by staff.",
    },
}


@pytest.fixture
def inbox(app):
    load(organization(clinic("clinic-a", languages=["cs", "en"], language="cs", requestTypes=TYPES)))
    with db.connection_context():
        home = Clinic.by_slug("clinic-a")
        for email, language in (("anna@example.cz", "cs"), ("eve@example.cz", "en")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), language=language, password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=home, role="staff")
    made = {}
    for n, (name, text, ago) in enumerate(MESSAGES):
        with db.connection_context():
            patient = Patient.create(
                organization=home.organization_id, first_name=name, last_name="Nováková", phone=f"+42060155500{n}"
            )
            PatientRecord.create(patient=patient, clinic=home)
            call = Call.create(
                clinic=home,
                call_sid=f"CA-{uuid.uuid4().hex[:10]}",
                call_from=patient.phone,
                call_to="+420222000111",
                queued_at=claimed_now(),
            )
        ingest._finish_voicemail(
            job_context(),
            call,
            home,
            Transcript(
                text=text,
                language="cs",
                duration=14.0,
                speech_seconds=12.0,
                message=True,
                message_reason="speech",
                status="check",
            ),
        )
        with db.connection_context():
            request = PatientRequest.get(PatientRequest.call == call.id)
            PatientRequest.update(created_at=as_utc(utc_now()) - timedelta(minutes=ago)).where(
                PatientRequest.id == request.id
            ).execute()
        made[name] = str(request.id)
    return made


@pytest.mark.parametrize("language,email", [("cs", "anna@example.cz"), ("en", "eve@example.cz")])
def test_the_flagged_message_first_the_type_suggested_confirmed_and_the_flag_cleared(
    service, inbox, browser, language, email, tmp_path
):
    words = WORDS[language]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(WAIT_MS)
    log_in(page, service, email)
    page.wait_for_url(service + "/console/")
    rows = page.locator("ul.rows > li")
    assert rows.first.get_attribute("id") == f"r-{inbox['Klára']}", "the flagged message first, though oldest"
    flagged = rows.first
    assert flagged.locator(".urgent-flag").inner_text() == words["flag"]
    # Waited on (bounded), like the flag above: a list read at once does not wait for the row.
    expect(flagged.locator("mark.urgent")).to_have_text(["bolestí", "co nejdřív"], timeout=WAIT_MS)
    assert words["hint"] in flagged.inner_text()
    rx = page.locator(f"#r-{inbox['Josef']}")
    assert words["suggested"] in rx.locator("form.choose-type").inner_text()
    page.screenshot(path=str(tmp_path / f"triage-inbox-1280-{language}.png"), full_page=True)

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.locator("ul.rows > li").first.locator(".urgent-flag").is_visible()
    page.screenshot(path=str(tmp_path / f"triage-inbox-390-{language}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})

    # One click confirms the suggestion; one click clears the flag (forms, no script needed).
    page.locator(f"#r-{inbox['Josef']} form.choose-type button").click()
    page.wait_for_url(lambda url: url.startswith(service + "/console/"))
    assert words["confirmed"] in page.locator(f"#r-{inbox['Josef']}").inner_text()
    page.locator(f"#r-{inbox['Klára']}").get_by_role("button", name=words["clear"]).click()
    page.wait_for_url(lambda url: url.startswith(service + "/console/"))
    cleared = page.locator(f"#r-{inbox['Klára']}")
    assert cleared.locator(".urgent-flag").count() == 0 and words["cleared"] in cleared.inner_text()
    assert page.locator("ul.rows > li").first.get_attribute("id") == f"r-{inbox['Josef']}", "newest first again"
    page.screenshot(path=str(tmp_path / f"triage-inbox-after-{language}.png"), full_page=True)
