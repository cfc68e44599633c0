"""`demo`: the example organization onboarded, with a token, console logins and curl lines
(what bin/run prints)."""

from __future__ import annotations

import argparse
import json
import secrets
import uuid
from datetime import timedelta
from pathlib import Path

from commands.cli import actor
from config import Config
from migrations import migrate
from models import Clinic, StaffMembership, StaffUser
from plumbing.database import db

DEMO_FILE = Path(__file__).parent.parent / "examples" / "onboarding.json"


def cmd_demo(config: Config, args: argparse.Namespace) -> int:
    """Onboard the example organization and print a token and a curl line per check."""
    from api_keys import rules
    from onboarding.writer import onboard

    migrate(db.obj)
    onboard(json.loads(DEMO_FILE.read_text(encoding="utf-8")), secret_key=config.secret_keys, now=config.clock())
    clinic = Clinic.get(Clinic.slug == "demo-clinic")
    _, text = rules.issue(actor(), "demo-switchboard", [clinic], ["read", "write"], config.clock(), timedelta(days=7))
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
    print(f'curl -sS -X POST {auth} -d \'{{"callFrom": "+420 601 123 456"}}\' {base}/has-active-request')
    if args.sample_recording:
        body = json.dumps(
            {
                "CallSid": f"demo-{uuid.uuid4().hex[:8]}",
                "CallFrom": "+420 601 123 456",
                "CallTo": "+420 222 000 111",
                "Status": "completed",
                "HasRecording": True,
                "RecordingUrl": args.sample_recording,
                "RecordingSid": args.sample_recording.rsplit("/", 1)[-1],
                "Source": "demo",
                "Extra": "{}",
            }
        )
        print("\nHand off a call with the sample voicemail, then list the calls and their requests:")
        print(f"curl -sS -X POST {auth} -d '{body}' {base}/recording-complete")
        print(".venv/bin/python manage.py calls")
    return 0


def _demo_login(clinic: Clinic, role: str) -> tuple[str, str]:
    """The demo clinic's `role` login, with a fresh random password each run (printed once,
    like the demo token; never a fixed one that would open every demo install)."""
    from staff.passwords import hash_password

    email, password = f"{role}@{clinic.slug}.example", secrets.token_urlsafe(12)
    with db.atomic():
        user = StaffUser.by_email(email)
        if user is None:
            user = StaffUser.create(email=email, name=f"Demo {role}", password_hash=hash_password(password))
        else:
            StaffUser.update(password_hash=hash_password(password), disabled_at=None).where(
                StaffUser.id == user.id
            ).execute()
        StaffMembership.insert(user=user, clinic=clinic, role=role).on_conflict_ignore().execute()
    return email, password


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="load the demo clinic and print a token and curl lines")
    demo.add_argument("--base-url", default="http://127.0.0.1:8000")
    demo.add_argument("--sample-recording", help="also print a recording-complete curl line with this URL")
    demo.set_defaults(func=cmd_demo, needs_secret=True)
