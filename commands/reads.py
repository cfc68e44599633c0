"""`reads`: the read trail's breach question on the operator's terminal: everything a staff
member (by e-mail, disabled ones too) or an API key (by id or name) read of patients' data
between two times, as CSV (the console's read trail page answers the same)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from commands.cli import visible
from config import Config
from models import Clinic


def _time(text: str | None, option: str) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))  # naive: taken as UTC
    except ValueError:
        print(f"error: {option}: not an ISO 8601 date or date-time: {visible(text)}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_reads(config: Config, args: argparse.Namespace) -> int:
    """The rows, oldest first, as CSV on stdout; how many on stderr."""
    from privacy import read_trail

    query = Clinic.select()
    if args.clinic:
        query = query.where(Clinic.slug.in_(args.clinic))
    clinics = list(query)
    if args.clinic and len(clinics) != len(set(args.clinic)):
        print(f"error: unknown clinic among: {', '.join(visible(s) for s in args.clinic)}", file=sys.stderr)
        return 2
    since, until = _time(args.since, "--since"), _time(args.until, "--until")
    found = read_trail.reads_by([c.id for c in clinics], args.who, since, until)
    sys.stdout.write(read_trail.as_csv(found))
    print(f"{len(found)} read(s)", file=sys.stderr)  # not who: an e-mail address is personal data
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    reads = sub.add_parser("reads", help="what a staff member or an API key read of patients' data (CSV)")
    reads.add_argument("--who", required=True, metavar="WHO", help="a staff member's e-mail, or a key's id or name")
    reads.add_argument("--clinic", action="append", metavar="SLUG", help="only this clinic (repeatable; default: all)")
    reads.add_argument("--since", metavar="ISO", help="at or after this time (UTC unless it says)")
    reads.add_argument("--until", metavar="ISO", help="before this time (UTC unless it says)")
    reads.set_defaults(func=cmd_reads)
