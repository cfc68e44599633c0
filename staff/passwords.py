"""Staff passwords: Argon2id (argon2-cffi's defaults, RFC 9106's low-memory profile), and
the rules a new password must meet, the same in the console and the CLI (OWASP ASVS 2.1:
at least 12 characters, any characters, no composition rules, not a common or guessable
password).

"Common or guessable" is zxcvbn's judgement (Dropbox's estimator, its Python port): it
matches the password against lists of the most common passwords, words and names,
keyboard walks, dates, years and repeats, and against what the service knows of the user
(their e-mail and name) and of their clinic (its name, its staff's and its calendars'
names, the words of its trade), and splits it into the pieces an attacker guesses
cheapest. A password whose pieces take under 10^8 guesses together (each piece's guesses
multiplied, times the orders the pieces could come in) is refused, with the reasons found.
zxcvbn's own score adds 10^4 per piece beyond the first to that, so any three pieces
passed its score 3 ("safely unguessable": 10^8): `Heslo123456!` (a Czech common password, a
sequence, a sign) did; its `_exclude_additive` leaves that out. Its English lists ship in the
package; the Czech and Slovak ones (words, first names, surnames, the common passwords
of Czech and Slovak speakers) are staff/password_words/, built from zxcvbn-ts's Czech
language pack and wordfreq's Slovak list by tools/password_words.py. No network.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher, extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError
from zxcvbn import matching, scoring

from plumbing.errors import Invalid

_hasher = PasswordHasher()

MIN_LENGTH = 12
MAX_LENGTH = 1024  # Argon2 takes any length; a bound keeps a login form cheap to refuse
# The guesses a new password's pieces must take at least: zxcvbn's "safely unguessable:
# moderate protection from offline slow-hash attacks" (its score 3).
MIN_GUESSES = 10**8
WORDS = Path(__file__).resolve().parent / "password_words"
#: The words of a clinic's trade: no password of its staff is built from them.
TRADE_WORDS = ("ordinace", "klinika", "ambulance")
# zxcvbn's cost grows with the length: the first characters decide (it refuses over 72).
_JUDGED = 72
# Every year a person might type, from the years to come down: the Python port of zxcvbn
# knows years up to 2019 only.
_YEARS = [str(year) for year in range(2049, 1929, -1)]

#: Why a new password is refused, in English (the console translates these).
TOO_SHORT = "The password must be at least 12 characters long."
TOO_LONG = "The password must be at most 1024 characters long."
TOO_COMMON = "This password is too common or too easy to guess; choose a longer one, for example a few unrelated words."
#: What zxcvbn found the password made of, each said after TOO_COMMON (most telling first).
PERSONAL = "It contains your name or e-mail address."
CLINIC = "It contains the clinic's name, a colleague's name or a word of the trade such as ordinace or klinika."
COMMON_PASSWORD = "It is one of the most common passwords, or made from one."
NAME = "It is made from a common first name or surname."
COMMON_WORD = "It is made from a common word and a few more characters."
YEAR = "It contains a year or a date."
PATTERN = "It contains a keyboard row, a repetition or a sequence such as qwerty, aaaa or 1234."
REASONS = (PERSONAL, CLINIC, COMMON_PASSWORD, NAME, COMMON_WORD, YEAR, PATTERN)
_BY_LIST = {
    "passwords": COMMON_PASSWORD,
    "cs_passwords": COMMON_PASSWORD,
    "female_names": NAME,
    "male_names": NAME,
    "surnames": NAME,
    "cs_first_names": NAME,
    "cs_last_names": NAME,
    "years": YEAR,
}
_BY_PATTERN = {"date": YEAR, "regex": YEAR, "spatial": PATTERN, "repeat": PATTERN, "sequence": PATTERN}


class WeakPassword(Invalid):
    """A new password that breaks the rules: the message is one of the constants above,
    and `reasons` (for TOO_COMMON) what the password was found made of."""

    @property
    def reasons(self) -> list[str]:
        return list(self.data.get("reasons", ()))

    def words(self, gettext: Callable[[str], str] = str) -> str:
        """The refusal and its reasons, each through `gettext` (the console's language)."""
        return " ".join(gettext(text) for text in (self.message, *self.reasons))


def _ascii(text: str) -> str:
    """`text` without its diacritics ("Veselý" -> "Vesely"): people type their names both ways."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def _variants(texts: Iterable[str]) -> list[str]:
    """Each text, its words (an e-mail split at @ and dots), the words run together, each
    with and without diacritics, in lower case."""
    out: list[str] = []
    for text in texts:
        parts = text.replace("@", " ").replace(".", " ").replace("-", " ").split()
        for part in (text, "".join(parts), *parts):
            out += [part.lower(), _ascii(part).lower()]
    return [word for word in dict.fromkeys(out) if len(word) >= 3]


@functools.cache
def _czech_and_slovak() -> None:
    """zxcvbn's own dictionaries, and the Czech and Slovak lists and the years besides:
    read once, at the first check (a process that never judges a password never reads them)."""
    lists = {path.stem: path.read_text("utf-8").splitlines() for path in sorted(WORDS.glob("*.txt"))}
    matching.add_frequency_lists({**lists, "years": _YEARS})


def check_new(password: str, user_inputs: Iterable[str] = (), clinic_words: Iterable[str] = ()) -> None:
    """Raise `WeakPassword` unless `password` may be set. `user_inputs`: what the service
    knows of the user (e-mail, name); `clinic_words`: of their clinic (its name, its staff's
    and calendars' names; the trade's words are always added). The password must not be
    built from either."""
    if len(password) < MIN_LENGTH:
        raise WeakPassword(TOO_SHORT, code="WEAK_PASSWORD")
    if len(password) > MAX_LENGTH:
        raise WeakPassword(TOO_LONG, code="WEAK_PASSWORD")
    _czech_and_slovak()
    personal = _variants(user_inputs)
    clinic = [word for word in _variants([*clinic_words, *TRADE_WORDS]) if word not in personal]
    judged = _judged(password[:_JUDGED], [*personal, *clinic])
    if judged["guesses"] < MIN_GUESSES:
        reasons = _reasons(judged["sequence"], set(personal), set(clinic))
        raise WeakPassword(TOO_COMMON, code="WEAK_PASSWORD", reasons=reasons)


def _judged(password: str, user_inputs: list[str]) -> dict[str, Any]:
    """zxcvbn's matches of `password` (its `zxcvbn()`'s, with `user_inputs`), and the pieces
    that take the fewest guesses together without its floor for many pieces (its own
    option for that, `_exclude_additive`): `guesses` and `sequence`."""
    matching.RANKED_DICTIONARIES["user_inputs"] = matching.build_ranked_dict(user_inputs)
    matches = matching.omnimatch(password, matching.RANKED_DICTIONARIES)
    return scoring.most_guessable_match_sequence(password, matches, _exclude_additive=True)


def _reasons(sequence: list[dict], personal: set[str], clinic: set[str]) -> list[str]:
    """What the password was found made of, in `REASONS`' order. A piece that is a word of
    the user's or the clinic's says so, whichever list zxcvbn found it in first (a
    colleague's surname is a common surname too)."""
    found = set()
    for match in sequence:
        if match["pattern"] == "dictionary":
            word = match["matched_word"]
            if word in personal:
                found.add(PERSONAL)
            elif word in clinic:
                found.add(CLINIC)
            else:
                found.add(_BY_LIST.get(match["dictionary_name"], COMMON_WORD))
        elif match["pattern"] in _BY_PATTERN:
            found.add(_BY_PATTERN[match["pattern"]])
    return [reason for reason in REASONS if reason in found]


def hash_password(password: str) -> str:
    return _hasher.hash(password)


@functools.cache
def _dummy_hash(hasher: PasswordHasher) -> str:
    """Checked against when the e-mail is unknown, so an unknown address costs the same
    hashing time as a wrong password: the timing does not tell which e-mails have accounts.
    Made by the hasher in use (its parameters) when a web process is built (`warm_up`),
    not at import: every command importing the app would spend an Argon2 hash on it."""
    return hasher.hash("not-a-password: timing equaliser for unknown e-mails")


def warm_up() -> None:
    """Make the dummy hash now, so that not even the first unknown e-mail a process is
    asked about takes longer than a wrong password."""
    _dummy_hash(_hasher)


#: The password hash of an account whose user has not chosen a password yet (added in the
#: console, waiting for their set-password link): no password matches it.
NO_PASSWORD = ""


def verify(password_hash: str | None, password: str) -> bool:
    """Whether `password` matches; with no hash (unknown user, or no password chosen yet) the
    dummy is checked, in the same time, and False returned."""
    try:
        ok = _hasher.verify(password_hash or _dummy_hash(_hasher), password)
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
