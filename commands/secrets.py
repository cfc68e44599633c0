"""`reencrypt`: every stored secret moved to the current SECRET_KEY, so that the keys in
SECRET_KEY_FALLBACKS can be retired (docs/operations.md, Secrets)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import peewee as pw

from config import Config
from models import Clinic, StaffUser, WebhookEndpoint
from plumbing.crypto import InvalidToken, KeyRing
from plumbing.database import db

#: The columns holding secrets encrypted with the key ring: (what, model, its key, column).
ENCRYPTED = (
    ("platform password(s)", Clinic, Clinic.id, Clinic.platform_password_encrypted),
    ("two-factor secret(s)", StaffUser, StaffUser.id, StaffUser.totp_secret_encrypted),
    ("webhook signing secret(s)", WebhookEndpoint, WebhookEndpoint.id, WebhookEndpoint.secret_encrypted),
    (
        "webhook signing secret(s) in a rotation's overlap",
        WebhookEndpoint,
        WebhookEndpoint.id,
        WebhookEndpoint.previous_secret_encrypted,
    ),
)


@dataclass
class Tally:
    current: int = 0  # already under SECRET_KEY
    moved: int = 0  # re-encrypted (or, with --check, to be)
    unreadable: int = 0  # under no key of the ring


def reencrypt_column(model: type[pw.Model], key: pw.Field, column: pw.Field, ring: KeyRing, *, write: bool) -> Tally:
    """Re-encrypt `column` of every row under the ring's current key; each row by a
    compare-and-set UPDATE, so a change made meanwhile (a new password onboarded) is never
    overwritten with the old one."""
    tally = Tally()
    for row in model.select(key, column).where(column.is_null(False)):
        row_id, sealed = getattr(row, key.name), getattr(row, column.name)
        if ring.is_current(sealed):
            tally.current += 1
            continue
        try:
            fresh = ring.rotate(sealed)
        except InvalidToken:
            tally.unreadable += 1
            continue
        tally.moved += 1
        if write:
            model.update({column: fresh}).where((key == row_id) & (column == sealed)).execute()
    return tally


def cmd_reencrypt(config: Config, args: argparse.Namespace) -> int:
    """Move every stored secret to SECRET_KEY; with --check only count. Exit status 0 when
    nothing needs a fallback key any more (1 otherwise), so a script can retire them."""
    ring = config.secret_keys
    waiting = unreadable = 0
    for what, model, key, column in ENCRYPTED:
        with db.atomic():
            tally = reencrypt_column(model, key, column, ring, write=not args.check)
        verb = "to re-encrypt" if args.check else "re-encrypted"
        print(
            f"{what}: {tally.moved} {verb}, {tally.current} already under SECRET_KEY, "
            f"{tally.unreadable} under no key of SECRET_KEY and SECRET_KEY_FALLBACKS",
            file=sys.stderr,
        )
        waiting += tally.moved if args.check else 0
        unreadable += tally.unreadable
    if waiting:
        print(f"{waiting} secret(s) still need a fallback key: run manage.py reencrypt", file=sys.stderr)
    if unreadable:
        print(
            f"{unreadable} secret(s) are under no key of the ring: set them again (a clinic's switchboard "
            "password: its onboarding file; a two-factor secret: manage.py user reset-2fa)",
            file=sys.stderr,
        )
    if waiting or unreadable:
        return 1
    print("every stored secret is under SECRET_KEY: SECRET_KEY_FALLBACKS may be retired", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    reencrypt = sub.add_parser(
        "reencrypt",
        help="re-encrypt the stored secrets (platform passwords, two-factor secrets) under SECRET_KEY, "
        "so that SECRET_KEY_FALLBACKS can be retired",
    )
    reencrypt.add_argument("--check", action="store_true", help="only count what still needs a fallback key")
    reencrypt.set_defaults(func=cmd_reencrypt, needs_secret=True)
