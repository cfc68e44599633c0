"""`wait-ready`: poll a health URL until the service answers, for scripts that start it."""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request

from config import Config


def cmd_wait_ready(config: Config, args: argparse.Namespace) -> int:
    """Poll a health URL until it answers 200, for at most --timeout seconds."""
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            with urllib.request.urlopen(args.url, timeout=2) as resp:
                if resp.status == 200:
                    return 0
        except OSError:
            pass
        if time.monotonic() > deadline:
            print(f"error: {args.url} not ready after {args.timeout}s", file=sys.stderr)
            return 1
        time.sleep(0.2)


def register(sub: argparse._SubParsersAction) -> None:
    ready = sub.add_parser("wait-ready", help="wait until a health URL answers 200")
    ready.add_argument("--url", required=True)
    ready.add_argument("--timeout", type=float, default=30)
    ready.set_defaults(func=cmd_wait_ready, needs_db=False)
