"""`calls`: the latest calls and the requests made of them, for an operator checking the
hand-off end to end; `calls --refused`: the hand-offs the service refused."""

from __future__ import annotations

import argparse
import json

from commands.cli import visible
from config import Config
from plumbing.clock import iso_utc


def cmd_calls(config: Config, args: argparse.Namespace) -> int:
    """The latest calls: outcome, what was odd about the hand-off, callback number,
    transcript (status, issue, language) and the request created from each."""
    if args.refused:
        return _refused(args)
    from models import Call, Clinic, PatientRequest

    calls = Call.select().order_by(Call.received_at.desc()).limit(args.last)
    if args.clinic:
        calls = calls.where(Call.clinic == Clinic.select(Clinic.id).where(Clinic.slug == args.clinic))
    for call in calls:
        request = PatientRequest.get_or_none(PatientRequest.call == call.id)
        print(
            f"{iso_utc(call.received_at)}  {call.clinic.slug}  {visible(call.call_sid)}  "
            f"from {visible(call.call_from) or '(withheld)'}  {call.state}/{call.outcome or '-'}  "
            f"request={request.id if request else '-'}{'  (' + request.kind + ')' if request else ''}"
        )
        if call.anomalies:
            print(f"    anomalies: {', '.join(json.loads(call.anomalies))}")
        if call.callback_number:
            print(f"    callback: {visible(call.callback_number)}")
        if call.transcript_status or call.transcript:
            issue = f" ({call.transcript_issue})" if call.transcript_issue else ""
            print(
                f"    transcript [{call.transcript_status or '-'}{issue}, {call.transcript_language or '-'}]: "
                f"{visible(call.transcript or '')}"
            )
        if call.fetch_error:
            print(f"    recording: {visible(call.fetch_error)}")
        if call.recording_gone_reason:
            print(f"    recording unavailable: {call.recording_gone_reason}")
    return 0


def _refused(args: argparse.Namespace) -> int:
    """The latest refused hand-offs (4xx after the token was authenticated, and 401 for a
    key that expired or was revoked: "key expired", "key revoked"), newest first."""
    from switchboard import refusals

    for refused in refusals.latest(args.last, args.clinic):
        print(
            f"{iso_utc(refused.at)}  {visible(refused.clinic_slug)}  {refused.status} {refused.code}"
            f"{'  key ' + refused.reason if refused.reason else ''}  "
            f"CallSid={visible(refused.call_sid) if refused.call_sid else '-'}  token={refused.token_id or '-'}  "
            f"{visible(refused.message)}"
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    calls = sub.add_parser(
        "calls", help="list the latest calls with their outcome and request (--refused: the refused hand-offs)"
    )
    calls.add_argument("--last", type=int, default=10)
    calls.add_argument("--clinic", metavar="SLUG", help="only this clinic's")
    calls.add_argument(
        "--refused",
        action="store_true",
        help="the hand-offs answered 4xx after authentication (kept REFUSED_HANDOFF_RETENTION_DAYS)",
    )
    calls.set_defaults(func=cmd_calls)
