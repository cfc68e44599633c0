"""Two-factor login: time-based one-time codes (TOTP, RFC 6238: 6 digits, 30-second steps,
SHA-1, what every authenticator app reads) through pyotp, and one-time recovery codes.

The secret is made on the server, kept encrypted with SECRET_KEY (plumbing/crypto.py) and
shown once, as a QR code drawn here as SVG (segno: no request leaves the page) and as text.
A code is accepted within one step either side of now (a phone's clock a little off), and
only once: the step it was made for is remembered, and a code of that step or an earlier one
is refused (a code seen over someone's shoulder cannot be replayed). Recovery codes (ten,
80 random bits each) are stored as their SHA-256 and are good once.

Throttling of wrong codes is the console's (console/throttle.py, the same counters as wrong
passwords)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from datetime import datetime

import pyotp
import segno

from models import Actor, StaffRecoveryCode, StaffSession, StaffUser
from plumbing import crypto
from plumbing.clock import as_utc
from plumbing.crypto import Keys
from plumbing.database import db
from plumbing.errors import Conflict, Invalid
from staff import events, passwords

STEP_SECONDS = 30
DIGITS = 6
WINDOW = 1  # steps either side of now
RECOVERY_CODES = 10

#: Why a code is refused, in English (the console translates these).
WRONG_CODE = "The code is not right, or it was used already. Enter the current code from the app."
WRONG_PASSWORD = "The password is not right."
NOT_ENROLLING = "Start the set-up again: the secret expired."
ALREADY_ON = "Two-factor login is on already."


def _secret(user: StaffUser, secret_key: Keys) -> str | None:
    if not user.totp_secret_encrypted:
        return None
    try:
        return crypto.decrypt(user.totp_secret_encrypted, secret_key)
    except crypto.InvalidToken:  # written under another SECRET_KEY: as if none
        return None


def enrolment_secret(user: StaffUser, secret_key: Keys) -> str:
    """The secret the user is enrolling with: the one made for this enrolment if there is
    one (a reload shows the same QR code), else a new one (160 bits), stored encrypted."""
    if user.two_factor:
        raise Conflict(ALREADY_ON, code="TWO_FACTOR_ON")
    secret = _secret(user, secret_key)
    if secret is None:
        secret = pyotp.random_base32(32)
        StaffUser.update(totp_secret_encrypted=crypto.encrypt(secret, secret_key)).where(
            StaffUser.id == user.id
        ).execute()
        user.totp_secret_encrypted = StaffUser.get_by_id(user.id).totp_secret_encrypted
    return secret


def provisioning_uri(user: StaffUser, secret: str, issuer: str) -> str:
    """The otpauth:// address an authenticator app reads from the QR code."""
    return pyotp.TOTP(secret, digits=DIGITS, interval=STEP_SECONDS).provisioning_uri(
        name=user.email, issuer_name=issuer
    )


def qr_svg(uri: str, title: str) -> str:
    """The QR code of `uri` as an inline SVG element (dark on white, with a quiet zone)."""
    return segno.make(uri, error="m").svg_inline(scale=5, border=4, dark="#000", light="#fff", title=title)


def grouped(secret: str) -> str:
    """The secret as people type it: groups of four."""
    return " ".join(secret[i : i + 4] for i in range(0, len(secret), 4))


def _normal_code(code: str) -> str:
    return "".join(ch for ch in code if not ch.isspace())


def _step_of(secret: str, code: str, now: datetime) -> int | None:
    """The time step `code` was made for, within the window around `now`; None if none.
    Every candidate is compared, in constant time, whichever matches."""
    totp = pyotp.TOTP(secret, digits=DIGITS, interval=STEP_SECONDS)
    current = int(as_utc(now).timestamp()) // STEP_SECONDS
    code = _normal_code(code)
    if len(code) != DIGITS or not code.isascii() or not code.isdigit():
        return None
    found = None
    for step in range(current - WINDOW, current + WINDOW + 1):
        if hmac.compare_digest(totp.generate_otp(step).encode(), code.encode()):
            found = step
    return found


def _accept(user: StaffUser, secret: str, code: str, now: datetime) -> bool:
    """Whether `code` is good now and not used before; marks its step used (one UPDATE, so
    two processes cannot both accept the same code)."""
    step = _step_of(secret, code, now)
    if step is None:
        return False
    used = (
        StaffUser.update(totp_last_step=step)
        .where((StaffUser.id == user.id) & (StaffUser.totp_last_step.is_null() | (StaffUser.totp_last_step < step)))
        .execute()
    )
    return used == 1


def check_code(user: StaffUser, code: str, now: datetime, secret_key: Keys) -> bool:
    """A login's second factor: the user's current code (once), or False."""
    secret = _secret(user, secret_key) if user.two_factor else None
    return secret is not None and _accept(user, secret, code, now)


def _recovery_hash(code: str) -> str:
    return hashlib.sha256(code.replace("-", "").replace(" ", "").lower().encode()).hexdigest()


def _new_recovery_codes(user: StaffUser) -> list[str]:
    StaffRecoveryCode.delete().where(StaffRecoveryCode.user == user).execute()
    codes = []
    for _ in range(RECOVERY_CODES):
        raw = base64.b32encode(secrets.token_bytes(10)).decode().lower()  # 16 characters
        codes.append("-".join(raw[i : i + 4] for i in range(0, 16, 4)))
    StaffRecoveryCode.insert_many([{"user": user.id, "code_hash": _recovery_hash(c)} for c in codes]).execute()
    return codes


def use_recovery_code(user: StaffUser, code: str, now: datetime) -> int | None:
    """A login's second factor by a recovery code: marks it used and returns how many are
    left; None when it is not one of the user's unused codes. Looked up by its hash."""
    if not user.two_factor or len(code) > 64:
        return None
    used = (
        StaffRecoveryCode.update(used_at=as_utc(now))
        .where(
            (StaffRecoveryCode.user == user)
            & (StaffRecoveryCode.code_hash == _recovery_hash(code))
            & StaffRecoveryCode.used_at.is_null()
        )
        .execute()
    )
    if used != 1:
        return None
    left = recovery_codes_left(user)
    events.record(Actor.staff(user), user, "staff_user.recovery_code_used", {"left": left}, now=now)
    return left


def recovery_codes_left(user: StaffUser) -> int:
    return (
        StaffRecoveryCode.select().where((StaffRecoveryCode.user == user) & StaffRecoveryCode.used_at.is_null()).count()
    )


def enable(user: StaffUser, code: str, now: datetime, secret_key: Keys) -> list[str]:
    """Finish enrolment with the first code the app shows; returns the recovery codes (to
    show once). Raises `Invalid` (code WRONG_CODE) when the code is not right."""
    if user.two_factor:
        raise Conflict(ALREADY_ON, code="TWO_FACTOR_ON")
    secret = _secret(user, secret_key)
    if secret is None:
        raise Invalid(NOT_ENROLLING, code="WRONG_CODE")
    with db.atomic():
        if not _accept(user, secret, code, now):
            raise Invalid(WRONG_CODE, code="WRONG_CODE")
        StaffUser.update(totp_enabled_at=as_utc(now)).where(StaffUser.id == user.id).execute()
        codes = _new_recovery_codes(user)
        events.record(Actor.staff(user), user, "staff_user.two_factor_enable", now=now)
    return codes


def new_recovery_codes(user: StaffUser, password: str, now: datetime) -> list[str]:
    """Replace the user's recovery codes (the old ones stop working); the password confirms it."""
    if not passwords.verify(user.password_hash, password):
        raise Invalid(WRONG_PASSWORD, code="WRONG_PASSWORD")
    with db.atomic():
        codes = _new_recovery_codes(user)
        events.record(Actor.staff(user), user, "staff_user.recovery_codes_new", now=now)
    return codes


def _clear(user: StaffUser) -> None:
    StaffUser.update(totp_secret_encrypted=None, totp_enabled_at=None, totp_last_step=None).where(
        StaffUser.id == user.id
    ).execute()
    StaffRecoveryCode.delete().where(StaffRecoveryCode.user == user).execute()


def disable(user: StaffUser, password: str, code: str, now: datetime, secret_key: Keys) -> None:
    """Turn two-factor off: the password and a current code (or a recovery code) confirm it."""
    if not passwords.verify(user.password_hash, password):
        raise Invalid(WRONG_PASSWORD, code="WRONG_PASSWORD")
    with db.atomic():
        if not check_code(user, code, now, secret_key) and use_recovery_code(user, code, now) is None:
            raise Invalid(WRONG_CODE, code="WRONG_CODE")
        _clear(user)
        events.record(Actor.staff(user), user, "staff_user.two_factor_disable", now=now)


def reset(user: StaffUser, actor: Actor, now: datetime) -> bool:
    """The operator clears a user's two-factor (a lost phone and lost codes); the user
    enrols again at the next login if a clinic requires it. Ends the user's sessions.
    Returns whether it was on."""
    was_on = user.two_factor
    with db.atomic():
        _clear(user)
        ended = StaffSession.delete().where(StaffSession.user == user).execute()
        events.record(actor, user, "staff_user.two_factor_reset", {"wasOn": was_on, "sessionsEnded": ended}, now=now)
    return was_on
