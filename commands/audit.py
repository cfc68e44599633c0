"""`audit`: the audit trail on the operator's terminal, newest first."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from commands.cli import visible
from config import Config
from models import AuditEvent, Clinic
from plumbing.clock import iso_utc


def cmd_audit(config: Config, args: argparse.Namespace) -> int:
    """The audit trail, newest first, one line per event: when, clinic, who, what, target,
    details, request id, the client's address. Details hold names, counts and ids, never secrets or values."""
    clinic_id = None
    if args.clinic:
        clinic = Clinic.get_or_none(Clinic.slug == args.clinic)
        if clinic is None:
            print(f"error: unknown clinic: {args.clinic}", file=sys.stderr)
            return 2
        clinic_id = clinic.id
    since = None
    if args.since:
        try:
            since = datetime.fromisoformat(args.since.replace("Z", "+00:00"))  # naive: taken as UTC
        except ValueError:
            print(f"error: --since: not an ISO 8601 date or date-time: {args.since}", file=sys.stderr)
            return 2
    # One more than asked: whether older events were left out, said on stderr after the list.
    events = list(AuditEvent.trail(clinic_id, since, args.limit + 1, args.action))
    left_out = len(events) > args.limit
    events = events[: args.limit]
    slugs = {
        c.id: c.slug
        for c in Clinic.select(Clinic.id, Clinic.slug).where(
            Clinic.id.in_(list({e.clinic_id for e in events if e.clinic_id}))
        )
    }
    for event in events:
        who = f"{event.actor_kind}:{visible(event.actor_name)}" + (f" ({event.token_id})" if event.token_id else "")
        where = slugs.get(event.clinic_id, str(event.clinic_id)) if event.clinic_id else "-"
        target = f"{event.target_type}:{event.target_id}" if event.target_type else "-"
        print(
            f"{iso_utc(event.at)}  {where}  {who}  {event.action}  {target}  {visible(event.details)}"
            f"  request={visible(event.request_id or '-')}  from={visible(event.address or '-')}"
        )
    if left_out:
        print(f"note: older events match too; only the newest {args.limit} are listed (raise --limit)", file=sys.stderr)
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help="print the audit trail, newest first")
    audit.add_argument("--clinic", metavar="SLUG", help="only this clinic's events")
    audit.add_argument("--since", metavar="ISO", help="only events at or after this time (UTC unless it says)")
    audit.add_argument(
        "--action",
        metavar="ACTION",
        help="only events of this action (patient.erase: the erasures to redo after a restore)",
    )
    audit.add_argument("--limit", type=_positive, default=100, metavar="N", help="at most N events (default 100)")
    audit.set_defaults(func=cmd_audit)
