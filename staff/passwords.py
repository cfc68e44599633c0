"""Staff passwords: Argon2id (argon2-cffi's defaults, RFC 9106's low-memory profile), and
the rules a new password must meet, the same in the console and the CLI (OWASP ASVS 2.1:
at least 12 characters, any characters, no composition rules, not a common or guessable
password).

"Common or guessable" is zxcvbn's judgement (Dropbox's estimator, its Python port): it
matches the password against its lists of the most common passwords, names and words,
keyboard walks, dates and repeats, and against what the service knows of the user (their
e-mail and name); a password it estimates guessable in under 10^10 tries (its score below
3) is refused. No network: the lists ship in the package.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from argon2 import PasswordHasher, extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError
from zxcvbn import zxcvbn

from plumbing.errors import Invalid

_hasher = PasswordHasher()
# Checked against when the e-mail is unknown, so an unknown address costs the same hashing
# time as a wrong password: the timing does not tell which e-mails have accounts.
_DUMMY_HASH = _hasher.hash("not-a-password: timing equaliser for unknown e-mails")

MIN_LENGTH = 12
MAX_LENGTH = 1024  # Argon2 takes any length; a bound keeps a login form cheap to refuse
MIN_SCORE = 3  # zxcvbn: 3 = "safely unguessable: moderate protection from offline slow-hash attacks"

#: Why a new password is refused, in English (the console translates these).
TOO_SHORT = "The password must be at least 12 characters long."
TOO_LONG = "The password must be at most 1024 characters long."
TOO_COMMON = "This password is too common or too easy to guess; choose a longer one, for example a few unrelated words."


class WeakPassword(Invalid):
    """A new password that breaks the rules; the message is one of the constants above."""


def _ascii(text: str) -> str:
    """`text` without its diacritics ("Veselý" -> "Vesely"): people type their names both ways."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def check_new(password: str, user_inputs: Iterable[str] = ()) -> None:
    """Raise `WeakPassword` unless `password` may be set. `user_inputs`: what the service
    knows of the user (e-mail, name), which the password must not be built from."""
    if len(password) < MIN_LENGTH:
        raise WeakPassword(TOO_SHORT, code="WEAK_PASSWORD")
    if len(password) > MAX_LENGTH:
        raise WeakPassword(TOO_LONG, code="WEAK_PASSWORD")
    words = [
        variant
        for text in user_inputs
        for part in (text, *text.replace("@", " ").replace(".", " ").split())
        for variant in {part, _ascii(part)}
    ]
    # zxcvbn's cost grows with the length; the first 100 characters decide the score.
    if zxcvbn(password[:100], user_inputs=words)["score"] < MIN_SCORE:
        raise WeakPassword(TOO_COMMON, code="WEAK_PASSWORD")


def hash_password(password: str) -> str:
    return _hasher.hash(password)


#: The password hash of an account whose user has not chosen a password yet (added in the
#: console, waiting for their set-password link): no password matches it.
NO_PASSWORD = ""


def verify(password_hash: str | None, password: str) -> bool:
    """Whether `password` matches; with no hash (unknown user, or no password chosen yet) the
    dummy is checked, in the same time, and False returned."""
    try:
        ok = _hasher.verify(password_hash or _DUMMY_HASH, password)
    except (VerificationError, InvalidHashError):
        return False
    return ok and bool(password_hash)


def readable_hash(text: str) -> bool:
    """Whether `text` is an Argon2id hash this service can verify against (onboarding files
    carry hashes only, never passwords)."""
    try:
        return extract_parameters(text).type.name == "ID"
    except InvalidHashError:
        return False
