"""`token create|list|rotate|revoke`: personal access tokens, by the rules the console's
API keys page follows too (api_keys/rules.py)."""

from __future__ import annotations

import argparse
import sys
import uuid
from datetime import timedelta

from commands.cli import actor, named_clinics
from config import Config
from models import ApiToken
from plumbing.clock import as_utc, iso_utc


def cmd_token_create(config: Config, args: argparse.Namespace) -> int:
    from api_keys import rules

    slugs = list(dict.fromkeys(args.clinic))
    clinics = named_clinics(slugs)
    if clinics is None:
        return 2
    try:
        expires = None if args.never_expires else rules.lifetime(args.expires_in_days)
        token, text = rules.issue(
            actor(), args.name, clinics, args.scope, config.clock(), expires, never_expires=args.never_expires
        )
    except rules.KeyRuleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)  # the only thing on stdout: scripts capture it
    until = f"expires {iso_utc(token.expires_at)}" if token.expires_at else "NEVER expires (--never-expires)"
    print(
        f"token {token.id} created for {', '.join(slugs)} ({token.scopes}), {until}; it is shown only once",
        file=sys.stderr,
    )
    return 0


def cmd_token_list(config: Config, args: argparse.Namespace) -> int:
    from api_keys import rules

    for key in reversed(rules.keys_of(None, config.clock())):
        token = key.token
        expires = "never(--never-expires)" if key.never_expires else iso_utc(token.expires_at)
        print(
            "\t".join(
                [
                    str(token.id),
                    token.name,
                    ",".join(key.clinics),
                    token.scopes,
                    key.state + (" expiring-soon" if key.expiring_soon else ""),
                    f"expires={expires}",
                    f"last_used={iso_utc(token.last_used_at) or 'never'}",
                    f"created_by={token.created_by or '-'}",
                ]
            )
        )
    return 0


def _token(text: str) -> ApiToken | None:
    try:
        token = ApiToken.get_or_none(ApiToken.id == uuid.UUID(text))
    except ValueError:
        token = None
    if token is None:
        print("error: no such token", file=sys.stderr)
    return token


def cmd_token_rotate(config: Config, args: argparse.Namespace) -> int:
    from api_keys import rules

    token = _token(args.token_id)
    if token is None:
        return 2
    now = config.clock()
    until = as_utc(now) + timedelta(hours=args.old_valid_hours)
    try:
        new, text = rules.rotate(actor(), token, until, now, rules.lifetime(args.expires_in_days))
    except rules.KeyRuleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    print(
        f"token {new.id} replaces {token.id}, which works until {iso_utc(until)} at the latest; the new one "
        f"expires {iso_utc(new.expires_at)}; it is shown only once",
        file=sys.stderr,
    )
    return 0


def cmd_token_revoke(config: Config, args: argparse.Namespace) -> int:
    from api_keys import rules

    token = _token(args.token_id)
    if token is None:
        return 2
    rules.revoke(actor(), token, config.clock())  # other processes drop it within a second (row_cache.py)
    print(f"token {token.id} revoked", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    token = sub.add_parser("token", help="personal access tokens").add_subparsers(dest="token_command", required=True)
    create = token.add_parser("create", help="create a token; prints it once on stdout")
    create.add_argument("--name", required=True)
    create.add_argument("--clinic", action="append", required=True, metavar="SLUG")
    create.add_argument("--scope", action="append", required=True, choices=ApiToken.SCOPES)
    # An expiry is required (api_keys.rules): N days (at most 365), or --never-expires said out loud.
    expiry = create.add_mutually_exclusive_group(required=True)
    expiry.add_argument("--expires-in-days", type=int, metavar="N", help="1 to 365")
    expiry.add_argument("--never-expires", action="store_true", help="a key without expiry (the list shows it)")
    create.set_defaults(func=cmd_token_create)
    token.add_parser("list", help="list tokens (never their secrets)").set_defaults(func=cmd_token_list)
    rotate = token.add_parser("rotate", help="a new token with the same grants; prints it once on stdout")
    rotate.add_argument("token_id")
    rotate.add_argument(
        "--old-valid-hours",
        type=float,
        required=True,
        metavar="H",
        help="how long the old token keeps working (0 to 168)",
    )
    rotate.add_argument("--expires-in-days", type=int, metavar="N", help="the new token's expiry (default 90)")
    rotate.set_defaults(func=cmd_token_rotate)
    revoke = token.add_parser("revoke", help="revoke a token at once")
    revoke.add_argument("token_id")
    revoke.set_defaults(func=cmd_token_revoke)
