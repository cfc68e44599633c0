"""Staff accounts run by the clinic (WebTest against PostgreSQL and Redis): an admin adds,
re-roles, disables and enables users and makes set-password links; a user sets a password
through a link, changes it, ends sessions, enrols two-factor (TOTP) and logs in with a code or
a recovery code; the clinic requires two-factor; every change is audited. The browser side is
tests/test_console_staff_browser.py."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pyotp
import pytest

from console import account_words as console_words
from console import audit as console_audit
from models import (
    AuditEvent,
    Clinic,
    StaffMembership,
    StaffPasswordLink,
    StaffRecoveryCode,
    StaffSession,
    StaffUser,
)
from plumbing import crypto
from plumbing.database import db
from staff import accounts, passwords, two_factor
from staff.passwords import hash_password
from tests.conftest import PG_URL, ROOT
from tests.support import SECRET_KEY, clinic, load, organization
from tests.support.console import csrf_of
from tests.support.staff_accounts import (
    NEW_PASSWORD,
    STAFF,
    add_user,
    code_login,
    enrol,
    log_in,
    set_password,
    staff_post,
)

PASSWORD = "correct horse battery"


@pytest.fixture
def people(app):
    """clinic-a and clinic-b of one organization, clinic-x of another; anna administers
    clinic-a, bob works there, xena administers clinic-x (another organization)."""
    load(organization(clinic("clinic-a"), clinic("clinic-b")))
    load(organization(clinic("clinic-x"), slug="other-org"))
    with db.connection_context():
        for email, slug, role in (
            ("anna@example.cz", "clinic-a", "admin"),
            ("bob@example.cz", "clinic-a", "staff"),
            ("xena@example.cz", "clinic-x", "admin"),
            ("cyril@example.cz", "clinic-b", "staff"),
        ):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == slug), role=role)


def user(email: str) -> StaffUser:
    with db.connection_context():
        return StaffUser.by_email(email)


def events(action: str) -> list[AuditEvent]:
    with db.connection_context():
        return list(AuditEvent.select().where(AuditEvent.action == action).order_by(AuditEvent.id))


def test_an_admin_adds_a_user_who_sets_a_password_through_the_link_once(people, app, clock):
    log_in(app)
    page = app.get(f"{STAFF}?clinic=clinic-a")
    assert [r.find("th").text for r in page.html.select("table.staff tbody tr:first-child")] == ["Anna", "Bob"]
    link = add_user(app, "Dana@Example.cz ", "Dana  Veselá")
    assert link.startswith("http://localhost:80/console/password/") or link.startswith(
        "http://localhost/console/password/"
    )
    dana = user("dana@example.cz")
    assert dana.name == "Dana Veselá" and dana.password_hash == passwords.NO_PASSWORD
    with db.connection_context():
        stored = StaffPasswordLink.get()
    token = link.rsplit("/", 1)[1]
    assert stored.token_hash != token and len(stored.token_hash) == 64, "only the link's hash is stored"
    # Nobody logs in to an account without a password, whatever is typed (the dummy hash's text either).
    app.reset()
    log_in(app, "dana@example.cz", "", status=401)
    log_in(app, "dana@example.cz", "not-a-password: timing equaliser for unknown e-mails", status=401)
    # The link's page: a weak password refused in words, then a good one.
    refused = set_password(app, link, "dana veselá 1", status=400)
    assert "příliš běžné" in refused.text or "příliš snadno" in refused.text
    done = set_password(app, link)
    assert done.headers["Location"].endswith("/console/login?password=set")
    assert "Heslo je nastaveno" in app.get(done.headers["Location"]).text
    # Used: the same link again is refused, and expired ones are too.
    assert app.get("/console/password/" + token, status=410).html.find(role="alert")
    log_in(app, "dana@example.cz", NEW_PASSWORD)
    assert "Dana Veselá" in app.get("/console/").text
    assert [json.loads(e.details) for e in events("staff_user.create")] == [{"existingAccount": False, "role": "staff"}]
    assert events("staff_user.password_set")[0].actor_name == "dana@example.cz"


def test_a_link_expires_and_a_newer_one_replaces_it(people, app, clock):
    log_in(app)
    first = add_user(app, "dana@example.cz", "Dana")
    dana = user("dana@example.cz")
    staff_post(app, {"action": "link", "user": str(dana.id)})
    second = app.get(f"{STAFF}?clinic=clinic-a").html.find(id="new-link").text
    app.reset()
    assert app.get(first.split("localhost", 1)[1].lstrip(":80"), status=410)
    clock.set(clock() + timedelta(hours=24, seconds=1))
    set_password(app, second, status=410)
    with db.connection_context():
        assert StaffUser.by_email("dana@example.cz").password_hash == passwords.NO_PASSWORD


def test_an_existing_account_of_the_organization_gets_the_role_another_organizations_is_refused(people, app):
    log_in(app)
    staff_post(app, {"action": "add", "email": "cyril@example.cz", "name": "ignored", "role": "admin"})
    assert app.get(f"{STAFF}?clinic=clinic-a").html.find(id="new-link") is None, "no link: the account has a password"
    with db.connection_context():
        assert user("cyril@example.cz").role_in(Clinic.by_slug("clinic-a")) == "admin"
    refused = staff_post(app, {"action": "add", "email": "xena@example.cz", "name": "X", "role": "staff"}, status=400)
    assert "jiné organizace" in refused.html.find(role="alert").text
    again = staff_post(app, {"action": "add", "email": "bob@example.cz", "name": "Bob", "role": "staff"}, status=400)
    assert again.html.find(role="alert")
    bad = staff_post(app, {"action": "add", "email": "not-an-address", "name": "N", "role": "staff"}, status=400)
    assert bad.html.find(role="alert")
    with db.connection_context():
        assert user("xena@example.cz").role_in(Clinic.by_slug("clinic-a")) is None


def test_roles_and_the_last_admin(people, app):
    log_in(app)
    anna, bob = user("anna@example.cz"), user("bob@example.cz")
    refused = staff_post(app, {"action": "role", "user": str(anna.id), "role": "staff"}, status=400)
    assert "alespoň jednoho" in refused.html.find(role="alert").text
    staff_post(app, {"action": "role", "user": str(bob.id), "role": "admin"})
    staff_post(app, {"action": "role", "user": str(anna.id), "role": "staff"})
    with db.connection_context():
        assert anna.role_in(Clinic.by_slug("clinic-a")) == "staff"
    assert [json.loads(e.details) for e in events("staff_user.role")] == [
        {"from": "staff", "to": "admin"},
        {"from": "admin", "to": "staff"},
    ]
    # anna is staff now: the staff page is closed to her.
    assert app.get(f"{STAFF}?clinic=clinic-a", status=403)


def test_disabling_ends_every_session_at_once_and_enabling_lets_the_user_back(people, app, wsgi_app):
    import webtest

    bobs = webtest.TestApp(wsgi_app)
    log_in(bobs, "bob@example.cz")
    bobs.get("/console/", status=200)
    log_in(app)
    bob = user("bob@example.cz")
    staff_post(app, {"action": "disable", "user": str(bob.id)})
    assert bobs.get("/console/", status=303).headers["Location"].endswith("/console/login"), "the next click: login"
    log_in(bobs, "bob@example.cz", status=401)
    with db.connection_context():
        assert StaffSession.select().where(StaffSession.user == bob.id).count() == 0
    assert json.loads(events("staff_user.disable")[0].details) == {"sessionsEnded": 1}
    # Not herself; and enabling lets bob back in.
    anna = user("anna@example.cz")
    assert staff_post(app, {"action": "disable", "user": str(anna.id)}, status=400)
    staff_post(app, {"action": "enable", "user": str(bob.id)})
    log_in(bobs, "bob@example.cz")
    assert events("staff_user.enable")


def test_an_admin_cannot_see_or_touch_another_clinics_user(people, app):
    log_in(app)
    cyril, xena = user("cyril@example.cz"), user("xena@example.cz")
    page = app.get(f"{STAFF}?clinic=clinic-a")
    assert "cyril@example.cz" not in page.text and "xena@example.cz" not in page.text
    for action in ("disable", "enable", "link", "role"):
        staff_post(app, {"action": action, "user": str(cyril.id), "role": "admin"}, status=404)
    staff_post(app, {"action": "disable", "user": "not-a-uuid"}, status=404)
    # clinic-b is not hers to administer: 403, whichever way it is named.
    assert app.get(f"{STAFF}?clinic=clinic-b", status=403)
    assert app.post(
        STAFF,
        {"csrf_token": csrf_of(app.get("/console/")), "clinic": "clinic-x", "action": "disable", "user": str(xena.id)},
        status=403,
    )
    with db.connection_context():
        assert StaffUser.by_email("cyril@example.cz").disabled_at is None
    # A staff member gets 403.
    app.reset()
    log_in(app, "bob@example.cz")
    assert app.get(f"{STAFF}?clinic=clinic-a", status=403)


def test_two_factor_enrol_log_in_with_a_code_once_and_with_a_recovery_code_once(people, app, clock):
    log_in(app, "bob@example.cz")
    secret, codes = enrol(app, clock)
    bob = user("bob@example.cz")
    assert bob.two_factor and crypto.decrypt(bob.totp_secret_encrypted, SECRET_KEY) == secret
    assert secret not in bob.totp_secret_encrypted, "encrypted at rest"
    with db.connection_context():
        stored = [r.code_hash for r in StaffRecoveryCode.select()]
    assert len(stored) == 10 and not set(codes) & set(stored)
    app.reset()
    # The password alone opens only the code page.
    assert log_in(app, "bob@example.cz").headers["Location"].endswith("/console/login/code")
    assert app.get("/console/", status=303).headers["Location"].endswith("/console/login/code")
    assert app.get("/console/account", status=303)
    # The code enrolment used is spent; the next step's code works (once).
    code_login(app, pyotp.TOTP(secret).at(clock()), status=401)
    clock.set(clock() + timedelta(seconds=30))
    now_code = pyotp.TOTP(secret).at(clock())
    assert code_login(app, now_code).headers["Location"].endswith("/console/")
    app.get("/console/", status=200)
    app.reset()
    log_in(app, "bob@example.cz")
    code_login(app, now_code, status=401)  # replayed within its window: refused
    # One step early or late is fine (a phone's clock a little off); two is not.
    code_login(app, pyotp.TOTP(secret).at(clock() + timedelta(seconds=90)), status=401)
    code_login(app, pyotp.TOTP(secret).at(clock() + timedelta(seconds=30)))
    app.reset()
    log_in(app, "bob@example.cz")
    assert code_login(app, codes[3].upper().replace("-", " ")).headers["Location"].endswith("/console/account")
    assert "Zbývající kódy pro obnovení: 9" in app.get("/console/account").text
    app.reset()
    log_in(app, "bob@example.cz")
    code_login(app, codes[3], status=401)
    assert [json.loads(e.details) for e in events("staff_user.recovery_code_used")] == [{"left": 9}]
    assert json.loads(events("staff.login_failed")[-1].details)["secondFactor"] is True
    assert events("staff_user.two_factor_enable")


def test_wrong_codes_are_throttled_like_passwords(people, app, clock):
    log_in(app, "bob@example.cz")
    secret, _ = enrol(app, clock)
    app.reset()
    log_in(app, "bob@example.cz")
    for _ in range(4):
        code_login(app, "000000", status=401)
    # A right password does not reset the count of wrong codes: a fifth wrong code fills it.
    app.reset()
    log_in(app, "bob@example.cz")
    code_login(app, "999999", status=401)
    clock.set(clock() + timedelta(seconds=60))
    blocked = code_login(app, pyotp.TOTP(secret).at(clock()), status=429)
    assert int(blocked.headers["Retry-After"]) > 0
    # The same counters as passwords: the account's logins wait too.
    app.reset()
    log_in(app, "bob@example.cz", status=429)


def test_a_clinic_that_requires_two_factor_holds_a_user_at_enrolment(people, app, clock):
    log_in(app)
    staff_post(app, {"action": "two-factor", "required": "1"})
    with db.connection_context():
        assert Clinic.by_slug("clinic-a").two_factor_required
    assert json.loads(events("settings.two_factor.update")[0].details) == {"twoFactorRequired": True}
    app.reset()
    assert log_in(app, "bob@example.cz").headers["Location"].endswith("/console/account/two-factor")
    for path in ("/console/", "/console/account", "/console/audit", STAFF):
        assert app.get(path, status=303).headers["Location"].endswith("/console/account/two-factor"), path
    assert "Nastavte" in app.get("/console/account/two-factor").text
    secret, _codes = enrol(app, clock)
    app.get("/console/", status=200)
    # On for a clinic that requires it: it cannot be turned off.
    page = app.get("/console/account/two-factor")
    assert not page.html.select("input[name=action][value=disable]")
    clock.set(clock() + timedelta(seconds=30))
    app.post(
        "/console/account/two-factor",
        {
            "csrf_token": csrf_of(page),
            "action": "disable",
            "password": PASSWORD,
            "code": pyotp.TOTP(secret).at(clock()),
        },
        status=403,
    )
    assert user("bob@example.cz").two_factor


def test_turning_two_factor_off_takes_the_password_and_a_code(people, app, clock):
    log_in(app, "bob@example.cz")
    secret, _ = enrol(app, clock)
    clock.set(clock() + timedelta(seconds=30))
    page = app.get("/console/account/two-factor")
    csrf = csrf_of(page)
    fields = {"csrf_token": csrf, "action": "disable", "password": "wrong", "code": pyotp.TOTP(secret).at(clock())}
    app.post("/console/account/two-factor", fields, status=400)
    app.post("/console/account/two-factor", fields | {"password": PASSWORD})
    bob = user("bob@example.cz")
    assert not bob.two_factor and bob.totp_secret_encrypted is None
    with db.connection_context():
        assert StaffRecoveryCode.select().count() == 0
    assert events("staff_user.two_factor_disable")


def test_own_password_change_ends_the_other_sessions(people, app, wsgi_app):
    import webtest

    other = webtest.TestApp(wsgi_app)
    log_in(other, "bob@example.cz")
    log_in(app, "bob@example.cz")
    page = app.get("/console/account")
    assert len(page.html.select("table.sessions tbody tr")) == 2
    fields = {
        "csrf_token": csrf_of(page),
        "action": "password",
        "current": "wrong",
        "new": NEW_PASSWORD,
        "repeat": NEW_PASSWORD,
    }
    assert app.post("/console/account", fields, status=400).html.find(role="alert")
    app.post("/console/account", fields | {"current": PASSWORD, "repeat": "other"}, status=400)
    weak = app.post("/console/account", fields | {"current": PASSWORD, "new": "short", "repeat": "short"}, status=400)
    assert "12" in weak.html.find(role="alert").text
    app.post("/console/account", fields | {"current": PASSWORD})
    assert "Heslo je změněno" in app.get("/console/account").text
    other.get("/console/", status=303)
    app.get("/console/", status=200)
    assert json.loads(events("staff_user.password_change")[0].details) == {"sessionsEnded": 1}
    app.reset()
    log_in(app, "bob@example.cz", NEW_PASSWORD)


def test_own_sessions_listed_and_ended_one_or_all_others(people, app, wsgi_app):
    import webtest

    phones = [
        webtest.TestApp(wsgi_app, extra_environ={"HTTP_USER_AGENT": ua})
        for ua in (
            "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 Chrome/130.0 Mobile Safari/537.36",
            "Mozilla/5.0 (Windows NT 10.0; rv:133.0) Gecko/20100101 Firefox/133.0",
        )
    ]
    for phone in phones:
        log_in(phone, "bob@example.cz")
    log_in(app, "bob@example.cz")
    page = app.get("/console/account")
    rows = page.html.select("table.sessions tbody tr")
    assert len(rows) == 3
    text = page.html.select_one("table.sessions").text
    assert "Chrome, Android" in text and "Firefox, Windows" in text
    firefox = next(r for r in rows if "Firefox" in r.text)
    app.post(
        "/console/account",
        {
            "csrf_token": csrf_of(page),
            "action": "end-session",
            "session": firefox.find("input", {"name": "session"})["value"],
        },
    )
    phones[1].get("/console/", status=303)
    phones[0].get("/console/", status=200)
    app.post("/console/account", {"csrf_token": csrf_of(page), "action": "end-others"})
    phones[0].get("/console/", status=303)
    app.get("/console/", status=200)
    # Another user's session cannot be named.
    with db.connection_context():
        assert StaffSession.select().count() == 1
    app.post(
        "/console/account", {"csrf_token": csrf_of(page), "action": "end-session", "session": "f" * 64}, status=400
    )
    assert [json.loads(e.details) for e in events("staff_user.sessions_end")] == [
        {"others": False, "sessionsEnded": 1},
        {"others": True, "sessionsEnded": 1},
    ]


def test_the_audit_page_names_every_staff_action_in_czech(people, app):
    from console.rendering import Renderer

    cs = Renderer().translations["cs"]
    staff_actions = [
        a for a in console_audit.ACTIONS if a.startswith("staff_user.") or a == "settings.two_factor.update"
    ]
    assert len(staff_actions) >= 14
    for action in staff_actions:
        words = console_audit.ACTIONS[action].words
        assert cs.gettext(words) != words, action


def test_every_refusal_of_staff_has_words_in_the_console():
    import inspect

    texts = set(console_words.REFUSALS)
    for module in (accounts, two_factor, passwords):
        for name, value in inspect.getmembers(module):
            if name.isupper() and isinstance(value, str) and value.endswith(".") and " " in value:
                assert value in texts, (module.__name__, name)


def test_the_operator_resets_two_factor_audited(people, app, clock):
    log_in(app, "bob@example.cz")
    enrol(app, clock)
    env = {"DATABASE_URL": PG_URL, "SECRET_KEY": SECRET_KEY, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "manage.py", "user", "reset-2fa", "--email", "BOB@example.cz"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    bob = user("bob@example.cz")
    assert not bob.two_factor and bob.totp_secret_encrypted is None
    app.get("/console/", status=303)  # sessions ended
    event = events("staff_user.two_factor_reset")[0]
    assert event.actor_kind == "operator" and json.loads(event.details) == {"sessionsEnded": 1, "wasOn": True}
    missing = subprocess.run(
        [sys.executable, "manage.py", "user", "reset-2fa", "--email", "nobody@example.cz"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "no such user" in missing.stderr


def test_the_onboarding_file_keeps_the_requirement_unless_it_says_otherwise(people, app):
    with db.connection_context():
        Clinic.update(two_factor_required=True).where(Clinic.slug == "clinic-a").execute()
    load(organization(clinic("clinic-a"), clinic("clinic-b")))
    with db.connection_context():
        assert Clinic.by_slug("clinic-a").two_factor_required, "a file that does not mention it leaves it"
    load(organization(clinic("clinic-a", twoFactorRequired=False), clinic("clinic-b")))
    with db.connection_context():
        assert not Clinic.by_slug("clinic-a").two_factor_required
