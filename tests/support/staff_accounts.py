"""The console's staff pages driven through WebTest: a user added, a set-password link
used, two-factor enrolment and a login with a code (the staff tests and the log audit's
flows share them)."""

from __future__ import annotations

import pyotp

from tests.support.console import PASSWORD, csrf_of
from tests.support.log_audit import remember

NEW_PASSWORD = "tiger lantern oboe quarry"


def log_in(app, email: str = "anna@example.cz", password: str = PASSWORD, status: int | str = 303):
    form = app.get("/console/login").forms[0]
    form["email"], form["password"] = email, password
    return form.submit(status=status)


def add_user(app, email: str, name: str, role: str = "staff") -> str:
    """Add through the page; the set-password link it shows once (after the redirect)."""
    staff_post(app, {"action": "add", "email": email, "name": name, "role": role})
    page = app.get(f"{STAFF}?clinic=clinic-a")
    link = page.html.find(id="new-link").text
    remember(link.rsplit("/", 1)[1], "set-password link token")
    assert app.get(f"{STAFF}?clinic=clinic-a").html.find(id="new-link") is None, "shown once"
    return link


def set_password(app, link: str, password: str = NEW_PASSWORD, status: int = 303):
    path = link.split("://", 1)[1].split("/", 1)[1]
    if status == 410:
        return app.get("/" + path, status=410)
    form = app.get("/" + path).forms[0]
    form["password"], form["repeat"] = password, password
    return form.submit(status=status)


def enrol(app, clock, password: str = PASSWORD) -> tuple[str, list[str]]:
    """Enrol the logged-in user: read the secret off the page, send the current code; the
    recovery codes shown once."""
    page = app.get("/console/account/two-factor")
    secret = page.html.find(id="secret").text.replace(" ", "")
    assert page.html.select_one("div.qr svg title"), "the QR code, drawn here"
    assert "otpauth" not in page.text.split("<svg")[0], "the address is in the QR code only"
    form = page.forms["enrol"]
    form["code"] = pyotp.TOTP(secret).at(clock())
    form.submit(status=303)
    shown = app.get("/console/account/two-factor")
    codes = [c.text for c in shown.html.select("ol.codes code")]
    assert len(codes) == 10 and not app.get("/console/account/two-factor").html.select("ol.codes code")
    return secret, codes


def code_login(app, code: str, status: int = 303):
    form = app.get("/console/login/code").forms[0]
    form["code"] = code
    return form.submit(status=status)


STAFF = "/console/settings/staff"


def staff_post(app, fields: dict, status: int = 303, slug: str = "clinic-a"):
    csrf = csrf_of(app.get(f"{STAFF}?clinic={slug}"))
    return app.post(STAFF, {"csrf_token": csrf, "clinic": slug, **fields}, status=status)
