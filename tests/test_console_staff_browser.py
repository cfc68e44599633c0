"""Staff accounts in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright,
never `playwright install`) against gunicorn started from the Procfile on the real clock,
PostgreSQL and Redis: an admin adds a receptionist and hands the set-password link over; the
receptionist sets a password, logs in, enrols two-factor by reading the secret off the page
and computing the code, logs out, logs in with a code, then with a recovery code (which then
fails a second time); a code replayed within its window is refused; a reused or expired link is
refused; the clinic requires two-factor and a user without it is held at enrolment; an admin
disables a logged-in user, whose next click lands on the login page; a staff member gets 403
on staff management; an admin of clinic A can neither see nor change a user of clinic B. The
pages are photographed in Czech and English at 1280 and 390 px (var/screenshots/console/),
with no text wider than the screen and no English left on a Czech page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyotp
import pytest

from models import AuditEvent, Clinic, StaffMembership, StaffPasswordLink, StaffUser
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import clinic, load, organization
from tests.support.console_browser import PASSWORD, WAIT_MS, log_in, shoot
from tests.support.log_audit import remember

RITA_PASSWORD = "mango violin harbour tulip"
WIDTHS = (1280, 390)


@pytest.fixture
def clinics(app):
    """clinic-a (anna administers it, bob works there) and clinic-b (bea administers it,
    cyril works there), one organization."""
    load(organization(clinic("clinic-a", name="Ordinace Vinohrady"), clinic("clinic-b", name="Ordinace Karlín")))
    with db.connection_context():
        for email, name, slug, role in (
            ("anna@example.cz", "Anna Adminová", "clinic-a", "admin"),
            ("bob@example.cz", "Bob Beneš", "clinic-a", "staff"),
            ("bea@example.cz", "Bea Bártová", "clinic-b", "admin"),
            ("cyril@example.cz", "Cyril Černý", "clinic-b", "staff"),
        ):
            user = StaffUser.create(email=email, name=name, password_hash=hash_password(PASSWORD))
            StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == slug), role=role)


def switch_language(page) -> None:
    page.locator("header form.inline button[name=language]").click()
    page.wait_for_load_state()


def fresh(browser):
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    return page


def code_at(secret: str, offset_seconds: int = 0) -> str:
    return pyotp.TOTP(secret).at(datetime.now(UTC) + timedelta(seconds=offset_seconds))


def give_code(page, code: str) -> None:
    page.get_by_label("Kód z ověřovací aplikace").fill(code)
    page.get_by_role("button", name="Pokračovat").click()
    page.wait_for_load_state()


def test_an_admin_onboards_and_offboards_a_receptionist_with_two_factor(service, clinics, app, browser):
    shots: list = []  # var/screenshots/console/ (tests/test_console_truth_browser.py's `shoot`)
    admin = fresh(browser)
    log_in(admin, service)
    admin.wait_for_url(service + "/console/")
    admin.get_by_role("link", name="Nastavení").click()
    admin.get_by_role("link", name="Uživatelé").click()
    admin.wait_for_url(service + "/console/settings/staff?clinic=clinic-a")
    names = admin.locator("table.staff tbody tr:first-child th").all_inner_texts()
    assert names == ["Anna Adminová", "Bob Beneš"], "clinic B's users are not listed"

    # 1. The admin adds a receptionist; the link is shown once.
    admin.get_by_label("E-mail", exact=True).fill("rita@example.cz")
    admin.get_by_label("Jméno a příjmení", exact=True).fill("Rita Recepční")
    admin.get_by_label("Role", exact=True).select_option("staff")
    admin.get_by_role("button", name="Přidat", exact=True).click()
    link = admin.locator("#new-link").inner_text()
    remember(link.rsplit("/", 1)[1], "set-password link token")
    assert link.startswith(service + "/console/password/")
    shots += shoot(admin, "accounts-staff", "cs")
    admin.reload()
    assert admin.locator("#new-link").count() == 0, "shown once"

    # 2. The receptionist opens the link and sets a password; a weak one is refused first.
    rita = fresh(browser)
    rita.goto(link)
    assert "Rita Recepční" in rita.locator("main").inner_text()
    shots += shoot(rita, "accounts-set-password", "cs")
    rita.get_by_label("Nové heslo", exact=True).fill("rita recepční")
    rita.get_by_label("Nové heslo znovu").fill("rita recepční")
    rita.get_by_role("button", name="Nastavit heslo").click()
    assert "příliš běžné" in rita.get_by_role("alert").inner_text(), "built from her own name"
    rita.get_by_label("Nové heslo", exact=True).fill(RITA_PASSWORD)
    rita.get_by_label("Nové heslo znovu").fill(RITA_PASSWORD)
    rita.get_by_role("button", name="Nastavit heslo").click()
    rita.wait_for_url(service + "/console/login?password=set")
    assert "Heslo je nastaveno" in rita.get_by_role("status").inner_text()
    # A used link is refused.
    reused = rita.goto(link)
    assert reused.status == 410 and "už neplatí" in rita.get_by_role("alert").inner_text()

    # 3. She logs in and enrols two-factor, reading the secret off the page.
    log_in(rita, service, "rita@example.cz", RITA_PASSWORD)
    rita.wait_for_url(service + "/console/")
    rita.get_by_role("link", name="Rita Recepční").click()
    rita.wait_for_url(service + "/console/account")
    rita.get_by_role("link", name="Nastavit dvoufázové přihlášení").click()
    assert rita.locator("div.qr svg").is_visible()
    shots += shoot(rita, "accounts-two-factor-enrol", "cs")
    secret = rita.locator("#secret").inner_text().replace(" ", "")
    remember(secret, "TOTP secret")
    rita.get_by_label("Zadejte šestimístný kód, který aplikace ukazuje").fill(code_at(secret))
    rita.get_by_role("button", name="Zapnout dvoufázové přihlášení").click()
    codes = rita.locator("ol.codes code").all_inner_texts()
    assert len(codes) == 10
    shots += shoot(rita, "accounts-recovery-codes", "cs")
    rita.get_by_role("button", name="Odhlásit").click()
    rita.wait_for_url(service + "/console/login")

    # 4. With a code: the password, then the code page. The enrolment's step is spent, so the
    # next step's code (within the window of one step) logs her in.
    log_in(rita, service, "rita@example.cz", RITA_PASSWORD)
    rita.wait_for_url(service + "/console/login/code")
    shots += shoot(rita, "accounts-login-code", "cs")
    login_code = code_at(secret, 30)
    give_code(rita, login_code)
    rita.wait_for_url(service + "/console/")
    rita.get_by_role("button", name="Odhlásit").click()
    # The same code again, within its window: refused.
    log_in(rita, service, "rita@example.cz", RITA_PASSWORD)
    rita.wait_for_url(service + "/console/login/code")
    give_code(rita, login_code)
    assert "už byl použit" in rita.get_by_role("alert").inner_text()
    # 5. A recovery code logs her in once.
    give_code(rita, codes[0])
    rita.wait_for_url(service + "/console/account")
    assert "Zbývající kódy pro obnovení: 9" in rita.get_by_role("status").inner_text()
    rita.get_by_role("button", name="Odhlásit").first.click()
    log_in(rita, service, "rita@example.cz", RITA_PASSWORD)
    rita.wait_for_url(service + "/console/login/code")
    give_code(rita, codes[0])
    assert rita.get_by_role("alert").is_visible() and rita.url == service + "/console/login/code"
    give_code(rita, codes[1])
    rita.wait_for_url(service + "/console/account")

    # 6. The clinic requires two-factor: bob (without it) is held at enrolment after his password.
    admin.goto(service + "/console/settings/staff?clinic=clinic-a")
    admin.get_by_label("Vyžadovat dvoufázové přihlášení od všech na této klinice").check()
    admin.locator("section", has_text="Vyžadovat").get_by_role("button", name="Uložit").click()
    admin.wait_for_load_state()
    assert admin.get_by_label("Vyžadovat dvoufázové přihlášení od všech na této klinice").is_checked()
    bob = fresh(browser)
    log_in(bob, service, "bob@example.cz")
    bob.wait_for_url(service + "/console/account/two-factor")
    assert "vyžaduje dvoufázové přihlášení" in bob.get_by_role("status").inner_text()
    assert bob.locator("header nav").count() == 0, "no way elsewhere"
    for path in ("/console/", "/console/account", "/console/settings/staff?clinic=clinic-a"):
        bob.goto(service + path)
        assert bob.url == service + "/console/account/two-factor", path
    shots += shoot(bob, "accounts-two-factor-required", "cs")
    bob_secret = bob.locator("#secret").inner_text().replace(" ", "")
    remember(bob_secret, "TOTP secret")
    bob.get_by_label("Zadejte šestimístný kód, který aplikace ukazuje").fill(code_at(bob_secret))
    bob.get_by_role("button", name="Zapnout dvoufázové přihlášení").click()
    assert bob.locator("ol.codes code").count() == 10
    bob.get_by_role("link", name="Mám je uložené – přejít do Příchozích").click()
    bob.wait_for_url(service + "/console/")

    # 7. A staff member gets 403 on staff management.
    refused = bob.goto(service + "/console/settings/staff?clinic=clinic-a")
    assert refused.status == 403

    # 8. Clinic B is not anna's: neither its page nor its user, even by a crafted form.
    assert admin.goto(service + "/console/settings/staff?clinic=clinic-b").status == 403
    admin.goto(service + "/console/settings/staff?clinic=clinic-a")
    with db.connection_context():
        cyril = StaffUser.by_email("cyril@example.cz")
    answer = admin.evaluate(
        """async (user) => {
        const form = new FormData(document.querySelector('form.settings-form'));
        form.set('action', 'disable'); form.set('user', user);
        const r = await fetch('/console/settings/staff', {method: 'POST', body: new URLSearchParams(form)});
        return r.status; }""",
        str(cyril.id),
    )
    assert answer == 404
    with db.connection_context():
        assert StaffUser.by_email("cyril@example.cz").disabled_at is None

    # 9. The admin disables rita while she is logged in: her next click lands on the login page.
    admin.goto(service + "/console/settings/staff?clinic=clinic-a")
    admin.get_by_role("button", name="Zablokovat: Rita Recepční").click()
    admin.wait_for_load_state()
    assert "přihlášení zablokováno" in admin.locator("table.staff tbody.disabled").inner_text()
    rita.get_by_role("link", name="Příchozí").click()
    rita.wait_for_url(service + "/console/login")

    # 10. A new link for bob; an expired one is refused (its time moved past, as a day would).
    admin.get_by_role("button", name="Nový odkaz pro nastavení hesla: Bob Beneš").click()
    bob_link = admin.locator("#new-link").inner_text()
    remember(bob_link.rsplit("/", 1)[1], "set-password link token")
    with db.connection_context():
        StaffPasswordLink.update(expires_at=datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=1)).where(
            StaffPasswordLink.used_at.is_null()
        ).execute()
    expired = fresh(browser)
    assert expired.goto(bob_link).status == 410

    # 11. The audit page tells the story in Czech.
    admin.goto(service + "/console/audit?clinic=clinic-a")
    story = admin.locator("table.audit").inner_text()
    for words in (
        "Přidán uživatel",
        "Vytvořen odkaz pro nastavení hesla",
        "Heslo nastaveno odkazem",
        "Zapnuto dvoufázové přihlášení",
        "Použit kód pro obnovení",
        "Změněno vyžadování dvoufázového přihlášení",
        "Uživatel zablokován",
    ):
        assert words in story, words
    assert "Rita Recepční" in story, "the user acted on, by name"
    shots += shoot(admin, "accounts-audit", "cs")
    with db.connection_context():
        assert AuditEvent.select().where(AuditEvent.action == "staff_user.disable").count() == 1

    # 12. English: the same pages in the other language.
    admin.goto(service + "/console/settings/staff?clinic=clinic-a")
    switch_language(admin)
    assert admin.locator("h1").inner_text().startswith("Staff")
    shots += shoot(admin, "accounts-staff", "en")
    bob.goto(service + "/console/account")
    switch_language(bob)
    assert bob.locator("h1").inner_text() == "My account"
    shots += shoot(bob, "accounts-account", "en")
    bob.goto(service + "/console/account/two-factor")
    shots += shoot(bob, "accounts-two-factor-on", "en")
    english = fresh(browser)
    english.goto(service + "/console/login?lang=en")
    english.get_by_label("E-mail").fill("bob@example.cz")
    english.get_by_label("Password").fill(PASSWORD)
    english.get_by_role("button", name="Log in").click()
    english.wait_for_url(service + "/console/login/code")
    assert english.get_by_label("Code from the authenticator app").is_visible()
    shots += shoot(english, "accounts-login-code", "en")
    switch_language(bob)
    shots += shoot(bob, "accounts-account-two-factor", "cs")
    bob.goto(service + "/console/account")
    shots += shoot(bob, "accounts-account", "cs")
    admin.goto(service + "/console/settings/staff?clinic=clinic-a")
    admin.get_by_label("E-mail", exact=True).fill("eva@example.cz")
    admin.get_by_label("Full name", exact=True).fill("Eva English")
    admin.get_by_role("button", name="Add", exact=True).click()
    eva_link = admin.locator("#new-link").inner_text()
    remember(eva_link.rsplit("/", 1)[1], "set-password link token")
    eva = fresh(browser)
    eva.goto(service + "/console/login?lang=en")  # the language cookie of the pages before login
    eva.goto(eva_link)
    assert "Choose your password" in eva.locator("h1").inner_text()
    shots += shoot(eva, "accounts-set-password", "en")
    print("\nscreenshots:\n" + "\n".join(str(p) for p in shots))
