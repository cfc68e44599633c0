"""The SMTP server down for a minute: no e-mail lost, no routing check slowed.

gunicorn (as the Procfile runs it) answers `is-clinic-opened` of the demo clinic under wrk
while a worker (`manage.py worker`) sends e-mails: the bench writes what must be mailed
into the outbox at a steady rate (`--mails-per-second`, set-password e-mails of the demo
clinic's administrator, as "forgot password" writes them), and the worker's relay and jobs
send them to a local SMTP server (aiosmtpd, tools/mail_server.py). Rounds in one run,
alternating: the server up (baseline), the server stopped for `--seconds` (outage), ...,
ending with a baseline (`--outages` outages); the figure is the median of the outages'
routing-check p99 against the median of the baselines'. At the end the bench waits until
every e-mail written was received, and counts those missing (by the outbox row each names
in `X-Clinic-Outbox-Id`) and those received twice (SMTP is at-least-once: a server that
stops between taking a message and answering for it gets it again).

    .venv/bin/python bench/mail_outage_bench.py [--seconds 60] [--connections 16]   (needs wrk)

Exit status 1 when an e-mail is missing, the outage's p99 is above `--max-ratio` (1.25)
of the baselines', or any answer is not 2xx.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import mail_server  # noqa: E402

from bench.handoff_bench import wrk  # noqa: E402
from tests.support.databases import recreate_database  # noqa: E402
from tests.support.faults import RedisServer, gunicorn  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.processes import manage, start_worker  # noqa: E402
from tests.support.processes import stop_process as stop  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/clinic_bench_mail"
SLUG = "demo-clinic"
CHECK = f"/external/v1/clinics/{SLUG}/switchboard/is-clinic-opened"
ADMIN = "admin@demo-clinic.example"
SCRIPT = 'wrk.method = "POST"\nwrk.body = "{}"\n'


class Writer(threading.Thread):
    """Writes `rate` set-password e-mails a second into the outbox until stopped."""

    def __init__(self, rate: float) -> None:
        super().__init__(daemon=True)
        self.rate, self.written, self.stopping = rate, 0, threading.Event()

    def run(self) -> None:
        from models import Outbox, StaffUser
        from plumbing.database import db

        with db.connection_context():
            user = StaffUser.by_email(ADMIN)
        while not self.stopping.wait(1 / self.rate):
            with db.connection_context(), db.atomic():
                Outbox.add("mail", {"template": "password_reset", "to": {"user": str(user.id)}}, datetime.now(UTC))
            self.written += 1


def received(box: mail_server.Mailbox) -> set[str]:
    """The outbox rows the bench wrote that an e-mail arrived for (not the demo key's expiry
    notice: the demo's key expires in 7 days)."""
    return {m["X-Clinic-Outbox-Id"] for m in list(box.messages) if m["X-Clinic-Notice"] == "password_reset"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--mails-per-second", type=float, default=2.0)
    parser.add_argument("--max-ratio", type=float, default=1.25)
    parser.add_argument("--outages", type=int, default=2)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    box = mail_server.Mailbox()
    smtp_port = free_port()
    server = mail_server.controller(box, smtp_port)
    server.start()
    rounds: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="mail-bench-") as tmp, RedisServer(Path(tmp)) as private_redis:
        workdir = Path(tmp)
        env = {
            **os.environ,
            "DATABASE_URL": PG,
            "REDIS_URL": private_redis.url,
            "SECRET_KEY": "bench" * 8,
            "LOG_LEVEL": "WARNING",
            "SMTP_URL": f"smtp://127.0.0.1:{smtp_port}?starttls=off",
            "MAIL_FROM": "ordinace@bench.example",
            "PUBLIC_BASE_URL": "https://bench.example",
            "MAIL_RETRY_DELAYS": "2,4,8,15,30",
        }
        recreate_database(PG)
        manage(env, "migrate")
        manage(env, "demo", "--base-url", "https://bench.example")  # the demo clinic and its admin
        token = manage(
            env,
            "token",
            "create",
            "--name",
            "mail-bench",
            "--clinic",
            SLUG,
            "--scope",
            "read",
            "--expires-in-days",
            "30",
        )
        from plumbing.database import bind_database

        bind_database(PG, pooled=False)
        script = workdir / "check.lua"
        script.write_text(SCRIPT)
        web, base_url = gunicorn({**env, "PYTHONPATH": str(ROOT)}, workdir / "web.log", workers=2, app="wsgi:app")
        worker = start_worker({**env, "WHISPER_THREADS": "1"}, workdir / "worker.log")
        writer = Writer(args.mails_per_second)
        try:
            url = base_url + CHECK
            wrk(url, token, script, 3, args.connections, threads=2)  # warm up
            writer.start()
            for label in ["baseline", "outage"] * args.outages + ["baseline"]:
                if label == "outage":
                    server.stop()
                rounds.append((label, wrk(url, token, script, args.seconds, args.connections, threads=2)))
                if label == "outage":
                    server = mail_server.controller(box, smtp_port)
                    server.start()
            writer.stopping.set()
            writer.join()
            deadline = time.monotonic() + 180
            while len(received(box)) < writer.written and time.monotonic() < deadline:
                time.sleep(0.5)
            drained = time.monotonic() - (deadline - 180)
        finally:
            writer.stopping.set()
            stop(web)
            stop(worker)
            server.stop()

    p99_base = statistics.median(r["p99"] for label, r in rounds if label == "baseline")
    p99_outage = statistics.median(r["p99"] for label, r in rounds if label == "outage")
    ratio = p99_outage / p99_base
    print(
        f"\n== is-clinic-opened under wrk -t2 -c{args.connections} -d{args.seconds}s per round, 2 gunicorn gevent "
        f"workers and one worker; {args.mails_per_second:g} e-mails/s written; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    print(f"{'round':10s} {'req/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s}  non-2xx")
    for label, r in rounds:
        print(f"{label:10s} {r['rps']:8.0f} {r['p50']:8.2f} {r['p99']:8.2f}  {r['non2xx']}")
    distinct = received(box)
    lost = writer.written - len(distinct)
    print(
        json.dumps(
            {
                "p99_baseline_ms": round(p99_base, 1),
                "p99_outage_ms": round(p99_outage, 1),
                "p99_outage_over_baseline": round(ratio, 2),
                "emails_written": writer.written,
                "emails_received": len(distinct),
                "received_twice": sum(m["X-Clinic-Notice"] == "password_reset" for m in box.messages) - len(distinct),
                "lost": lost,
                "all_received_after_s": round(drained, 1),
            }
        )
    )
    failures = []
    if lost > 0:
        failures.append(f"{lost} e-mail(s) lost")
    if ratio > args.max_ratio:
        failures.append(f"p99 during the outage {ratio:.2f}x the baselines'")
    if any(r["non2xx"] or r["socket_errors"] != "none" for _, r in rounds):
        failures.append("non-2xx answers or socket errors")
    print("verdict: " + ("no e-mail lost, no check slowed" if not failures else "FAILED: " + "; ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
