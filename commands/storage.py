"""`storage purge`: the document storage's periodic purge, once, by hand."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from config import Config


def cmd_storage_purge(config: Config, args: argparse.Namespace) -> int:
    """What every worker does periodically, once: delete the uploads never registered whose
    link expired over the grace ago, and the local backend's interrupted upload files."""
    from jobs.storage_purge import purge_storage
    from storage import make_storage

    if args.grace_seconds is not None:
        if args.grace_seconds < 0:
            print("error: --grace-seconds must not be negative", file=sys.stderr)
            return 2
        config = dataclasses.replace(config, upload_purge_grace_seconds=args.grace_seconds)
    purged = purge_storage(make_storage(config), config)
    print(
        f"purged {purged.uploads} unregistered upload(s) and {purged.partial_files} interrupted upload file(s)",
        file=sys.stderr,
    )
    print(
        f"purged {purged.refused_handoffs} refused hand-off record(s) older than "
        f"{config.refused_handoff_retention_days} days",
        file=sys.stderr,
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    storage = sub.add_parser("storage", help="document storage").add_subparsers(dest="storage_command", required=True)
    purge = storage.add_parser(
        "purge",
        help="delete uploads never registered whose link expired over "
        "UPLOAD_PURGE_GRACE_SECONDS ago (every worker does it periodically)",
    )
    purge.add_argument("--grace-seconds", type=int, metavar="N", help="instead of UPLOAD_PURGE_GRACE_SECONDS")
    purge.set_defaults(func=cmd_storage_purge)
