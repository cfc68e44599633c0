"""`user create|reset-password|hash-password|disable|reset-2fa`: staff console users."""

from __future__ import annotations

import argparse
import sys

from commands.cli import actor, named_clinics
from config import Config
from models import AuditEvent, Clinic, StaffMembership, StaffUser
from plumbing.clock import utc_now
from plumbing.database import db


def _read_password(*user_inputs: str, clinics: list[Clinic] | None = None) -> str | None:
    """The password from the first line of stdin (never an argument: the process list and the
    shell history would show it); None, with the reasons on stderr, when the password rules
    (`staff.passwords.check_new`, the console's too) refuse it. `clinics`: the user's, whose
    words the password must not be built from."""
    from staff.accounts import clinic_words
    from staff.passwords import WeakPassword, check_new

    password = sys.stdin.readline().rstrip("\r\n")
    try:
        check_new(password, user_inputs, clinic_words(clinics or []))
    except WeakPassword as exc:
        print(f"error: the password on stdin is refused: {exc.words()}", file=sys.stderr)
        return None
    return password


def cmd_user_create(config: Config, args: argparse.Namespace) -> int:
    from staff.passwords import hash_password

    slugs = list(dict.fromkeys(args.clinic))
    clinics = named_clinics(slugs)
    if clinics is None:
        return 2
    email = StaffUser.normal_email(args.email)
    if "@" not in email:
        print("error: not an e-mail address", file=sys.stderr)
        return 2
    if StaffUser.by_email(email):
        print("error: a user with this e-mail address exists already", file=sys.stderr)
        return 2
    password = _read_password(email, args.name, clinics=clinics)
    if password is None:
        return 2
    with db.atomic():
        user = StaffUser.create(
            email=email, name=args.name, password_hash=hash_password(password), language=args.language
        )
        for clinic in clinics:
            StaffMembership.create(user=user, clinic=clinic, role=args.role)
            AuditEvent.record(actor(), clinic, "staff_user.create", user, {"role": args.role})
    print(f"user {user.id} created for {', '.join(slugs)} ({args.role})", file=sys.stderr)
    return 0


def _existing_user(email: str) -> StaffUser | None:
    user = StaffUser.by_email(email)
    if user is None:
        print("error: no such user", file=sys.stderr)
    return user


def cmd_user_reset_password(config: Config, args: argparse.Namespace) -> int:
    from staff import sessions
    from staff.passwords import hash_password

    user = _existing_user(args.email)
    if user is None:
        return 2
    password = _read_password(user.email, user.name, clinics=user.clinics())
    if password is None:
        return 2
    with db.atomic():
        StaffUser.update(password_hash=hash_password(password)).where(StaffUser.id == user.id).execute()
        ended = sessions.end_all(user)  # whoever knew the old password is logged out
        AuditEvent.record(actor(), None, "staff_user.reset_password", user, {"sessionsEnded": ended})
    print(f"password of user {user.id} reset; {ended} session(s) ended", file=sys.stderr)
    return 0


def cmd_user_hash_password(config: Config, args: argparse.Namespace) -> int:
    from staff.passwords import hash_password

    password = _read_password()
    if password is None:
        return 2
    print(hash_password(password))
    return 0


def cmd_user_disable(config: Config, args: argparse.Namespace) -> int:
    from staff import sessions

    user = _existing_user(args.email)
    if user is None:
        return 2
    with db.atomic():
        if user.disabled_at is None:
            StaffUser.update(disabled_at=utc_now()).where(StaffUser.id == user.id).execute()
            AuditEvent.record(actor(), None, "staff_user.disable", user)
        ended = sessions.end_all(user)
    print(f"user {user.id} disabled; {ended} session(s) ended", file=sys.stderr)
    return 0


def cmd_user_reset_2fa(config: Config, args: argparse.Namespace) -> int:
    """Clear a user's two-factor login (a lost phone and lost recovery codes): the secret and
    the recovery codes go, the user's sessions end; they enrol again at their next login if a
    clinic requires it. Audited in each of the user's clinics."""
    from staff import two_factor

    user = _existing_user(args.email)
    if user is None:
        return 2
    was_on = two_factor.reset(user, actor())
    state = "cleared" if was_on else "was not on (any enrolment in progress cleared)"
    print(f"two-factor login of user {user.id} {state}; the user's sessions ended", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    user = sub.add_parser("user", help="staff console users").add_subparsers(dest="user_command", required=True)
    ucreate = user.add_parser("create", help="create a staff user; the password is read from stdin")
    ucreate.add_argument("--clinic", action="append", required=True, metavar="SLUG")
    ucreate.add_argument("--email", required=True)
    ucreate.add_argument("--name", required=True)
    ucreate.add_argument("--role", required=True, choices=StaffMembership.ROLES)
    ucreate.add_argument("--language", default="cs", choices=StaffUser.LANGUAGES)
    ucreate.add_argument("--password-stdin", action="store_true", required=True)
    ucreate.set_defaults(func=cmd_user_create)
    ureset = user.add_parser("reset-password", help="set a new password (from stdin); ends the user's sessions")
    ureset.add_argument("--email", required=True)
    ureset.add_argument("--password-stdin", action="store_true", required=True)
    ureset.set_defaults(func=cmd_user_reset_password)
    uhash = user.add_parser(
        "hash-password",
        help="print the Argon2id hash of the password on stdin, for an onboarding file's users[].passwordHash",
    )
    uhash.add_argument("--password-stdin", action="store_true", required=True)
    uhash.set_defaults(func=cmd_user_hash_password, needs_db=False)
    udisable = user.add_parser("disable", help="refuse the user's logins and end their sessions")
    udisable.add_argument("--email", required=True)
    udisable.set_defaults(func=cmd_user_disable)
    ureset2fa = user.add_parser(
        "reset-2fa", help="clear the user's two-factor login (lost phone and codes); ends their sessions"
    )
    ureset2fa.add_argument("--email", required=True)
    ureset2fa.set_defaults(func=cmd_user_reset_2fa)
