"""Operator CLI: migrate, onboard, tokens, demo, model, worker helpers.

    python manage.py migrate
    python manage.py onboard FILE.json
    python manage.py token create --name NAME --clinic SLUG [--clinic SLUG ...] --scope read [--scope write] (--expires-in-days N | --never-expires)
    python manage.py token list
    python manage.py token rotate TOKEN_ID --old-valid-hours H [--expires-in-days N]
    python manage.py token revoke TOKEN_ID
    python manage.py user create --clinic SLUG [--clinic SLUG ...] --email E --name N --role staff|admin [--language cs|en] --password-stdin
    python manage.py user reset-password --email E --password-stdin
    python manage.py user hash-password --password-stdin   (for an onboarding file's users)
    python manage.py user disable --email E
    python manage.py audit [--clinic SLUG] [--since ISO] [--limit N]
    python manage.py demo [--base-url URL]
    python manage.py worker [QUEUE ...]
    python manage.py requeue
    python manage.py storage purge [--grace-seconds N]
    python manage.py model build [--name tiny.en|base] [--quantize q8_0|q5_0|...] [--out var/models]
    python manage.py model verify PATH
"""
from __future__ import annotations

import argparse
import getpass
import json
import secrets
import sys
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from config import Config, InsecureConfiguration
from migrations import migrate
from plumbing.clock import as_utc, iso_utc, utc_now
from plumbing.database import bind_database, db
from models import Actor, ApiToken, AuditEvent, Clinic, StaffMembership, StaffUser

DEMO_FILE = Path(__file__).parent / "examples" / "onboarding.json"


def cmd_migrate(config: Config, args: argparse.Namespace) -> int:
    from storage import make_storage

    applied = migrate(db.obj)
    print("applied: " + ", ".join(applied) if applied else "database is up to date", file=sys.stderr)
    # Release step: the document storage directory (local) or bucket (s3) exists from here on.
    make_storage(config).prepare()
    print(f"document storage ready ({config.storage_backend})", file=sys.stderr)
    return 0


def cmd_onboard(config: Config, args: argparse.Namespace) -> int:
    from onboarding.writer import OnboardingError, onboard

    try:
        document = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    try:
        summary = onboard(document, secret_key=config.secret_key)
    except OnboardingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary, file=sys.stderr)
    return 0


def _clinics(slugs: list[str]) -> list[Clinic] | None:
    """The clinics of `--clinic` options; None, naming the unknown ones on stderr, if any is."""
    clinics = list(Clinic.select().where(Clinic.slug.in_(slugs)))
    missing = set(slugs) - {c.slug for c in clinics}
    if missing:
        print(f"error: unknown clinic(s): {', '.join(sorted(missing))}", file=sys.stderr)
        return None
    return clinics


def cmd_token_create(config: Config, args: argparse.Namespace) -> int:
    from api_keys import rules

    slugs = list(dict.fromkeys(args.clinic))
    clinics = _clinics(slugs)
    if clinics is None:
        return 2
    try:
        expires = None if args.never_expires else rules.lifetime(args.expires_in_days)
        token, text = rules.issue(operator(), args.name, clinics, args.scope, config.clock(), expires,
                                  never_expires=args.never_expires)
    except rules.KeyRuleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)  # the only thing on stdout: scripts capture it
    until = f"expires {iso_utc(token.expires_at)}" if token.expires_at else "NEVER expires (--never-expires)"
    print(f"token {token.id} created for {', '.join(slugs)} ({token.scopes}), {until}; it is shown only once",
          file=sys.stderr)
    return 0


def cmd_token_list(config: Config, args: argparse.Namespace) -> int:
    from api_keys import rules

    for key in reversed(rules.keys_of(None, config.clock())):
        token = key.token
        expires = "never(--never-expires)" if key.never_expires else iso_utc(token.expires_at)
        print("\t".join([
            str(token.id), token.name, ",".join(key.clinics), token.scopes,
            key.state + (" expiring-soon" if key.expiring_soon else ""),
            f"expires={expires}", f"last_used={iso_utc(token.last_used_at) or 'never'}",
            f"created_by={token.created_by or '-'}",
        ]))
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
        new, text = rules.rotate(operator(), token, until, now, rules.lifetime(args.expires_in_days))
    except rules.KeyRuleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    print(f"token {new.id} replaces {token.id}, which works until {iso_utc(until)} at the latest; the new one "
          f"expires {iso_utc(new.expires_at)}; it is shown only once", file=sys.stderr)
    return 0


def cmd_token_revoke(config: Config, args: argparse.Namespace) -> int:
    from api_keys import rules

    token = _token(args.token_id)
    if token is None:
        return 2
    rules.revoke(operator(), token)  # other processes drop it within a second (row_cache.py)
    print(f"token {token.id} revoked", file=sys.stderr)
    return 0


def _read_password() -> str | None:
    """The password from the first line of stdin (never an argument: the process list and the
    shell history would show it); None, with the reason on stderr, when too short."""
    from console.passwords import MIN_LENGTH

    password = sys.stdin.readline().rstrip("\r\n")
    if len(password) < MIN_LENGTH:
        print(f"error: the password on stdin must be at least {MIN_LENGTH} characters", file=sys.stderr)
        return None
    return password


def cmd_user_create(config: Config, args: argparse.Namespace) -> int:
    from console.passwords import hash_password

    slugs = list(dict.fromkeys(args.clinic))
    clinics = _clinics(slugs)
    if clinics is None:
        return 2
    email = StaffUser.normal_email(args.email)
    if "@" not in email:
        print("error: not an e-mail address", file=sys.stderr)
        return 2
    if StaffUser.by_email(email):
        print(f"error: a user with e-mail {email} exists already", file=sys.stderr)
        return 2
    password = _read_password()
    if password is None:
        return 2
    with db.atomic():
        user = StaffUser.create(email=email, name=args.name, password_hash=hash_password(password),
                                language=args.language)
        for clinic in clinics:
            StaffMembership.create(user=user, clinic=clinic, role=args.role)
            AuditEvent.record(operator(), clinic, "staff_user.create", user, {"role": args.role})
    print(f"user {email} created for {', '.join(slugs)} ({args.role})", file=sys.stderr)
    return 0


def _existing_user(email: str) -> StaffUser | None:
    user = StaffUser.by_email(email)
    if user is None:
        print("error: no such user", file=sys.stderr)
    return user


def cmd_user_reset_password(config: Config, args: argparse.Namespace) -> int:
    from console import sessions
    from console.passwords import hash_password

    user = _existing_user(args.email)
    if user is None:
        return 2
    password = _read_password()
    if password is None:
        return 2
    with db.atomic():
        StaffUser.update(password_hash=hash_password(password)).where(StaffUser.id == user.id).execute()
        ended = sessions.end_all(user)  # whoever knew the old password is logged out
        AuditEvent.record(operator(), None, "staff_user.reset_password", user, {"sessionsEnded": ended})
    print(f"password of {user.email} reset; {ended} session(s) ended", file=sys.stderr)
    return 0


def cmd_user_hash_password(config: Config, args: argparse.Namespace) -> int:
    from console.passwords import hash_password

    password = _read_password()
    if password is None:
        return 2
    print(hash_password(password))
    return 0


def cmd_user_disable(config: Config, args: argparse.Namespace) -> int:
    from console import sessions

    user = _existing_user(args.email)
    if user is None:
        return 2
    with db.atomic():
        if user.disabled_at is None:
            StaffUser.update(disabled_at=utc_now()).where(StaffUser.id == user.id).execute()
            AuditEvent.record(operator(), None, "staff_user.disable", user)
        ended = sessions.end_all(user)
    print(f"user {user.email} disabled; {ended} session(s) ended", file=sys.stderr)
    return 0


def operator() -> Actor:
    """Who runs this CLI: its operating-system user (a PaaS one-off process may have none)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "unknown"
    return Actor("operator", name)


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
    events = AuditEvent.trail(clinic_id, since, args.limit)
    slugs = {c.id: c.slug for c in Clinic.select(Clinic.id, Clinic.slug)
             .where(Clinic.id.in_(list({e.clinic_id for e in events if e.clinic_id})))}
    for event in events:
        who = f"{event.actor_kind}:{visible(event.actor_name)}" + (f" ({event.token_id})" if event.token_id else "")
        where = slugs.get(event.clinic_id, str(event.clinic_id)) if event.clinic_id else "-"
        target = f"{event.target_type}:{event.target_id}" if event.target_type else "-"
        print(f"{iso_utc(event.at)}  {where}  {who}  {event.action}  {target}  {visible(event.details)}"
              f"  request={visible(event.request_id or '-')}  from={visible(event.address or '-')}")
    return 0


def cmd_demo(config: Config, args: argparse.Namespace) -> int:
    """Onboard the example organization and print a token and a curl line per check."""
    from api_keys import rules
    from onboarding.writer import onboard

    migrate(db.obj)
    onboard(json.loads(DEMO_FILE.read_text(encoding="utf-8")), secret_key=config.secret_key)
    clinic = Clinic.get(Clinic.slug == "demo-clinic")
    _, text = rules.issue(operator(), "demo-switchboard", [clinic], ["read", "write"], config.clock(), timedelta(days=7))
    logins = [(role, *_demo_login(clinic, role)) for role in ("admin", "staff")]
    print(f"Staff console: {args.base_url.rstrip('/')}/console/")
    for role, email, password in logins:
        print(f"  {role}: {email}  password: {password}")
    print()
    base = f"{args.base_url.rstrip('/')}/external/v1/clinics/{clinic.slug}/switchboard"
    auth = f"-H 'Authorization: Bearer {text}' -H 'Content-Type: application/json'"
    print(f"Demo token (read, write; valid 7 days): {text}\n")
    print(f"curl -sS -X POST {auth} {base}/is-clinic-opened")
    print(f"curl -sS -X POST {auth} -d '{{}}' {base}/is-on-vacation")
    print(f"curl -sS -X POST {auth} -d '{{\"callFrom\": \"+420 601 123 456\"}}' {base}/has-active-request")
    if args.sample_recording:
        body = json.dumps({"CallSid": f"demo-{uuid.uuid4().hex[:8]}", "CallFrom": "+420 601 123 456",
                           "CallTo": "+420 222 000 111", "Status": "completed", "HasRecording": True,
                           "RecordingUrl": args.sample_recording,
                           "RecordingSid": args.sample_recording.rsplit("/", 1)[-1],
                           "Source": "demo", "Extra": "{}"})
        print("\nHand off a call with the sample voicemail, then list the calls and their requests:")
        print(f"curl -sS -X POST {auth} -d '{body}' {base}/recording-complete")
        print(".venv/bin/python manage.py calls")
    return 0


def _demo_login(clinic: Clinic, role: str) -> tuple[str, str]:
    """The demo clinic's `role` login, with a fresh random password each run (printed once,
    like the demo token; never a fixed one that would open every demo install)."""
    from console.passwords import hash_password

    email, password = f"{role}@{clinic.slug}.example", secrets.token_urlsafe(12)
    with db.atomic():
        user = StaffUser.by_email(email)
        if user is None:
            user = StaffUser.create(email=email, name=f"Demo {role}", password_hash=hash_password(password))
        else:
            StaffUser.update(password_hash=hash_password(password), disabled_at=None).where(
                StaffUser.id == user.id).execute()
        StaffMembership.insert(user=user, clinic=clinic, role=role).on_conflict_ignore().execute()
    return email, password


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


def visible(text: str) -> str:
    """Caller-supplied text for the operator's terminal: control characters (escape
    sequences, carriage returns, newlines, C1 codes) are written as escapes (``\\x1b``),
    so nothing a switchboard sends can move the cursor, recolour or rewrite the screen."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _calls_queue(config: Config):
    from rq import Queue

    from jobs import queueing

    return Queue(queueing.CALLS, connection=queueing.redis_client(config.redis_url, "worker"))


def cmd_worker(config: Config, args: argparse.Namespace) -> int:
    """An RQ worker with the scheduler (retries with backoff are scheduled jobs), and a
    playback worker beside it.

    Before taking jobs it loads and warms the transcription model(s) once and starts
    the call relay, which queues stored calls and re-queues stranded ones. Jobs run in
    this process (a `SimpleWorker`): whisper.cpp's OpenMP threads do not survive a fork,
    so a forked work horse would hang on the parent's warmed model (seen on this machine).
    The playback worker (a child process started first, without the model) serves the
    `recordings` queue alone, so re-fetching a doctor's expired link never waits behind
    a transcription; it and RQ's scheduler end with this process (jobs/companions.py).
    """
    import logging

    from rq import Queue

    from plumbing import logs
    from plumbing import metrics
    from voicemail import transcription
    from jobs import companions, queueing, relay, runtime, storage_purge, worker

    logs.setup(config.log_level, config.log_format)
    log = logging.getLogger("worker")
    # Job metrics; and each job's end wakes the relay, which queues that clinic's next call.
    worker_class = metrics.with_job_metrics(relay.waking_relay(worker.ClinicWorker))
    connection = queueing.redis_client(config.redis_url, "worker")
    level = config.log_level.upper()
    if args.playback:
        if args.parent_pid:
            companions.die_with_parent(args.parent_pid)
        db.close()
        runtime.start(config)
        return worker.run(worker_class, [Queue(queueing.RECORDINGS, connection=connection)], with_scheduler=False,
                          logging_level=level, who="playback worker")
    playback = companions.PlaybackWorker().start() if queueing.RECORDINGS in args.queues else None
    try:
        if not args.no_warm_up:
            for model in dict.fromkeys([config.whisper_model, config.whisper_model_en]):
                if model and Path(model).is_file():
                    transcription.warm_up(config.transcriber, model, config.whisper_threads, config.whisper_vad)
                    log.info("warmed up %s with %s", config.transcriber, model)
                elif model:
                    log.warning("whisper model %s not found (python manage.py model build)", model)
        db.close()
        runtime.start(config)  # jobs use this configuration; the environment is read once
        # Hands stored calls to the queue (the web only commits them); re-queues, at once
        # and then periodically, the pending calls left without a live job (jobs/relay.py).
        relay.start(Queue(queueing.CALLS, connection=connection), config)
        # Deletes uploads never registered once their link expired (and a grace), at once
        # and then every UPLOAD_PURGE_EVERY_SECONDS; safe in every worker (jobs/storage_purge.py).
        storage_purge.start(config)
        # This worker takes plays too (first) when it is idle: the playback worker may be
        # restarting. Heartbeats during jobs and short TTLs: a killed worker's job is re-run
        # quickly (jobs/worker.py). Job durations and outcomes go to the service's metrics
        # (metrics.py); RQ's own loggers follow LOG_LEVEL (RQ would pin them at INFO).
        queues = [Queue(name, connection=connection) for name in args.queues]
        return worker.run(worker_class, queues, with_scheduler=True, logging_level=level)
    finally:
        if playback is not None:
            playback.stop()


def cmd_requeue(config: Config, args: argparse.Namespace) -> int:
    """Queue every stored call that is not processed yet and has no live job."""
    from jobs.relay import requeue_pending

    print(f"re-queued {requeue_pending(_calls_queue(config), config)} pending call(s)", file=sys.stderr)
    return 0


def cmd_storage_purge(config: Config, args: argparse.Namespace) -> int:
    """What every worker does periodically, once: delete the uploads never registered whose
    link expired over the grace ago, and the local backend's interrupted upload files."""
    import dataclasses

    from jobs.storage_purge import purge_storage
    from storage import make_storage

    if args.grace_seconds is not None:
        if args.grace_seconds < 0:
            print("error: --grace-seconds must not be negative", file=sys.stderr)
            return 2
        config = dataclasses.replace(config, upload_purge_grace_seconds=args.grace_seconds)
    purged = purge_storage(make_storage(config), config)
    print(f"purged {purged.uploads} unregistered upload(s) and {purged.partial_files} interrupted upload "
          "file(s)", file=sys.stderr)
    return 0


def cmd_wait_ready(config: Config, args: argparse.Namespace) -> int:
    """Poll a health URL until it answers 200, for at most --timeout seconds."""
    import time
    import urllib.request

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


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="manage.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    # needs_secret: the commands a production deployment runs with its SECRET_KEY (the
    # release step, the worker) or that encrypt with it (onboard, demo); see main.
    sub.add_parser("migrate", help="apply pending schema migrations").set_defaults(func=cmd_migrate, needs_secret=True)
    sub.add_parser("model", help="whisper model tools: model build [--name tiny.en|base] [--quantize TYPE], "
                   "model verify PATH (also quantized files)")
    onboard_p = sub.add_parser("onboard", help="create or update an organization from a JSON file")
    onboard_p.add_argument("file")
    onboard_p.set_defaults(func=cmd_onboard, needs_secret=True)

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
    rotate.add_argument("--old-valid-hours", type=float, required=True, metavar="H",
                        help="how long the old token keeps working (0 to 168)")
    rotate.add_argument("--expires-in-days", type=int, metavar="N", help="the new token's expiry (default 90)")
    rotate.set_defaults(func=cmd_token_rotate)
    revoke = token.add_parser("revoke", help="revoke a token at once")
    revoke.add_argument("token_id")
    revoke.set_defaults(func=cmd_token_revoke)

    user = sub.add_parser("user", help="staff console users").add_subparsers(dest="user_command", required=True)
    ucreate = user.add_parser("create", help="create a staff user; the password is read from stdin")
    ucreate.add_argument("--clinic", action="append", required=True, metavar="SLUG")
    ucreate.add_argument("--email", required=True)
    ucreate.add_argument("--name", required=True)
    ucreate.add_argument("--role", required=True, choices=StaffMembership.ROLES)
    ucreate.add_argument("--language", default="cs", choices=StaffUser.LANGUAGES)
    ucreate.add_argument("--password-stdin", action="store_true", required=True)
    ucreate.set_defaults(func=cmd_user_create)
    ureset = user.add_parser("reset-password", help="set a new password (from stdin); ends the user's sessions")
    ureset.add_argument("--email", required=True)
    ureset.add_argument("--password-stdin", action="store_true", required=True)
    ureset.set_defaults(func=cmd_user_reset_password)
    uhash = user.add_parser("hash-password", help="print the Argon2id hash of the password on stdin, "
                                                   "for an onboarding file's users[].passwordHash")
    uhash.add_argument("--password-stdin", action="store_true", required=True)
    uhash.set_defaults(func=cmd_user_hash_password, needs_db=False)
    udisable = user.add_parser("disable", help="refuse the user's logins and end their sessions")
    udisable.add_argument("--email", required=True)
    udisable.set_defaults(func=cmd_user_disable)

    audit = sub.add_parser("audit", help="print the audit trail, newest first")
    audit.add_argument("--clinic", metavar="SLUG", help="only this clinic's events")
    audit.add_argument("--since", metavar="ISO", help="only events at or after this time (UTC unless it says)")
    audit.add_argument("--limit", type=_positive, default=100, metavar="N", help="at most N events (default 100)")
    audit.set_defaults(func=cmd_audit)

    demo = sub.add_parser("demo", help="load the demo clinic and print a token and curl lines")
    demo.add_argument("--base-url", default="http://127.0.0.1:8000")
    demo.add_argument("--sample-recording", help="also print a recording-complete curl line with this URL")
    demo.set_defaults(func=cmd_demo, needs_secret=True)
    calls = sub.add_parser("calls", help="list the latest calls with their outcome and request")
    calls.add_argument("--last", type=int, default=10)
    calls.set_defaults(func=cmd_calls)

    from jobs.queueing import QUEUES

    worker = sub.add_parser("worker", help="run an RQ worker (with scheduler)")
    # "recordings" first: a doctor waits on a link re-fetch, nobody waits on a transcription.
    worker.add_argument("queues", nargs="*", default=list(QUEUES))
    worker.add_argument("--no-warm-up", action="store_true", help="skip loading the transcription model")
    # The playback worker the worker command starts itself (jobs/companions.py).
    worker.add_argument("--playback", action="store_true", help=argparse.SUPPRESS)
    worker.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    worker.set_defaults(func=cmd_worker, needs_db=False, needs_secret=True)
    sub.add_parser("requeue", help="queue stored calls that are not processed yet").set_defaults(
        func=cmd_requeue, needs_db=False)
    storage = sub.add_parser("storage", help="document storage").add_subparsers(dest="storage_command",
                                                                               required=True)
    purge = storage.add_parser("purge", help="delete uploads never registered whose link expired over "
                               "UPLOAD_PURGE_GRACE_SECONDS ago (every worker does it periodically)")
    purge.add_argument("--grace-seconds", type=int, metavar="N", help="instead of UPLOAD_PURGE_GRACE_SECONDS")
    purge.set_defaults(func=cmd_storage_purge)
    ready = sub.add_parser("wait-ready", help="wait until a health URL answers 200")
    ready.add_argument("--url", required=True)
    ready.add_argument("--timeout", type=float, default=30)
    ready.set_defaults(func=cmd_wait_ready, needs_db=False)
    return p


def main(argv: list[str] | None = None, config: Config | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["model"]:  # model tools need no database or configuration
        from tools import whisper_convert

        return whisper_convert.main(argv[1:])
    args = parser().parse_args(argv)
    config = config or Config.from_env()
    if getattr(args, "needs_secret", False):
        try:
            config.require_production_secrets()  # before anything is migrated, queued or encrypted
        except InsecureConfiguration as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    bind_database(config.database_url, pooled=False)
    if not getattr(args, "needs_db", True):
        return args.func(config, args)
    with db.connection_context():
        return args.func(config, args)


if __name__ == "__main__":
    sys.exit(main())
