"""`webhook add|list|rotate|disable|enable|remove`: a clinic's webhook endpoints (the console's
settings do the same; webhooks/endpoints.py holds the rules). A new or rotated signing
secret is printed once, on stdout; only its encryption is kept."""

from __future__ import annotations

import argparse
import sys

from commands.cli import actor, named_clinics
from config import Config
from models import Clinic, Outbox, WebhookEndpoint
from models.change_events import TYPES, group_key
from plumbing.clock import iso_utc
from plumbing.errors import Invalid, NotFound


def _clinic(slug: str) -> Clinic | None:
    clinics = named_clinics([slug])
    return clinics[0] if clinics else None


def cmd_webhook_add(config: Config, args: argparse.Namespace) -> int:
    from webhooks import endpoints

    clinic = _clinic(args.clinic)
    if clinic is None:
        return 2
    try:
        endpoint, secret = endpoints.add(
            clinic, args.url, args.event or [], config, actor(), config.clock(), description=args.description or ""
        )
    except Invalid as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"endpoint {endpoint.id} added; its signing secret (shown once):", file=sys.stderr)
    print(secret)
    return 0


def cmd_webhook_list(config: Config, args: argparse.Namespace) -> int:
    clinic = _clinic(args.clinic)
    if clinic is None:
        return 2
    for e in WebhookEndpoint.select().where(WebhookEndpoint.clinic == clinic).order_by(WebhookEndpoint.created_at):
        pending = Outbox.select().where((Outbox.group_key == group_key(e.id)) & (Outbox.state == "pending")).count()
        state = f"disabled ({e.disabled_reason})" if e.disabled_at else ("failing" if e.failures else "enabled")
        types = ",".join(e.types) or "all"
        print(f"{e.id}  {state:<20} {pending:>5} pending  {types}  {e.url}  since {iso_utc(e.created_at)}")
    return 0


def _endpoint(config: Config, args: argparse.Namespace) -> WebhookEndpoint | None:
    from webhooks import endpoints

    clinic = _clinic(args.clinic)
    if clinic is None:
        return None
    try:
        return endpoints.of_clinic(clinic, args.endpoint_id)
    except NotFound:
        print(f"error: clinic {args.clinic} has no webhook endpoint {args.endpoint_id}", file=sys.stderr)
        return None


def cmd_webhook_rotate(config: Config, args: argparse.Namespace) -> int:
    from webhooks import endpoints

    endpoint = _endpoint(config, args)
    if endpoint is None:
        return 2
    secret = endpoints.rotate(endpoint, config, actor(), config.clock())
    print(f"new signing secret (shown once); the previous one signs too for {endpoints.OVERLAP}:", file=sys.stderr)
    print(secret)
    return 0


def cmd_webhook_switch(config: Config, args: argparse.Namespace) -> int:
    from webhooks import endpoints

    endpoint = _endpoint(config, args)
    if endpoint is None:
        return 2
    if args.webhook_command == "remove":
        endpoints.remove(endpoint, actor(), config.clock())
    else:
        endpoints.set_enabled(endpoint, args.webhook_command == "enable", actor(), config.clock())
    print(f"endpoint {endpoint.id}: {args.webhook_command}d", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    hook = sub.add_parser("webhook", help="a clinic's webhook endpoints").add_subparsers(
        dest="webhook_command", required=True
    )
    add = hook.add_parser("add", help="add an https endpoint; prints its signing secret once")
    add.add_argument("--clinic", required=True, metavar="SLUG")
    add.add_argument("--url", required=True)
    add.add_argument("--event", action="append", choices=TYPES, help="an event type it wants (default: all)")
    add.add_argument("--description")
    add.set_defaults(func=cmd_webhook_add)
    listing = hook.add_parser("list", help="the clinic's endpoints, their state and pending deliveries")
    listing.add_argument("--clinic", required=True, metavar="SLUG")
    listing.set_defaults(func=cmd_webhook_list)
    for name, func, text in (
        ("rotate", cmd_webhook_rotate, "a new signing secret; the previous one signs too for a day"),
        ("disable", cmd_webhook_switch, "stop delivering to the endpoint"),
        ("enable", cmd_webhook_switch, "deliver to the endpoint again"),
        ("remove", cmd_webhook_switch, "delete the endpoint"),
    ):
        one = hook.add_parser(name, help=text)
        one.add_argument("endpoint_id")
        one.add_argument("--clinic", required=True, metavar="SLUG")
        one.set_defaults(func=func)
