"""Operator CLI: migrate, onboard, tokens, users, the audit trail, the demo, calls, the worker,
storage, patients' data, retention, secrets, readiness, models.

python manage.py migrate
python manage.py onboard FILE.json [--overwrite-console-changes]
python manage.py token create --name NAME --clinic SLUG [--clinic SLUG ...] --scope read [--scope write] (--expires-in-days N | --never-expires)
python manage.py token list
python manage.py token rotate TOKEN_ID --old-valid-hours H [--expires-in-days N]
python manage.py token revoke TOKEN_ID
python manage.py user create --clinic SLUG [--clinic SLUG ...] --email E --name N --role staff|admin|officer [--language cs|en] --password-stdin
python manage.py user reset-password --email E --password-stdin
python manage.py user hash-password --password-stdin
python manage.py user disable --email E
python manage.py user reset-2fa --email E
python manage.py webhook add --clinic SLUG --url URL [--event TYPE ...] [--description TEXT]
python manage.py webhook list --clinic SLUG
python manage.py webhook rotate ENDPOINT_ID --clinic SLUG
python manage.py webhook disable ENDPOINT_ID --clinic SLUG
python manage.py webhook enable ENDPOINT_ID --clinic SLUG
python manage.py webhook remove ENDPOINT_ID --clinic SLUG
python manage.py audit [--clinic SLUG] [--since ISO] [--action ACTION] [--limit N]
python manage.py reads --who EMAIL|KEY [--clinic SLUG ...] [--since ISO] [--until ISO]
python manage.py demo [--base-url URL] [--sample-recording URL]
python manage.py calls [--last N] [--clinic SLUG] [--refused]
python manage.py worker [QUEUE ...] [--no-warm-up]
python manage.py requeue
python manage.py storage purge [--grace-seconds N]
python manage.py patient erase PATIENT_ID [--include-documents] [--yes]
python manage.py patient copy PATIENT_ID --out FILE.zip [--language cs|en]
python manage.py retention show [--clinic SLUG ...]
python manage.py retention set --clinic SLUG [--resolved-call-requests-days N|keep] [--calls-without-request-days N|keep] [--audit-details-days N|keep] [--signed-documents-days N|keep] [--resolved-api-requests-days N|keep] [--read-trail-days N|keep]
python manage.py retention run
python manage.py offboard (--clinic SLUG | --organization SLUG) --archive FILE.zip [--yes]
python manage.py reencrypt [--check]
python manage.py wait-ready --url URL [--timeout SECONDS]
python manage.py model build [--name tiny.en|base] [--quantize TYPE] [--out DIR]
python manage.py model verify PATH
"""

from __future__ import annotations

import argparse
import sys

from commands import (
    audit,
    calls,
    demo,
    deployment,
    privacy,
    reads,
    secrets,
    storage,
    tokens,
    users,
    wait_ready,
    webhook_endpoints,
    worker,
)
from config import Config, InsecureConfiguration, RetiredSetting, prepare_process_environment
from plumbing import clock
from plumbing.database import bound, db, open_database

# In the order `--help` lists them: migrate, model, onboard, token, user, audit, reads, demo,
# calls, worker, requeue, storage, patient, retention, reencrypt, wait-ready.
COMMANDS = (
    deployment,
    tokens,
    users,
    audit,
    reads,
    demo,
    calls,
    worker,
    storage,
    privacy,
    secrets,
    wait_ready,
    webhook_endpoints,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="manage.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return p


def main(argv: list[str] | None = None, config: Config | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["model"]:  # model tools need no database or configuration
        from tools import whisper_convert

        return whisper_convert.main(argv[1:])
    args = parser().parse_args(argv)
    if config is None:
        try:
            config = Config.from_env()
        except (RetiredSetting, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    for notice in config.notices:
        print(f"warning: {notice}", file=sys.stderr)
    clock.use(config.clock)
    prepare_process_environment()
    if getattr(args, "needs_secret", False):
        try:
            config.require_production_secrets()  # before anything is migrated, queued or encrypted
        except InsecureConfiguration as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    # The command's database, bound while it runs (its threads too), then what the process
    # had before: nothing, for the CLI; an app's pool, for a test that runs a command.
    with bound(open_database(config.database_url, pooled=False)):
        if not getattr(args, "needs_db", True):
            return args.func(config, args)
        with db.connection_context():
            return args.func(config, args)


if __name__ == "__main__":
    sys.exit(main())
