"""Staff passwords: Argon2id (argon2-cffi's defaults, RFC 9106's low-memory profile)."""

from __future__ import annotations

from argon2 import PasswordHasher, extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()
# Checked against when the e-mail is unknown, so an unknown address costs the same hashing
# time as a wrong password: the timing does not tell which e-mails have accounts.
_DUMMY_HASH = _hasher.hash("not-a-password: timing equaliser for unknown e-mails")

MIN_LENGTH = 10


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify(password_hash: str | None, password: str) -> bool:
    """Whether `password` matches; with no hash (unknown user) the dummy is checked and False returned."""
    try:
        ok = _hasher.verify(password_hash or _DUMMY_HASH, password)
    except (VerificationError, InvalidHashError):
        return False
    return ok and password_hash is not None


def readable_hash(text: str) -> bool:
    """Whether `text` is an Argon2id hash this service can verify against (onboarding files
    carry hashes only, never passwords)."""
    try:
        return extract_parameters(text).type.name == "ID"
    except InvalidHashError:
        return False
