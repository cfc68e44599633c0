"""`calls`: the latest calls and the requests made of them, for an operator checking the
hand-off end to end."""
from __future__ import annotations

import argparse

from config import Config
from plumbing.clock import iso_utc
from commands.cli import visible


def cmd_calls(config: Config, args: argparse.Namespace) -> int:
    """The latest calls: outcome, callback number, transcript (status, issue, language)
    and the request created from each."""
    from models import Call, PatientRequest

    calls = Call.select().order_by(Call.received_at.desc()).limit(args.last)
    for call in calls:
        request = PatientRequest.get_or_none(PatientRequest.call == call.id)
        print(f"{iso_utc(call.received_at)}  {call.clinic.slug}  {visible(call.call_sid)}  "
              f"from {visible(call.call_from)}  {call.state}/{call.outcome or '-'}  "
              f"request={request.id if request else '-'}{'  (' + request.kind + ')' if request else ''}")
        if call.callback_number:
            print(f"    callback: {visible(call.callback_number)}")
        if call.transcript_status or call.transcript:
            issue = f" ({call.transcript_issue})" if call.transcript_issue else ""
            print(f"    transcript [{call.transcript_status or '-'}{issue}, {call.transcript_language or '-'}]: "
                  f"{visible(call.transcript or '')}")
        if call.fetch_error:
            print(f"    recording: {visible(call.fetch_error)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    calls = sub.add_parser("calls", help="list the latest calls with their outcome and request")
    calls.add_argument("--last", type=int, default=10)
    calls.set_defaults(func=cmd_calls)
