"""Setting a deployment up: `migrate` (the Procfile's release step), `model` (install
time) and `onboard` (an organization from a JSON file)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from config import Config
from migrations import migrate
from plumbing.database import db


def cmd_migrate(config: Config, args: argparse.Namespace) -> int:
    from storage import make_storage

    applied = migrate(db.obj)
    print("applied: " + ", ".join(applied) if applied else "database is up to date", file=sys.stderr)
    # Release step: the document storage directory (local) or bucket (s3) exists from here on.
    make_storage(config).prepare()
    print(f"document storage ready ({config.storage_backend})", file=sys.stderr)
    from voicemail.recordings import never_refetched_warnings

    for warning in never_refetched_warnings(config):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_onboard(config: Config, args: argparse.Namespace) -> int:
    from commands.cli import actor
    from onboarding.from_file import apply_file
    from onboarding.writer import OnboardingError

    try:
        document = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    try:
        summary = apply_file(
            document,
            secret_key=config.secret_keys,
            actor=actor(),
            now=config.clock(),
            overwrite=args.overwrite_console_changes,
        )
    except OnboardingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary, file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    # needs_secret: the commands a production deployment runs with its SECRET_KEY (the
    # release step, the worker) or that encrypt with it (onboard, demo); see manage.main.
    sub.add_parser("migrate", help="apply pending schema migrations").set_defaults(func=cmd_migrate, needs_secret=True)
    # Listed for the help only: manage.main hands `model ...` to tools/whisper_convert.py
    # before parsing (model tools need no database or configuration).
    sub.add_parser(
        "model",
        help="whisper model tools: model build [--name tiny.en|base] [--quantize TYPE], "
        "model verify PATH (also quantized files)",
    )
    onboard_p = sub.add_parser("onboard", help="create or update an organization from a JSON file")
    onboard_p.add_argument("file")
    onboard_p.add_argument(
        "--overwrite-console-changes",
        action="store_true",
        help="apply the file even where the staff console changed its clinics since it was "
        "last applied (the file's values replace those changes)",
    )
    onboard_p.set_defaults(func=cmd_onboard, needs_secret=True)
