"""Staff console logins and sessions (WebTest): passwords, CSRF, throttling, expiry, the
cookie's flags, and the wall between console sessions and API tokens."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta

import falcon.testing
import pytest
import webtest

from models import AuditEvent, StaffMembership, StaffSession, StaffUser
from plumbing import logs
from plumbing.database import db
from tests.conftest import PG_URL, ROOT, app_beside
from tests.support import bearer, issue_token, switchboard_url
from tests.support.clocks import WEDNESDAY
from tests.support.console import PASSWORD, csrf_of, login


def test_login_page_is_czech_first_and_english_on_request(staff, app):
    cs = app.get("/console/login")
    assert "Přihlásit" in cs.text and '<html lang="cs">' in cs.text
    en = app.get("/console/login?lang=en")
    assert "Log in" in en.text and "Přihlásit" not in en.text.split("<nav")[0]
    assert "Log in" in app.get("/console/login").text, "the choice is remembered"
    assert en.headers["Cache-Control"] == "no-store"


def test_login_opens_the_inbox_with_a_httponly_lax_cookie_and_logout_ends_it(staff, app):
    done = login(app, status=303)
    assert done.headers["Location"].endswith("/console/")
    cookie = next(c for c in done.headers.getall("Set-Cookie") if c.startswith("console_session="))
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie, "plain http (the embedded run): a Secure cookie would never come back"
    inbox = app.get("/console/", status=200)
    assert "Anna Nováková" in inbox.text and "Clinic-A" in inbox.text
    with db.connection_context():
        stored = StaffSession.get()
    token = cookie.split(";")[0].split("=", 1)[1]
    assert stored.id != token and len(stored.id) == 64, "only the token's hash is stored"
    app.post("/console/logout", {"csrf_token": csrf_of(inbox)}, status=303)
    app.get("/console/", status=303)
    with db.connection_context():
        assert StaffSession.select().count() == 0


def test_the_cookie_is_secure_over_https_and_behind_a_trusted_proxy_only(staff, app):
    done = login(app, status=303, **{"wsgi.url_scheme": "https"})
    assert "Secure" in next(c for c in done.headers.getall("Set-Cookie") if c.startswith("console_session="))
    app.reset()
    spoofed = login(app, status=303, HTTP_X_FORWARDED_PROTO="https")
    assert "Secure" not in next(c for c in spoofed.headers.getall("Set-Cookie") if c.startswith("console_session="))


def test_unknown_email_and_wrong_password_get_the_same_answer(staff, app):
    wrong = login(app, password="not the password", status=401)
    unknown = login(app, email="nobody@example.cz", status=401)
    for page in (wrong, unknown):
        assert "Nesprávný e-mail nebo heslo." in page.text
    app.get("/console/", status=303)


def test_a_disabled_user_cannot_log_in(staff, app):
    with db.connection_context():
        StaffUser.update(disabled_at=WEDNESDAY).execute()
    assert "Nesprávný e-mail nebo heslo." in login(app, status=401).text


def test_posts_without_the_csrf_token_are_refused(staff, app):
    app.get("/console/login")
    app.post("/console/login", {"email": "anna@example.cz", "password": PASSWORD}, status=403)
    app.post("/console/login", {"email": "anna@example.cz", "password": PASSWORD, "csrf_token": "guess"}, status=403)
    login(app, status=303)
    app.post("/console/logout", {}, status=403)
    app.post("/console/logout", {"csrf_token": "guess"}, status=403)
    app.get("/console/", status=200), "still logged in"


def test_the_sixth_attempt_is_throttled_per_account_even_with_the_right_password(staff, app):
    for _ in range(5):
        login(app, password="wrong password", status=401)
    throttled = login(app, status=429)
    window = int(throttled.headers["Retry-After"])
    assert 0 < window <= 15 * 60, "the configured window (15 min in tests) is what remains"
    minutes = -(-window // 60)  # 1 minutu, 2-4 minuty, 5 minut
    form = "minutu" if minutes == 1 else "minuty" if minutes < 5 else "minut"
    assert f"Zkuste to znovu za {minutes} {form}." in throttled.text, throttled.text
    app.get("/console/", status=303)
    login(app, status=429, REMOTE_ADDR="10.1.2.3"), "the account is locked from any address"


def test_failures_from_one_address_throttle_it_whatever_the_email(staff, app):
    for n in range(5):
        login(app, email=f"guess{n}@example.cz", status=401, REMOTE_ADDR="10.9.9.9")
    login(app, status=429, REMOTE_ADDR="10.9.9.9")
    app.reset()
    login(app, status=303, REMOTE_ADDR="10.0.0.1")


def test_a_client_cannot_escape_the_address_throttle_by_writing_x_forwarded_for(staff, app):
    """TRUSTED_PROXY_HOPS=0 (the default): the header is the client's own words."""
    for n in range(5):
        login(
            app,
            email=f"guess{n}@example.cz",
            status=401,
            REMOTE_ADDR="10.9.9.8",
            HTTP_X_FORWARDED_FOR=f"198.51.100.{n}",
        )
    login(app, status=429, REMOTE_ADDR="10.9.9.8", HTTP_X_FORWARDED_FOR="198.51.100.99")


def test_behind_a_trusted_proxy_each_client_is_throttled_by_its_own_address(staff, app, config):
    """TRUSTED_PROXY_HOPS=1 (a PaaS router): every request comes from the router's address,
    and one office's failed logins must not lock out another's; the client's address is
    what the router appended, not what the client wrote before it."""
    behind = webtest.TestApp(app_beside(replace(config, trusted_proxy_hops=1)))
    router = {"REMOTE_ADDR": "10.0.0.1"}
    for n in range(5):
        login(
            behind, email=f"guess{n}@example.cz", status=401, **router, HTTP_X_FORWARDED_FOR=f"192.0.2.{n}, 203.0.113.9"
        )  # the left entries are the client's
    login(behind, status=429, **router, HTTP_X_FORWARDED_FOR="203.0.113.9")
    behind.reset()
    done = login(behind, status=303, **router, HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert done.headers["Location"].endswith("/console/")
    with db.connection_context():
        session = StaffSession.select().order_by(StaffSession.created_at.desc()).first()
        assert session.ip == "198.51.100.7"
        failed = AuditEvent.select().where(AuditEvent.action == "staff.login_failed").first()
        assert failed.address == "203.0.113.9"


@pytest.mark.parametrize(
    "hops,forwarded,expected",
    [
        (0, "203.0.113.9", "10.0.0.1"),
        (1, "192.0.2.1, 203.0.113.9", "203.0.113.9"),
        (2, "192.0.2.1, 203.0.113.9", "192.0.2.1"),
        (2, "203.0.113.9", "10.0.0.1"),  # fewer entries than proxies: not through them
        (1, "not-an-address", "10.0.0.1"),
        (1, None, "10.0.0.1"),
        (1, "2001:db8::1", "2001:db8::1"),
    ],
)
def test_peer_address(hops: int, forwarded: str | None, expected: str) -> None:
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    req = falcon.testing.create_req(headers=headers, remote_addr="10.0.0.1")
    assert logs.peer_address(req, hops) == expected


def test_sessions_expire_when_idle_and_absolutely(staff, app, clock):
    login(app, status=303)
    clock.set(WEDNESDAY + timedelta(hours=11))
    app.get("/console/", status=200)
    clock.set(WEDNESDAY + timedelta(hours=22))
    app.get("/console/", status=200), "idle time counts from the last page"
    clock.set(WEDNESDAY + timedelta(hours=24, minutes=1))
    app.get("/console/", status=303), "past the absolute lifetime"
    login(app, status=303)
    clock.set(WEDNESDAY + timedelta(hours=36, minutes=2))
    app.get("/console/", status=303), "12 hours idle"


def test_a_session_never_opens_the_api_and_a_token_never_opens_the_console(staff, app):
    login(app, status=303)
    app.post_json(switchboard_url("clinic-a", "is-on-vacation"), {}, status=401)
    app.reset()
    with db.connection_context():
        token = issue_token(["clinic-a"], ["read", "write"])
    app.get("/console/", headers=bearer(token), status=303)


def test_the_stylesheet_is_cached(app):
    css = app.get("/console/static/console.css")
    assert css.content_type == "text/css" and "max-age=86400" in css.headers["Cache-Control"]
    app.get("/console/static/nothing.css", status=404)


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": PG_URL}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_creates_resets_and_disables_users(staff, app):
    made = run(
        "user",
        "create",
        "--clinic",
        "clinic-a",
        "--clinic",
        "clinic-b",
        "--email",
        "Petr@Example.cz",
        "--name",
        "Petr",
        "--role",
        "admin",
        "--password-stdin",
        stdin="a long password\n",
    )
    assert made.returncode == 0, made.stderr
    assert "petr@" not in made.stderr.lower(), "the user is named by id: a command's stderr is a log too"
    login(app, email="petr@example.cz", password="a long password", status=303)
    assert (
        run(
            "user",
            "create",
            "--clinic",
            "clinic-a",
            "--email",
            "petr@example.cz",
            "--name",
            "P",
            "--role",
            "staff",
            "--password-stdin",
            stdin="a long password\n",
        ).returncode
        == 2
    )
    assert (
        "at least"
        in run("user", "reset-password", "--email", "petr@example.cz", "--password-stdin", stdin="short\n").stderr
    )
    reset = run("user", "reset-password", "--email", "petr@example.cz", "--password-stdin", stdin="another long one\n")
    assert reset.returncode == 0 and "1 session(s) ended" in reset.stderr and "petr@" not in reset.stderr.lower()
    app.get("/console/", status=303)
    login(app, email="petr@example.cz", password="another long one", status=303)
    assert run("user", "disable", "--email", "petr@example.cz").returncode == 0
    app.get("/console/", status=303)
    login(app, email="petr@example.cz", password="another long one", status=401)
    with db.connection_context():
        user = StaffUser.by_email("petr@example.cz")
        assert {m.clinic.slug: m.role for m in user.memberships} == {"clinic-a": "admin", "clinic-b": "admin"}
        actions = [e.action for e in AuditEvent.trail()]
    assert actions.count("staff_user.create") == 2 and "staff_user.disable" in actions
    assert run("user", "disable", "--email", "nobody@example.cz").returncode == 2


def test_the_demo_prints_an_admin_and_a_staff_login_that_open_the_console(app, config, capsys):
    """`manage.py demo` (what bin/run prints): the console URL and a login per role, each
    with a fresh password; a later run's passwords replace the earlier ones."""
    import re

    import manage

    def demo() -> dict[str, tuple[str, str]]:
        assert manage.main(["demo", "--base-url", "http://127.0.0.1:8000"], config) == 0
        out = capsys.readouterr().out
        assert "Staff console: http://127.0.0.1:8000/console/" in out
        return {
            role: (email, password)
            for role, email, password in re.findall(r"^  (admin|staff): (\S+)  password: (\S+)$", out, flags=re.M)
        }

    first = demo()
    assert set(first) == {"admin", "staff"}
    for role, (email, password) in first.items():
        with db.connection_context():
            user = StaffUser.get(StaffUser.email == email)
            assert [m.role for m in StaffMembership.select().where(StaffMembership.user == user)] == [role]
        done = login(app, email, password)
        assert done.status_int == 303 and done.headers["Location"].endswith("/console/"), role
        app.reset()
    second = demo()
    assert second["staff"][1] != first["staff"][1]
    login(app, second["staff"][0], second["staff"][1], status=303)
    app.reset()
    assert login(app, *first["admin"]).status_int != 303, "the earlier password no longer opens it"


def test_the_user_switches_language_from_the_header_and_it_stays_with_the_account(staff, app):
    login(app, status=303)
    inbox = app.get("/console/?state=resolved")
    assert "Příchozí" in inbox.text
    switched = app.post(
        "/console/language",
        {"csrf_token": csrf_of(inbox), "language": "en"},
        headers={"Referer": "http://localhost/console/?state=resolved"},
        status=303,
    )
    assert switched.headers["Location"].endswith("/console/?state=resolved"), "back where it was switched"
    assert "Inbox" in app.get("/console/").text
    with db.connection_context():
        assert StaffUser.get_by_id(staff.id).language == "en"
    # Another site in the Referer is not followed; an unknown language is refused; no CSRF, 403.
    away = app.post(
        "/console/language",
        {"csrf_token": csrf_of(inbox), "language": "cs"},
        headers={"Referer": "https://evil.example/console/x"},
        status=303,
    )
    assert away.headers["Location"].endswith("/console/")
    app.post("/console/language", {"csrf_token": csrf_of(inbox), "language": "de"}, status=400)
    app.post("/console/language", {"language": "en"}, status=403)
