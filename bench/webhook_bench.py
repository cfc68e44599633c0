"""Webhooks: how soon a change reaches a receiver, and what delivering them costs the
switchboard's hand-off and routing checks.

gunicorn (as the Procfile runs it) answers `recording-complete` (the hand-off) and
`is-clinic-opened` (a routing check) of the demo clinic under wrk, while a worker
(`manage.py worker webhooks`: its relays and its webhook workers) delivers webhooks to a
receiver on 127.0.0.1 (HTTPS, the bench's own CA). Meanwhile the bench makes changes at a
steady rate through the request domain's own path (a note set on one of the demo clinic's
requests: `patient_requests.changes.set_note`, its event and its outbox rows in its
transaction). Rounds in one run, alternating: webhooks off (the endpoint disabled: the
events are written, nothing is delivered) and on (enabled), `--rounds` of each; `--changes`
changes are made across the "on" rounds (as many across the "off" ones). Figures:

- commit to delivery: from the change's commit (the bench's clock, after the COMMIT) to the
  receiver's arrival (the same clock: one machine), p50 / p99 / max over the changes;
- the hand-off's and the routing check's p99, the median of the "on" rounds against the
  median of the "off" rounds, measured in the same run.

    .venv/bin/python bench/webhook_bench.py [--changes 1000] [--seconds 20]   (needs wrk)

Exit status 1 when a change was not delivered or delivered twice, or an answer is not 2xx.
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
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.handoff_bench import calls_script, wrk  # noqa: E402
from tests.support.databases import recreate_database  # noqa: E402
from tests.support.faults import RedisServer, gunicorn  # noqa: E402
from tests.support.https_server import HTTPSTestServer, TestRequest, TestResponse  # noqa: E402
from tests.support.processes import manage  # noqa: E402
from tests.support.processes import stop_process as stop  # noqa: E402
from tests.support.servers import wait_until  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/clinic_bench_webhooks"
SLUG = "demo-clinic"
BASE = f"/external/v1/clinics/{SLUG}"
CHECK_SCRIPT = 'wrk.method = "POST"\nwrk.body = "{}"\n'
HANDOFF_SCRIPT = calls_script("hook", '"Source":"bench","Extra":"{}"')


class Receiver:
    """Takes every delivery; when each event id first arrived (time.time())."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.twice = 0
        self.lock = threading.Lock()

    def __call__(self, req: TestRequest) -> TestResponse:
        at = time.time()
        with self.lock:
            event = req.headers["webhook-id"]
            if event in self.arrived:
                self.twice += 1
            else:
                self.arrived[event] = at
        return TestResponse(status=204, body=b"")


class Changer(threading.Thread):
    """Sets a note on one of the clinic's requests `rate` times a second, `count` times;
    each change's event id and the time its transaction committed."""

    def __init__(self, rate: float, count: int) -> None:
        super().__init__(daemon=True)
        self.rate, self.count = rate, count
        self.committed: dict[str, float] = {}

    def run(self) -> None:
        from datetime import UTC, datetime

        from models import Actor, ChangeEvent, Clinic, PatientRequest
        from patient_requests import changes
        from plumbing.database import db

        who = Actor("operator", "webhook-bench")
        with db.connection_context():
            clinic = Clinic.by_slug(SLUG)
            requests = list(PatientRequest.select().where(PatientRequest.clinic == clinic))
        start = time.monotonic()
        for n in range(self.count):
            time.sleep(max(0.0, start + n / self.rate - time.monotonic()))
            with db.connection_context():
                request = requests[n % len(requests)]
                changes.set_note(request, f"bench {uuid.uuid4().hex[:8]}", who, datetime.now(UTC))
                at = time.time()  # committed: set_note's transaction has ended
                latest = ChangeEvent.select(ChangeEvent.id).order_by(ChangeEvent.seq.desc()).first()
            self.committed[str(latest.id)] = at


def seed_requests(count: int) -> None:
    """Requests of the demo clinic to change (made through the domain's create)."""
    from datetime import UTC, datetime

    from models import Actor, Clinic, PatientRecord, RequestType
    from patient_requests import changes
    from plumbing.database import db

    with db.connection_context():
        clinic = Clinic.by_slug(SLUG)
        kind = RequestType.select().where((RequestType.clinic == clinic) & RequestType.active).first()
        record = PatientRecord.select().where(PatientRecord.clinic == clinic).first()
        for _ in range(count):
            changes.create(
                clinic,
                record.patient_id,
                kind.id,
                note="",
                slot=None,
                actor=Actor("operator", "webhook-bench"),
                now=datetime.now(UTC),
                then=lambda request: request,
            )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    per_round = max(1, args.changes // args.rounds)
    rate = per_round / args.seconds
    receiver = Receiver()
    rounds: list[tuple[str, dict, dict]] = []
    latencies: list[float] = []
    missing = 0
    with (
        tempfile.TemporaryDirectory(prefix="webhook-bench-") as tmp,
        RedisServer(Path(tmp)) as private_redis,
        HTTPSTestServer() as hooks,
    ):
        workdir = Path(tmp)
        hooks.route("/hooks", receiver, methods=("POST",))
        env = {
            **os.environ,
            "DATABASE_URL": PG,
            "REDIS_URL": private_redis.url,
            "SECRET_KEY": "bench" * 8,
            "LOG_LEVEL": "WARNING",
            "UNSAFE_ALLOW_LOOPBACK_FETCH": "1",
            "FETCH_CA_BUNDLE": hooks.ca_path,
            "RATE_LIMIT_HANDOFFS_PER_MINUTE": "100000000",
        }
        recreate_database(PG)
        manage(env, "migrate")
        manage(env, "demo", "--base-url", "https://bench.example")
        token = manage(
            env, "token", "create", "--name", "hook-bench", "--clinic", SLUG, "--scope", "read", "--scope", "write",
            "--expires-in-days", "30",
        )  # fmt: skip
        added = manage(env, "webhook", "add", "--clinic", SLUG, "--url", hooks.url("/hooks"))
        assert added.startswith("whsec_"), added
        from models import WebhookEndpoint
        from plumbing.database import bind_database, db

        bind_database(PG, pooled=False)
        with db.connection_context():
            endpoint = str(WebhookEndpoint.get().id)
        seed_requests(20)
        check, handoff = workdir / "check.lua", workdir / "handoff.lua"
        check.write_text(CHECK_SCRIPT)
        handoff.write_text(HANDOFF_SCRIPT)
        web, base_url = gunicorn({**env, "PYTHONPATH": str(ROOT)}, workdir / "web.log", workers=2, app="wsgi:app")
        # The webhooks' worker alone: no transcription competes with the deliveries or the web.
        import subprocess

        with open(workdir / "worker.log", "ab") as out:
            worker = subprocess.Popen(
                [sys.executable, "manage.py", "worker", "webhooks", "--no-warm-up"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wrk(base_url + BASE + "/switchboard/is-clinic-opened", token, check, 3, args.connections, threads=2)
            for label in ["off", "on"] * args.rounds:
                manage(env, "webhook", "enable" if label == "on" else "disable", endpoint, "--clinic", SLUG)
                changer = Changer(rate, per_round)
                changer.start()
                half = max(1, args.seconds // 2)
                sb = base_url + BASE + "/switchboard"
                routing = wrk(sb + "/is-clinic-opened", token, check, half, args.connections, threads=2)
                handing = wrk(sb + "/recording-complete", token, handoff, half, args.connections, threads=2)
                changer.join()
                rounds.append((label, routing, handing))
                if label == "on":
                    wait_until(lambda c=changer: set(c.committed) <= set(receiver.arrived), timeout=120, interval=0.2)
                    for event, at in changer.committed.items():
                        if event in receiver.arrived:
                            latencies.append(receiver.arrived[event] - at)
                        else:
                            missing += 1
                elif set(changer.committed) & set(receiver.arrived):
                    missing += 10**6  # delivered while disabled: a bug
        finally:
            stop(web)
            stop(worker)

    def median(label: str, index: int) -> float:
        return statistics.median(r[index]["p99"] for r in rounds if r[0] == label)

    routing_off, routing_on = median("off", 1), median("on", 1)
    handoff_off, handoff_on = median("off", 2), median("on", 2)
    print(
        f"\n== {len(latencies)} changes delivered at {rate:.0f}/s, 2 gunicorn gevent workers, one webhook worker "
        f"process with 2 webhook workers; wrk -t2 -c{args.connections}; load average {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} cores"
    )
    print(f"{'round':6s} {'check p50':>10s} {'check p99':>10s} {'hand-off p50':>13s} {'hand-off p99':>13s}  non-2xx")
    for label, routing, handing in rounds:
        print(
            f"{label:6s} {routing['p50']:10.2f} {routing['p99']:10.2f} {handing['p50']:13.2f} {handing['p99']:13.2f}"
            f"  {routing['non2xx'] + handing['non2xx']}"
        )
    figures = {
        "delivered": len(latencies),
        "missing": missing,
        "received_twice": receiver.twice,
        "commit_to_delivery_p50_ms": round(percentile(latencies, 0.5) * 1000, 1) if latencies else None,
        "commit_to_delivery_p99_ms": round(percentile(latencies, 0.99) * 1000, 1) if latencies else None,
        "commit_to_delivery_max_ms": round(max(latencies) * 1000, 1) if latencies else None,
        "routing_p99_off_ms": round(routing_off, 2),
        "routing_p99_on_ms": round(routing_on, 2),
        "routing_p99_on_over_off": round(routing_on / routing_off, 2),
        "handoff_p99_off_ms": round(handoff_off, 2),
        "handoff_p99_on_ms": round(handoff_on, 2),
        "handoff_p99_on_over_off": round(handoff_on / handoff_off, 2),
    }
    print(json.dumps(figures))
    failures = []
    if missing:
        failures.append(f"{missing} change(s) not delivered (or delivered while off)")
    if any(r[1]["non2xx"] or r[2]["non2xx"] for r in rounds):
        failures.append("non-2xx answers")
    print("verdict: " + ("every change delivered once" if not failures else "FAILED: " + "; ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
