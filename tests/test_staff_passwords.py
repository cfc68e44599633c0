"""New staff passwords (OWASP ASVS 2.1): at least 12 characters, not a common or guessable
one, not built from the user's own e-mail or name; the same rules in the CLI and the console
(`staff.passwords.check_new`). Existing passwords keep working: the rules apply to new ones."""

from __future__ import annotations

import pytest

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
    "password", ["correct horse battery staple", "modrá konvice na čaj", "Nemocnice na kraji 7", "x7#Kq!2vR$9mLp"]
)
def test_long_or_random_passwords_are_accepted(password):
    check_new(password, ("anna@example.cz", "Anna Nováková"))


def test_an_old_shorter_password_still_logs_in():
    """The rules are for new passwords: a stored hash of a 10-character one verifies as before."""
    assert verify(hash_password("ten chars!"), "ten chars!")


def test_the_cli_applies_the_same_rules():
    """`manage.py user hash-password` (and create, reset-password) refuse what the console refuses."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    def hashed(password: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", "user", "hash-password", "--password-stdin"], cwd=ROOT,
                              input=password + "\n", capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "DATABASE_URL": "sqlite:///:memory:"})

    refused = hashed("password1234")
    assert refused.returncode == 2 and TOO_COMMON in refused.stderr and not refused.stdout
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
        Type.ID, 3, 65536, 4)
