"""New staff passwords (OWASP ASVS 2.1): at least 12 characters, not a common or guessable
one in English, Czech or Slovak, not built from the user's own e-mail or name nor from their
clinic's name, people or trade; the same rules in the CLI and the console
(`staff.passwords.check_new`), the refusal saying why in the user's language. Existing
passwords keep working: the rules apply to new ones."""

from __future__ import annotations

import pytest

from staff import passwords
from staff.passwords import MIN_LENGTH, TOO_COMMON, TOO_SHORT, WeakPassword, check_new, hash_password, verify


@pytest.mark.parametrize(
    "password, inputs, refusal",
    [
        ("x" * (MIN_LENGTH - 1), (), TOO_SHORT),
        ("Tr0ub4dor&3", (), TOO_SHORT),  # 11 characters, however odd
        ("password1234", (), TOO_COMMON),
        ("Password1234", (), TOO_COMMON),
        ("qwertyuiopasdf", (), TOO_COMMON),  # a keyboard walk
        ("123456789012", (), TOO_COMMON),
        ("iloveyou2024", (), TOO_COMMON),
        ("aaaaaaaaaaaaaaaa", (), TOO_COMMON),
        ("petr@example.cz", ("petr@example.cz", "Petr Novák"), TOO_COMMON),  # the user's own e-mail
        ("annanovakova", ("anna@example.cz", "Anna Nováková"), TOO_COMMON),  # their name, without diacritics
        ("nováková2024", ("anna@example.cz", "Anna Nováková"), TOO_COMMON),
    ],
)
def test_short_common_or_personal_passwords_are_refused(password, inputs, refusal):
    with pytest.raises(WeakPassword) as refused:
        check_new(password, inputs)
    assert refused.value.message == refusal and refused.value.code == "WEAK_PASSWORD"


@pytest.mark.parametrize(
    "password",
    [
        "correct horse battery staple",
        "modrá konvice na čaj",
        "Nemocnice na kraji 7",
        "x7#Kq!2vR$9mLp",
        "kůň-modrá-hora-7-sklenice",
        "zelený čaj s medem",
        "Tramvaj jede do Bráníka",
    ],
)
def test_long_or_random_passwords_are_accepted(password):
    check_new(password, ("anna@example.cz", "Anna Nováková"), CLINIC)


#: What the service knows of a clinic: its name, its staff's and its calendars' names.
CLINIC = ("Ordinace Zdravé srdce", "zdrave-srdce", "Petr Dvořák", "MUDr. Jana Horáková")


@pytest.mark.parametrize(
    "password, reason",
    [
        ("Heslo123456!", passwords.COMMON_PASSWORD),  # "heslo": Czech for "password"
        ("heslo1234567", passwords.COMMON_PASSWORD),
        ("Heslo2024heslo", passwords.COMMON_PASSWORD),
        ("katerina123456", passwords.COMMON_PASSWORD),
        ("Ordinace2024!", passwords.CLINIC),  # a word of the trade and a year
        ("Klinika12345678", passwords.CLINIC),
        ("Nemocnice2024", passwords.COMMON_WORD),  # a Czech word and a year
        ("Nemocnice2024", passwords.YEAR),
        ("ZdraveSrdce2024", passwords.CLINIC),  # the clinic's name
        ("OrdinaceZdraveSrdce", passwords.CLINIC),
        ("PetrDvorak1980", passwords.CLINIC),  # a colleague
        ("horakova.jana77", passwords.CLINIC),  # the doctor of a calendar
        ("Slniecko123456", passwords.COMMON_WORD),  # Slovak
        ("Svobodova1234!", passwords.NAME),  # a common Czech surname
        ("annanovakova", passwords.PERSONAL),
        ("aaaaaaaaaaaaaaaa", passwords.PATTERN),
        ("zxcvbnm,./asdfghjkl", passwords.PATTERN),
    ],
)
def test_czech_and_slovak_words_names_and_the_clinics_own_words_are_refused_with_why(password, reason):
    with pytest.raises(WeakPassword) as refused:
        check_new(password, ("anna@example.cz", "Anna Nováková"), CLINIC)
    assert refused.value.message == TOO_COMMON and reason in refused.value.reasons, refused.value.reasons


def test_the_czech_lists_are_what_the_tool_builds_from_the_pinned_packages():
    """staff/password_words/ is tools/password_words.py's output from zxcvbn-ts's Czech pack
    (tests/clients/package.json) and wordfreq's Slovak list (requirements-dev.txt)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run(
        [sys.executable, "tools/password_words.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "current", done.stdout + done.stderr
    lists = {path.stem: path.read_text("utf-8").splitlines() for path in passwords.WORDS.glob("*.txt")}
    assert set(lists) == {"cs_passwords", "cs_words", "cs_first_names", "cs_last_names", "sk_words"}
    assert "heslo" in lists["cs_passwords"] and lists["cs_words"].index("heslo") < 10_000
    assert {"jiří", "jiri"} <= set(lists["cs_first_names"]) and "nováková" in lists["cs_last_names"]
    assert "nemocnica" in lists["sk_words"]


def test_a_long_password_is_judged_by_its_beginning():
    check_new("modrá konvice na čaj " * 40)  # 840 characters: zxcvbn itself stops at 72
    with pytest.raises(WeakPassword):
        check_new("a" * 200)


def test_an_old_shorter_password_still_logs_in():
    """The rules are for new passwords: a stored hash of a 10-character one verifies as before."""
    assert verify(hash_password("ten chars!"), "ten chars!")


def test_the_cli_applies_the_same_rules():
    """`manage.py user hash-password` (and create, reset-password) refuse what the console refuses."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    def hashed(password: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", "user", "hash-password", "--password-stdin"],
            cwd=ROOT,
            input=password + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "DATABASE_URL": "sqlite:///:memory:"},
        )

    refused = hashed("password1234")
    assert refused.returncode == 2 and TOO_COMMON in refused.stderr and not refused.stdout
    assert passwords.COMMON_PASSWORD in refused.stderr, "the reason too"
    trade = hashed("Ordinace2024!")
    assert trade.returncode == 2 and passwords.CLINIC in trade.stderr
    accepted = hashed("correct horse battery staple")
    assert accepted.returncode == 0, accepted.stderr
    assert verify(accepted.stdout.strip(), "correct horse battery staple")


def test_the_service_hashes_with_argon2id_at_rfc_9106s_low_memory_profile():
    """The test process hashes at the lowest cost (tests/conftest.py); the service's own
    hasher is argon2-cffi's default, RFC 9106's second recommendation: 3 passes over 64 MiB."""
    from argon2 import Type, extract_parameters

    from tests.conftest import PRODUCTION_PASSWORD_HASHER

    parameters = extract_parameters(PRODUCTION_PASSWORD_HASHER.hash("correct horse battery staple"))
    assert (parameters.type, parameters.time_cost, parameters.memory_cost, parameters.parallelism) == (
        Type.ID,
        3,
        65536,
        4,
    )


def test_the_console_says_why_in_czech_and_in_english(app):
    """A user changing their password at a clinic called "Ordinace Zdravé srdce" is told the
    password holds the clinic's name, in their language; their new password works."""
    from models import Clinic, StaffMembership, StaffUser
    from plumbing.database import db
    from tests.support import clinic, load, organization

    load(organization(clinic("zdrave-srdce", name="Ordinace Zdravé srdce")))
    with db.connection_context():
        user = StaffUser.create(
            email="eva@example.cz", name="Eva Malá", password_hash=hash_password("stará hesla nejsou")
        )
        StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == "zdrave-srdce"), role="staff")
    login = next(f for f in app.get("/console/login").forms.values() if "password" in f.fields)
    login["email"], login["password"] = "eva@example.cz", "stará hesla nejsou"
    login.submit(status=303)

    def change(new: str, status: int):
        form = next(f for f in app.get("/console/account").forms.values() if "current" in f.fields)
        form["current"], form["new"], form["repeat"] = "stará hesla nejsou", new, new
        return form.submit(status=status)

    refused = " ".join(change("ZdraveSrdce2024", 400).html.find(role="alert").get_text().split())
    assert "Toto heslo je příliš běžné" in refused and "Obsahuje název kliniky" in refused, refused
    assert "Obsahuje letopočet nebo datum." in refused
    with db.connection_context():
        StaffUser.update(language="en").where(StaffUser.id == user.id).execute()
    refused = " ".join(change("Heslo123456!", 400).html.find(role="alert").get_text().split())
    assert "This password is too common" in refused and passwords.COMMON_PASSWORD in refused, refused
    change("kůň-modrá-hora-7-sklenice", 303)
