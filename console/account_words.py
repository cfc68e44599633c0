"""What the console says about staff accounts: the refusals of staff/ in words (translated
where shown), a session's browser in a few words, and the set-password link's address."""

from __future__ import annotations

import re
from datetime import datetime
from gettext import NullTranslations

import falcon

from console import pages
from console.inbox import local_time
from console.rendering import N_
from models import StaffUser
from plumbing import catalogue
from plumbing.clock import as_utc
from plumbing.errors import DomainError
from plumbing.forwarded import is_secure
from staff.passwords import WeakPassword

# The refusals of staff.accounts, staff.two_factor and staff.passwords, as the catalogue
# has them (tests/test_console_staff.py holds this list to those modules' constants).
REFUSALS = (
    N_("Enter an e-mail address."),
    N_("Enter the user's name."),
    N_("Choose a role."),
    N_("This e-mail belongs to an account of another organization."),
    N_("This user works for the clinic already."),
    N_("The clinic needs at least one enabled administrator."),
    N_("You cannot disable your own account."),
    N_("No such user in this clinic."),
    N_("This link is no longer valid: it was used, it expired, or a newer one was made."),
    N_("The current password is not right."),
    N_("The two new passwords differ."),
    N_("No such session."),
    N_("The code is not right, or it was used already. Enter the current code from the app."),
    N_("The password is not right."),
    N_("Start the set-up again: the secret expired."),
    N_("Two-factor login is on already."),
    N_("The password must be at least 12 characters long."),
    N_("The password must be at most 1024 characters long."),
    N_("This password is too common or too easy to guess; choose a longer one, for example a few unrelated words."),
    # What a refused password was found made of (staff.passwords.REASONS).
    N_("It contains your name or e-mail address."),
    N_("It contains the clinic's name, a colleague's name or a word of the trade such as ordinace or klinika."),
    N_("It is one of the most common passwords, or made from one."),
    N_("It is made from a common first name or surname."),
    N_("It is made from a common word and a few more characters."),
    N_("It contains a year or a date."),
    N_("It contains a keyboard row, a repetition or a sequence such as qwerty, aaaa or 1234."),
)
ROLES = {"staff": N_("staff member"), "admin": N_("administrator"), "officer": N_("data-protection officer")}
ISSUER = "Clinic console"  # the name the authenticator app shows beside the account


def refusal(tr: NullTranslations, error: DomainError) -> str:
    """A refusal in the user's language (a weak password's with the reasons found)."""
    if isinstance(error, WeakPassword):
        return error.words(tr.gettext)
    return tr.gettext(error.message)


_BROWSERS = (("Edg/", "Edge"), ("OPR/", "Opera"), ("Firefox/", "Firefox"), ("Chrome/", "Chrome"), ("Safari/", "Safari"))
_SYSTEMS = (
    ("Android", "Android"),
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Windows", "Windows"),
    ("Mac OS X", "macOS"),
    ("CrOS", "ChromeOS"),
    ("Linux", "Linux"),
)


def browser(user_agent: str | None) -> str:
    """A session's browser as people name it ("Firefox, Windows"); the raw string when unknown."""
    text = user_agent or ""
    name = next((label for marker, label in _BROWSERS if marker in text), None)
    system = next((label for marker, label in _SYSTEMS if marker in text), None)
    if name is None and system is None:
        return re.sub(r"\s+", " ", text)[:60] or "?"
    return ", ".join(part for part in (name, system) if part)


def when(moment: datetime, user: StaffUser) -> str:
    """A stored time in the timezone of the user's first clinic (UTC if none), the user's way."""
    clinics = user.clinics()
    if clinics:
        return local_time(moment, clinics[0], user.language)
    return f"{as_utc(moment):%Y-%m-%d %H:%M} UTC"


def link_url(req: falcon.Request, trust_forwarded_proto: bool, token: str) -> str:
    """The set-password link as the browser reaches this service (the admin copies it)."""
    scheme = "https" if is_secure(req, trust_forwarded_proto) else "http"
    return f"{scheme}://{req.netloc}{pages.password_link(token)}"


def too_many_logins(tr: NullTranslations, seconds: int, language: str) -> str:
    """A login refused for failed attempts: when to try again, in whole minutes."""
    text, minutes = catalogue.plural(
        tr,
        "Too many failed logins. Try again in %(num)s minute.",
        "Too many failed logins. Try again in %(num)s minutes.",
        -(-seconds // 60),
        language,
    )
    return text % {"num": minutes}


def too_many_requests(tr: NullTranslations, seconds: int, language: str) -> str:
    """Password resets asked too often: when to try again, in whole minutes."""
    text, minutes = catalogue.plural(
        tr,
        "Too many requests. Try again in %(num)s minute.",
        "Too many requests. Try again in %(num)s minutes.",
        -(-seconds // 60),
        language,
    )
    return text % {"num": minutes}
