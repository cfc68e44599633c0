"""The console tells the clinic what is true, in its own words: a real headless Chromium
(Debian's /usr/bin/chromium through Playwright) against gunicorn from the Procfile, the
session's real RQ worker, a fake switchboard platform over real HTTPS (test_recordings.py's),
PostgreSQL and Redis.

- A recording the platform has deleted: the player that tried it is replaced by "Nahrávka
  už není k dispozici – přepis zůstává" and why (the page's script, console.js), the
  number's "Poslechnout číslo" goes with it, the transcript stays; on a reload and without
  JavaScript the page says it itself, with no player.
- A player whose source starts answering 410 after the page was drawn says the same words;
  a platform answering 503, or a network failure, says "try again" instead of "gone".
- The audit trail of a key's creation, rotation and a settings change, in Czech: no
  `key=value`, no `Z` timestamps, no `table:uuid`; the author by name.
- A reload, a double click or a form sent again after "back" makes exactly one key; its
  secret is shown once.
- Every control of a key names the key it acts on; one phone format; the calendars form's
  labels beside their fields and no example dates posing as values.

Screenshots in Czech and English at 1280 and 390 px go to var/screenshots/console/ (each
checked for text wider than the screen and, in Czech, for the catalogue's English left
untranslated)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from api_keys import rules
from models import Actor, ApiToken, Call, Clinic, Patient, PatientRecord, PatientRequest, StaffMembership, StaffUser
from plumbing.clock import as_utc, utc_now
from plumbing.database import db
from staff.passwords import hash_password
from tests.conftest import ROOT
from tests.support import clinic, load, organization
from tests.support.console import cs
from tests.support.console_browser import PASSWORD, WAIT_MS, WIDTHS, log_in, shoot, wait_true
from tests.support.https_server import static
from tests.support.recordings import PASSWORD as PLATFORM_PASSWORD
from tests.support.recordings import SOURCE, USER
from tests.support.servers import wait_until

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.usefixtures("wall_clock")  # the gunicorn service reads the real time
CLIP = ROOT / "tests" / "audio" / "voicemails" / "cs_objednani_czech_dita_mp3_8k.mp3"
ADMIN, RECEPTION = "adela@example.cz", "rita@example.cz"
GONE = {
    "cs": cs("Nahrávka už není k dispozici – přepis zůstává."),
    "en": "The recording is no longer available — the transcript stays.",
}
TRY_AGAIN = {
    "cs": cs("Nahrávku se teď nepodařilo načíst z ústředny – přehrajte ji znovu za chvíli."),
    "en": "The recording could not be loaded from the switchboard just now — play it again in a moment.",
}
TRANSCRIPT = "Dobrý den, tady Marie Svobodová, chtěla bych se objednat na kontrolu. Zavolejte mi prosím zpátky."


@pytest.fixture
def clinic_cz(app, platform):
    """A Prague clinic whose switchboard platform is the fake one; Adéla its admin, Rita its
    receptionist (both Czech)."""
    load(
        organization(
            clinic(
                "clinic-cz", switchboard={"apiUrl": platform.base_url, "username": USER, "password": PLATFORM_PASSWORD}
            )
        )
    )
    with db.connection_context():
        place = Clinic.by_slug("clinic-cz")
        for email, name, role in ((ADMIN, "Adéla Správcová", "admin"), (RECEPTION, "Rita Recepční", "staff")):
            user = StaffUser.create(email=email, name=name, password_hash=hash_password(PASSWORD))
            StaffMembership.create(user=user, clinic=place, role=role)
    return place


def voicemail(
    place: Clinic,
    sid: str,
    https_server,
    *,
    minutes_ago: int = 40,
    phone: str = "+420608333444",
    name: tuple[str, str] = ("Marie", "Svobodová"),
    **fields,
) -> PatientRequest:
    """A Czech voice message whose recording lives on the platform: received `minutes_ago`
    (40: its original link has expired, a play re-fetches it), with an unconfirmed number."""
    https_server.route(f"/rec/{sid}.mp3", static(CLIP.read_bytes(), "audio/mpeg"))
    at = as_utc(utc_now() - timedelta(minutes=minutes_ago))
    with db.connection_context():
        patient = Patient.create(organization=place.organization_id, first_name=name[0], last_name=name[1], phone=phone)
        PatientRecord.create(patient=patient, clinic=place)
        call = Call.create(
            clinic=place,
            call_sid=sid,
            call_from=phone,
            call_to="+420222000111",
            status="completed",
            has_recording=True,
            recording_url=https_server.url(f"/rec/{sid}.mp3"),
            recording_sid=f"{sid}.mp3",
            source=SOURCE,
            state="done",
            outcome="voice_message",
            transcript=TRANSCRIPT,
            transcript_status="check",
            transcript_language="cs",
            heard_number="+420700123456",
            callback_number_at=13.3,
            received_at=at,
            **fields,
        )
        return PatientRequest.create(
            clinic=place, patient=patient, kind="voice_message", title="Hlasová zpráva", call=call, created_at=at
        )


def set_language(email: str, language: str) -> None:
    with db.connection_context():
        StaffUser.update(language=language).where(StaffUser.email == email).execute()


def test_a_recording_the_platform_deleted_is_said_in_words_with_the_transcript(
    service, clinic_cz, platform, https_server, worker, browser
):
    deleted = voicemail(clinic_cz, "CA-smazana", https_server)
    platform.serve("CA-smazana.mp3", "deleted")
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="cs-CZ")
    page.set_default_timeout(WAIT_MS)
    log_in(page, service, RECEPTION)
    page.wait_for_url(service + "/console/")
    row = page.locator(f"#r-{deleted.id}")
    # Drawn with a player (the link expired; a play re-fetches it)…
    assert row.locator("audio").count() == 1 or row.locator("p.recording-state.gone").count() == 1
    # …whose play asks the platform, which has deleted it: the player gives way to the words.
    said = row.locator("p.recording-state.gone")
    said.wait_for()
    assert said.inner_text().startswith(GONE["cs"]) and "smazala" in said.inner_text()
    assert row.locator("audio").count() == 0 and row.get_by_role("link", name="Poslechnout číslo").count() == 0
    assert row.locator("blockquote.transcript").inner_text() == TRANSCRIPT
    assert row.locator("span.heard").inner_text() == "slyšeno jako +420\u00a0700\u00a0123\u00a0456 (nepotvrzeno)"
    assert row.locator("a.phone").inner_text() == "+420\u00a0608\u00a0333\u00a0444"
    assert row.locator("a.phone").get_attribute("href") == "tel:+420608333444"

    # A note on the request (post/redirect/get; its history names Rita).
    page.goto(f"{service}/console/requests/{deleted.id}")
    page.get_by_label("Poznámka", exact=True).fill("Volala znovu, objednána na pondělí.")
    page.get_by_role("button", name="Uložit poznámku").click()
    page.wait_for_url(f"{service}/console/requests/{deleted.id}")
    assert page.locator("ol.history").inner_text().strip().endswith("Změněna poznámka – Rita Recepční")
    assert page.locator("ol.history span.who span").get_attribute("title") == RECEPTION

    # A reload: the page says it itself (the call remembers the platform's answer).
    for path in ("/console/", f"/console/requests/{deleted.id}"):
        page.goto(service + path)
        row = page.locator(f"#r-{deleted.id}")
        assert row.locator("p.recording-state.gone").inner_text().startswith(GONE["cs"])
        assert row.locator("audio").count() == 0 and "Poslechnout číslo" not in row.inner_text()
        assert TRANSCRIPT in row.inner_text()
    shoot(page, "request-recording-gone", "cs")
    page.goto(service + "/console/")
    shoot(page, "inbox-recording-gone", "cs")

    # Without JavaScript: the same words, no player.
    context = browser.new_context(java_script_enabled=False)
    bare = context.new_page()
    bare.set_default_timeout(WAIT_MS)
    log_in(bare, service, RECEPTION)
    bare.wait_for_url(service + "/console/")
    bare.goto(f"{service}/console/requests/{deleted.id}")
    assert bare.locator("p.recording-state.gone").inner_text().startswith(GONE["cs"])
    assert bare.locator("audio").count() == 0
    context.close()

    # English.
    set_language(RECEPTION, "en")
    page.goto(f"{service}/console/requests/{deleted.id}")
    said = page.locator("p.recording-state.gone").inner_text()
    assert said.startswith(GONE["en"]) and "The switchboard platform has deleted it." in said
    shoot(page, "request-recording-gone", "en")
    page.goto(service + "/console/")
    shoot(page, "inbox-recording-gone", "en")


def test_a_player_whose_source_starts_answering_410_after_render_says_the_words(
    service, clinic_cz, https_server, worker, browser
):
    fresh = voicemail(clinic_cz, "CA-cerstva", https_server, minutes_ago=2)  # its link still lives
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="cs-CZ")
    page.set_default_timeout(WAIT_MS)
    log_in(page, service, RECEPTION)
    page.wait_for_url(service + "/console/")
    asked: list[int] = []

    def gone_meanwhile(route) -> None:
        # The page is drawn with a player; before its source is fetched, the platform's
        # answer arrives (as a play's re-fetch would remember it): the play route says 410.
        with db.connection_context():
            Call.update(recording_gone_reason="deleted").where(Call.id == fresh.call_id).execute()
        response = route.fetch(max_redirects=0)
        asked.append(response.status)
        route.fulfill(response=response)

    page.route(re.compile(rf".*/console/requests/{fresh.id}/recording$"), gone_meanwhile)
    page.goto(f"{service}/console/requests/{fresh.id}")
    said = page.locator("p.recording-state.gone")
    said.wait_for()
    assert 410 in asked, asked
    assert said.inner_text().startswith(GONE["cs"]) and said.get_attribute("role") == "status"
    assert page.locator("audio").count() == 0 and page.get_by_role("link", name="Poslechnout číslo").count() == 0
    assert page.locator("blockquote.transcript").inner_text() == TRANSCRIPT


def test_an_unreachable_platform_or_network_says_try_again_not_gone(
    service, clinic_cz, platform, https_server, worker, browser
):
    down = voicemail(clinic_cz, "CA-nedostupna", https_server)
    platform.server.route(platform.path("CA-nedostupna.mp3"), static(b"busy", "text/plain", status=503))
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="cs-CZ")
    page.set_default_timeout(WAIT_MS)
    log_in(page, service, RECEPTION)
    page.wait_for_url(service + "/console/")
    row = page.locator(f"#r-{down.id}")
    # The play waits for the re-fetch, which the platform refuses (503, retried): 503 "later".
    said = row.locator("p.recording-state.unreachable")
    said.wait_for()
    assert said.inner_text().startswith(TRY_AGAIN["cs"]) and row.locator(".recording-state.gone").count() == 0
    assert row.get_by_role("button", name="Zkusit znovu").count() == 1
    with db.connection_context():
        assert Call.get_by_id(down.call_id).recording_gone_reason is None, "not gone: it may come back"
    # The re-fetch failed its retries: the page says "try again" itself, and keeps the player.
    state = f"fetch('/console/requests/{down.id}/recording/state').then(r => r.json()).then(j => j.state)"
    assert wait_until(lambda: page.evaluate(state) == "unreachable", timeout=60, interval=0.3)
    page.goto(service + "/console/")
    server_said = page.locator(f"#r-{down.id} p.recording-state.unreachable")
    assert server_said.inner_text().startswith(TRY_AGAIN["cs"])  # (the player may have failed again meanwhile)
    shoot(page, "inbox-recording-unreachable", "cs")

    # The network fails (the recording never reaches the browser): the same words.
    ok = voicemail(clinic_cz, "CA-sit", https_server, minutes_ago=2, phone="+420601777321", name=("Petr", "Dvořák"))
    page.route(re.compile(rf".*/console/requests/{ok.id}/recording$"), lambda route: route.abort("connectionfailed"))
    page.route(
        re.compile(rf".*/console/requests/{ok.id}/recording/state$"), lambda route: route.abort("connectionfailed")
    )
    page.goto(f"{service}/console/requests/{ok.id}")
    offline = page.locator("p.recording-state.unreachable")
    offline.wait_for()
    assert offline.inner_text().startswith(TRY_AGAIN["cs"])
    # "Try again" brings the player back and plays (the network is back).
    page.unroute(re.compile(rf".*/console/requests/{ok.id}/recording$"))
    page.get_by_role("button", name="Zkusit znovu").click()
    wait_true(
        page,
        "document.querySelector('div.recording audio') && "
        "document.querySelector('div.recording audio').readyState >= 1",
    )
    set_language(RECEPTION, "en")
    page.goto(service + "/console/")
    assert page.locator(f"#r-{down.id} p.recording-state.unreachable").inner_text().startswith(TRY_AGAIN["en"])
    shoot(page, "inbox-recording-unreachable", "en")


def keys_named(name: str) -> int:
    with db.connection_context():
        return ApiToken.select().where(ApiToken.name == name).count()


def fields(row) -> dict[str, str]:
    """An audit row's details: label -> value, as shown."""
    return row.evaluate("""r => Object.fromEntries([...r.querySelectorAll('dl.details > div')].map(
        d => [d.querySelector('dt').textContent.trim(), d.querySelector('dd').textContent.trim()]))""")


def create_key(page, name: str) -> None:
    page.get_by_label("Servisní účet").fill(name)
    page.get_by_label("zápis").check()
    page.get_by_role("button", name="Vytvořit klíč").click()


def test_keys_are_made_once_their_controls_name_them_and_the_audit_reads_in_words(service, clinic_cz, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="cs-CZ")
    page.set_default_timeout(WAIT_MS)
    keys = f"{service}/console/settings/api-keys?clinic=clinic-cz"
    log_in(page, service, ADMIN)
    page.wait_for_url(service + "/console/")
    page.goto(keys)

    # Create, then reload: one key; the secret shown once, never again.
    create_key(page, "acc-provider-rw")
    page.wait_for_url(keys + "#new-key-title")
    secret = page.locator("#new-key").inner_text()
    assert secret.startswith("csk_") and keys_named("acc-provider-rw") == 1
    page.reload()
    assert page.locator("#new-key").count() == 0 and secret not in page.content()
    assert keys_named("acc-provider-rw") == 1

    # A double click: one key, and the page it lands on shows its secret.
    page.goto(keys)
    page.get_by_label("Servisní účet").fill("pbx-switchboard")
    page.get_by_role("button", name="Vytvořit klíč").dblclick()
    # Both clicks may send the form, and then the browser aborts the first click's navigation
    # for the second's: wait for where the page lands, not for one navigation.
    expect(page).to_have_url(keys + "#new-key-title", timeout=WAIT_MS)
    expect(page.locator("#new-key")).to_be_visible(timeout=WAIT_MS)
    assert keys_named("pbx-switchboard") == 1

    # Every control of a key names the key; the controls are inside the key's own element.
    with db.connection_context():
        rules.issue(Actor("operator", "root"), "nightly-export", [clinic_cz], ["read"], utc_now(), timedelta(days=10))
    page.goto(keys)
    names = ["acc-provider-rw", "pbx-switchboard", "nightly-export"]
    for name in names:
        item = page.locator("li.key", has=page.locator("h3 .name", has_text=re.compile(f"^{name}$")))
        buttons = item.get_by_role("button")
        assert buttons.count() == 2, name  # rotate, revoke
        assert item.get_by_role("button", name=re.compile(rf"^Vyměnit klíč {name}$")).count() == 1
        assert item.get_by_role("button", name=re.compile(rf"^Zneplatnit klíč {name}$")).count() == 1
        assert item.get_by_label(re.compile(rf"^Starý klíč platí do – {name}$")).count() == 1
    every = page.locator("ul.keys").get_by_role("button")
    for i in range(every.count()):
        button = every.nth(i)
        own = button.evaluate("b => b.closest('li.key').querySelector('h3 .name').textContent")
        label = button.evaluate("b => b.textContent.replace(/\\s+/g, ' ').trim()")
        assert own in label, (own, label)
    nightly = page.locator("li.key", has=page.locator("h3 .name", has_text="nightly-export"))
    assert "provozovatel (příkazová řádka)" in nightly.inner_text() and "operator:root" not in page.content()
    assert "Adéla Správcová" in page.locator("li.key", has_text="pbx-switchboard").inner_text()

    # Rotate one, and change a setting.
    item = page.locator("li.key", has=page.locator("h3 .name", has_text=re.compile("^acc-provider-rw$")))
    item.get_by_role("button", name="Vyměnit klíč acc-provider-rw").click()
    page.wait_for_url(keys + "#new-key-title")
    assert page.locator("#new-key").count() == 1 and keys_named("acc-provider-rw") == 2
    shoot(page, "api-keys", "cs")
    page.goto(f"{service}/console/settings/calls?clinic=clinic-cz")
    page.get_by_label("Vytvořit požadavek o zmeškaném hovoru").uncheck()
    page.get_by_label("Jazyky volajících").fill("cs sk")
    page.get_by_role("button", name="Uložit – nastavení hovorů").click()
    page.wait_for_url(f"{service}/console/settings/calls?clinic=clinic-cz")

    # The audit trail, in Czech words.
    page.goto(f"{service}/console/audit?clinic=clinic-cz")
    table = page.locator("table.audit")
    text = table.inner_text() + " " + " ".join(table.locator("[title]").evaluate_all("es => es.map(e => e.title)"))
    assert "=" not in text
    assert not re.search(r"\d{2}:\d{2}(:\d{2})?(\.\d+)?Z", text), "no UTC Z timestamps"
    assert not re.search(r"\b[a-z_]+:[0-9a-f]{8}-", text), "no table:uuid"
    assert not re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-", text), "no ids"
    rows = table.locator("tbody tr")
    actions = rows.evaluate_all("rs => rs.map(r => r.dataset.action)")
    assert {"token.create", "token.rotate", "settings.calls.update", "staff.login"} <= set(actions)
    # A date is bound by no-break spaces and wraps whole: "6. 12. 2026" on one line of its
    # cell in a window where the table is tight, never "6. 12. 202" and "6".
    page.set_viewport_size({"width": 820, "height": 800})  # just wider than the stacked layout
    lines = table.locator("td.when").evaluate_all(
        """cells => cells.map(c => {
            const node = c.firstChild;
            const m = node && node.textContent.match(/^\\d{1,2}\\.\\u00a0\\d{1,2}\\.\\u00a0\\d{4}/);
            if (!m) return -1;
            const range = document.createRange();
            range.setStart(node, 0);
            range.setEnd(node, m[0].length);
            return range.getClientRects().length;
        })"""
    )
    assert lines and set(lines) == {1}, lines
    calls = rows.nth(actions.index("settings.calls.update"))
    assert fields(calls) == {"Požadavky ze zmeškaných hovorů": "vypnuto", "Jazyky volajících": "čeština, slovenština"}
    assert calls.locator("td.who span").get_attribute("title") == ADMIN
    assert calls.locator("td.who").inner_text().strip() == "Adéla Správcová"
    created = rows.nth(actions.index("token.create"))
    assert re.fullmatch(r"\d+\.\u00a0\d+\.\u00a020\d\d \d+:\d\d", fields(created)["Platnost do"])
    assert fields(created)["Oprávnění"] == "čtení, zápis" and fields(created)["Kliniky"] == "Clinic-Cz"
    assert created.locator("td.subject a").inner_text() == "acc-provider-rw"
    rotated = fields(rows.nth(actions.index("token.rotate")))
    assert rotated["Nový klíč"] == "acc-provider-rw" and re.fullmatch(
        r"\d+\.\u00a0\d+\.\u00a020\d\d \d+:\d\d", rotated["Starý klíč platí do"]
    )
    shoot(page, "audit", "cs")

    set_language(ADMIN, "en")
    page.reload()
    text = page.locator("table.audit").inner_text()
    actions = page.locator("table.audit tbody tr").evaluate_all("rs => rs.map(r => r.dataset.action)")
    calls = page.locator("table.audit tbody tr").nth(actions.index("settings.calls.update"))
    assert fields(calls) == {"Missed-call requests": "off", "Caller languages": "Czech, Slovak"}
    assert "=" not in text and not re.search(r"\d{2}:\d{2}(:\d{2})?Z", text)
    shoot(page, "audit", "en")
    page.goto(keys)
    assert page.get_by_role("button", name="Revoke key nightly-export").count() == 1
    shoot(page, "api-keys", "en")


def test_the_calendars_form_keeps_labels_by_their_fields_and_shows_no_example_values(service, clinic_cz, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="cs-CZ")
    page.set_default_timeout(WAIT_MS)
    log_in(page, service, ADMIN)
    page.wait_for_url(service + "/console/")
    calendars = f"{service}/console/settings/calendars?clinic=clinic-cz"
    page.goto(calendars)
    page.get_by_label("Název kalendáře").last.fill("Ordinace MUDr. Nové")
    page.get_by_role("button", name="Vytvořit kalendář").click()
    page.locator("section.calendar").wait_for()
    section = page.locator("section.calendar")
    assert page.locator("input[placeholder]").count() == 0, "no grey example dates that look filled in"
    section.get_by_label("Dovolená", exact=True).fill("Vánoce")
    section.get_by_label("Od", exact=True).fill("2026-12-23")
    section.get_by_label("Do", exact=True).fill("2026-12-31 12:00")
    section.get_by_role("button", name="Přidat dovolenou – kalendář Ordinace MUDr. Nové").click()
    page.locator("table.vacations td[data-label]", has_text="Vánoce").wait_for()
    remove = section.get_by_role("button", name=re.compile("^Odebrat – dovolenou Vánoce"))
    assert remove.count() == 1, "the control names the vacation it removes"
    for language in ("cs", "en"):
        set_language(ADMIN, language)
        page.goto(calendars)
        until = "Do" if language == "cs" else "Until"
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for label_text in (until, "Od") if language == "cs" else (until, "From"):
                field = section.get_by_label(label_text, exact=True)
                label = section.locator(f"label[for='{field.get_attribute('id')}']")
                lb, fb = label.bounding_box(), field.bounding_box()
                # The label sits right above its own field, never at the end of the line before.
                assert 0 <= fb["y"] - (lb["y"] + lb["height"]) <= 6 and abs(lb["x"] - fb["x"]) <= 2, (label_text, width)
            assert field.get_attribute("aria-describedby") == "when-hint"
        shoot(page, "calendars", language)
