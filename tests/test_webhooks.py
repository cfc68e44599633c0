"""Integrators are told what changed: an event per change, written in the change's transaction,
and each event delivered to the clinic's webhook endpoints as Standard Webhooks says, through
the outbox.

- every change of the list is exactly one event; a change rolled back is none;
- a delivery verifies with the `standardwebhooks` library, carries the event's id as
  `webhook-id`, and is signed by both secrets during a rotation's overlap;
- a receiver down for ten minutes gets every event afterwards, each with its original id
  (by the test's clock: the delivery job run in this process, as tests/support/outbox.py does);
- 410 disables the endpoint; an endpoint URL must be public https (the server-side fetch rules);
- through real processes (a worker started as the Procfile starts it, its webhook workers,
  a receiver on 127.0.0.1): deliveries arrive within seconds, and one clinic's endpoint that
  never answers delays another clinic's by less than a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from rq import Worker
from standardwebhooks import Webhook

from config import Config
from jobs import outbox
from jobs import webhooks as webhook_jobs
from jobs.context import JobContext
from models import Actor, ChangeEvent, Clinic, Outbox, PatientRequest, StaffMembership, StaffUser, WebhookEndpoint
from models.change_events import TOPIC
from patient_requests import changes
from plumbing.database import db
from plumbing.errors import Invalid
from privacy import erasure
from storage import LocalStorage
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY, bearer, issue_token, load
from tests.support.https_server import HTTPSTestServer, TestRequest, TestResponse, hang
from tests.support.live_service import api, type_id
from tests.support.log_audit import remember
from tests.support.outbox import FUTURE
from tests.support.people import lifecycle_organization, new_person, seed
from tests.support.processes import stop_process
from tests.support.servers import wait_until
from tests.support.tiers import needs
from voicemail import recordings
from webhooks import endpoints

STAFF = Actor("staff", "anna@example.cz")
OPERATOR = Actor("operator", "ops")


@dataclass
class Receiver:
    """An integrator's receiver: what it got (headers, body, when), answering `status`."""

    status: int = 200
    got: list[tuple[dict[str, str], bytes, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, req: TestRequest) -> TestResponse:
        with self.lock:
            status = self.status
            if 200 <= status < 300:
                self.got.append((req.headers, req.body, time.monotonic()))
        return TestResponse(status=status, body=b"ok")

    def ids(self) -> list[str]:
        with self.lock:
            return [headers["webhook-id"] for headers, _, _ in self.got]

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(body) for _, body, _ in self.got]


def hook_config(config: Config, ca: str, **changes: Any) -> Config:
    values = {
        "database_url": config.database_url,
        "redis_url": config.redis_url,
        "secret_key": SECRET_KEY,
        "clock": config.clock,
        "db_pool_size": 4,
        "unsafe_allow_loopback_fetch": True,
        "fetch_ca_bundle": ca,
        **changes,
    }
    return Config(**values)  # type: ignore[arg-type]


@pytest.fixture
def ca_file(https_server: HTTPSTestServer) -> str:
    return https_server.ca_path


def add_endpoint(slug: str, url: str, settings: Config, types: list[str] | None = None) -> tuple[str, str]:
    with db.connection_context():
        endpoint, secret = endpoints.add(Clinic.by_slug(slug), url, types or [], settings, OPERATOR, settings.clock())
    remember(secret, "a webhook signing secret")
    return str(endpoint.id), secret


def events_by_type() -> dict[str, int]:
    with db.connection_context():
        counted: dict[str, int] = {}
        for event in ChangeEvent.select():
            counted[event.type] = counted.get(event.type, 0) + 1
        return counted


def deliver_all(settings: Config) -> int:
    """Every endpoint's due deliveries, by the settings' clock, as the webhook workers would."""
    delivered = 0
    with db.connection_context():
        due = webhook_jobs.due_endpoints(settings.clock())
    for endpoint in due:
        delivered += webhook_jobs.deliver_due(endpoint, settings)
    return delivered


# --- an event per change, in its transaction ------------------------------------------------


def test_every_change_of_the_list_is_exactly_one_event_and_a_rolled_back_one_is_none(app, clock):
    token = issue_token_after_load()
    person = seed(app, token, new_person(), clock())
    seeded = events_by_type()
    # Two requests through the API, one from a voice message; a patch (a tag and a note); a document.
    assert seeded == {"request.created": 3, "request.updated": 1, "attachment.added": 1}, seeded
    with db.connection_context():
        created = ChangeEvent.select().where(ChangeEvent.type == "request.created")
        assert sorted(e.payload["source"] for e in created) == ["api", "api", "voicemail"]
        signed = PatientRequest.get_by_id(person.requests["signed"])
        message = PatientRequest.get_by_id(person.requests["message"])
        now = clock()
        changes.resolve(signed, STAFF, now)
        changes.resolve(signed, STAFF, now)  # nothing changes: no event
        changes.reopen(signed, STAFF, now)
        changes.set_note(signed, "volat ráno", STAFF, now)
        (tag,) = [t.tag_id for t in signed.request_tags]
        changes.remove_tag(signed, tag, STAFF, now)
        changes.confirm_type(message, None, STAFF, now)
        PatientRequest.update(urgent=True).where(PatientRequest.id == message.id).execute()
        changes.clear_urgent(PatientRequest.get_by_id(message.id), STAFF, now)
        recordings.remember_gone(message.call_id, "deleted", now)
        recordings.remember_gone(message.call_id, "deleted", now)  # known already: no event
        # A change that rolls back leaves no event (and no delivery).
        with pytest.raises(RuntimeError), db.atomic():
            changes.resolve(PatientRequest.get_by_id(signed.id), STAFF, now)
            raise RuntimeError("the transaction fails after the change")
        assert PatientRequest.get_by_id(signed.id).done_at is None, "rolled back"
    after = events_by_type()
    assert after == {
        "request.created": 3,
        "request.updated": 1 + 6,  # resolve, reopen, note, tag removed, type confirmed, urgency cleared
        "attachment.added": 1,
        "recording.unavailable": 1,
    }, after
    with db.connection_context():
        updates = [
            e.payload["changed"]
            for e in ChangeEvent.select().where(ChangeEvent.type == "request.updated").order_by(ChangeEvent.seq)
        ]
        erasure.erase(
            uuid.UUID(person.patient_id),
            OPERATOR,
            clock(),
            LocalStorage("var/storage", signing_key=b"x" * 16, public_base_url="http://x"),
        )
    assert updates == [["tags", "note"], ["done"], ["done"], ["note"], ["tags"], ["type"], ["urgent"]]
    # The patient had records in two clinics: each clinic's integrators are told.
    assert events_by_type()["patient.erased"] == 2
    with db.connection_context():
        for event in ChangeEvent.select():
            text = event.data
            assert person.last not in text and person.phone not in text and person.note not in text, "ids only"


def issue_token_after_load() -> str:
    load(lifecycle_organization())
    return issue_token(["clinic-a", "clinic-b"], ["read", "write"])


def test_an_event_for_an_endpoint_that_wants_it_is_an_outbox_row_in_the_same_transaction(app, clock, config, ca_file):
    load(lifecycle_organization())
    settings = hook_config(config, ca_file)
    wants_all, _ = add_endpoint("clinic-a", "https://hooks.example.com/a", settings)
    only_erased, _ = add_endpoint("clinic-a", "https://hooks.example.com/b", settings, ["patient.erased"])
    add_endpoint("clinic-b", "https://hooks.example.com/c", settings)
    with db.connection_context():
        clinic_a = Clinic.by_slug("clinic-a")
        with pytest.raises(RuntimeError), db.atomic():
            ChangeEvent.record(clinic_a.id, "request.created", {"requestId": "x"}, clock())
            raise RuntimeError
        assert not Outbox.select().where(Outbox.topic == TOPIC).exists(), "rolled back with its event"
        event_id = ChangeEvent.record(clinic_a.id, "request.created", {"requestId": "x"}, clock())
        rows = list(Outbox.select().where(Outbox.topic == TOPIC))
    assert [(r.data["event"], r.data["endpoint"]) for r in rows] == [(str(event_id), wants_all)]
    assert only_erased != wants_all


# --- endpoints: URL rules, secrets ----------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",  # not https
        "https://10.0.0.5/x",  # an address, a private one
        "https://localhost/x",
        "https://hooks.internal/x",
        "https://user:pw@hooks.example.com/x",
    ],
)
def test_an_endpoint_url_is_held_to_the_server_side_fetch_rules(app, config, url):
    load(lifecycle_organization())
    with db.connection_context(), pytest.raises(Invalid):
        endpoints.add(Clinic.by_slug("clinic-a"), url, [], config, OPERATOR, config.clock())


def test_the_secret_is_kept_encrypted_and_shown_once(app, config):
    load(lifecycle_organization())
    endpoint_id, secret = add_endpoint("clinic-a", "https://hooks.example.com/a", config)
    assert secret.startswith("whsec_")
    with db.connection_context():
        row = WebhookEndpoint.get_by_id(endpoint_id)
    assert secret not in row.secret_encrypted
    assert secret.removeprefix("whsec_") not in json.dumps(row.__data__, default=str)
    assert config.secret_keys.decrypt(row.secret_encrypted) == secret


# --- delivery, by the test's clock ----------------------------------------------------------


def test_a_receiver_down_for_ten_minutes_gets_every_event_afterwards_with_its_original_id(
    app, clock, config, https_server
):
    clock.set(FUTURE)  # rows due in 2100: a worker of the session, if one runs, leaves them to this test
    load(lifecycle_organization())
    settings = hook_config(config, https_server.ca_path)
    receiver = Receiver(status=503)
    https_server.route("/hooks", receiver, methods=("POST",))
    endpoint_id, secret = add_endpoint("clinic-a", https_server.url("/hooks"), settings)
    with db.connection_context():
        clinic_a = Clinic.by_slug("clinic-a").id
        sent = [
            str(ChangeEvent.record(clinic_a, "request.created", {"requestId": str(uuid.uuid4())}, clock()))
            for _ in range(5)
        ]
    start = clock()
    # Down: one try, then the endpoint is paused (one try per step of the schedule, not per event).
    assert deliver_all(settings) == 0
    assert https_server.request_count("/hooks") == 1
    assert deliver_all(settings) == 0 and https_server.request_count("/hooks") == 1, "paused: not tried again"
    clock.set(start + timedelta(seconds=6))
    assert deliver_all(settings) == 0 and https_server.request_count("/hooks") == 2
    clock.set(start + timedelta(minutes=5, seconds=7))
    assert deliver_all(settings) == 0 and https_server.request_count("/hooks") == 3
    # Ten minutes after it went down the receiver answers again; the next step of the
    # schedule (30 minutes) delivers everything that waited, each once, with its own id.
    receiver.status = 200
    clock.set(start + timedelta(minutes=10))
    assert deliver_all(settings) == 0, "still paused until the schedule's next step"
    clock.set(start + timedelta(minutes=36))
    assert deliver_all(settings) == 5
    assert sorted(receiver.ids()) == sorted(sent)
    for headers, body, _ in receiver.got:
        expected = Webhook(secret).sign(headers["webhook-id"], clock(), body.decode())
        assert headers["webhook-signature"] == expected, "signed with the library's scheme, at the try's time"
        assert headers["webhook-timestamp"] == str(int(clock().timestamp()))
    assert {e["id"] for e in receiver.events()} == set(sent), "the body's id is the webhook-id"
    with db.connection_context():
        rows = list(Outbox.select().where(Outbox.topic == TOPIC))
        endpoint = WebhookEndpoint.get_by_id(endpoint_id)
    assert {r.state for r in rows} == {"done"}
    assert endpoint.failures == 0 and endpoint.paused_until is None
    assert deliver_all(settings) == 0, "nothing twice"


def test_410_disables_the_endpoint_and_a_rotation_signs_with_both_secrets(app, clock, config, https_server):
    clock.set(FUTURE)
    load(lifecycle_organization())
    settings = hook_config(config, https_server.ca_path)
    receiver = Receiver()
    https_server.route("/hooks", receiver, methods=("POST",))
    endpoint_id, old = add_endpoint("clinic-a", https_server.url("/hooks"), settings)
    with db.connection_context():
        admin = StaffUser.create(email="anna@example.cz", name="Anna", password_hash="x")
        StaffMembership.create(user=admin, clinic=Clinic.by_slug("clinic-a"), role="admin")
        endpoint = WebhookEndpoint.get_by_id(endpoint_id)
        new = endpoints.rotate(endpoint, settings, OPERATOR, clock())
        remember(new, "a webhook signing secret")
        ChangeEvent.record(endpoint.clinic_id, "patient.erased", {"patientId": str(uuid.uuid4())}, clock())
    assert deliver_all(settings) == 1
    (headers, body, _) = receiver.got[0]
    signatures = headers["webhook-signature"].split(" ")
    assert signatures == [
        Webhook(new).sign(headers["webhook-id"], clock(), body.decode()),
        Webhook(old).sign(headers["webhook-id"], clock(), body.decode()),
    ]
    receiver.status = 410
    with db.connection_context():
        for _ in range(2):
            ChangeEvent.record(endpoint.clinic_id, "patient.erased", {"patientId": str(uuid.uuid4())}, clock())
    assert deliver_all(settings) == 0
    with db.connection_context():
        endpoint = WebhookEndpoint.get_by_id(endpoint_id)
        states = sorted(r.state for r in Outbox.select().where(Outbox.topic == TOPIC))
        told = Outbox.select().where(Outbox.topic == "webhook.disabled").count()
    assert endpoint.disabled_reason == "gone"
    assert states == ["done", "failed", "failed"]
    assert told == 1, "its administrators are told"
    with db.connection_context():
        (notice,) = Outbox.select().where(Outbox.topic == "webhook.disabled")
    context = JobContext.build(settings)
    try:
        assert outbox.deliver(notice.id, context=context) == "told"
    finally:
        context.relay.close()
    with db.connection_context():
        mails = [r.data for r in Outbox.select().where(Outbox.topic == "mail")]
    assert [(m["template"], m["reason"]) for m in mails] == [("webhook_disabled", "gone")]
    assert https_server.request_count("/hooks") == 2, "nothing sent after the 410"


# --- real processes -------------------------------------------------------------------------


@pytest.fixture
@needs("rq_worker")
def webhook_worker(app, https_server, tmp_path) -> Iterator[subprocess.Popen]:
    """`python manage.py worker webhooks` as a Procfile would start one (its relays and its
    webhook workers), on the wall clock, allowed to call the receiver on 127.0.0.1."""
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "UNSAFE_ALLOW_LOOPBACK_FETCH": "1",
        "FETCH_CA_BUNDLE": https_server.ca_path,
        "WEBHOOK_WORKERS": "2",
        "LOG_LEVEL": "INFO",
    }
    log = tmp_path / "webhook-worker.log"
    connection = redis.Redis.from_url(REDIS_URL)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "worker", "webhooks", "--no-warm-up"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def webhook_workers() -> int:
        return sum(1 for w in Worker.all(connection=connection) if w.queue_names() == ["webhooks"])

    try:
        assert wait_until(lambda: proc.poll() is not None or webhook_workers() >= 3, timeout=120, interval=0.2), (
            log.read_text()[-3000:]
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        yield proc
    finally:
        stop_process(proc, 30)


def record_in_its_own_transaction(slug: str) -> tuple[str, float]:
    """A request resolved through the change's own path (an event committed); its event id
    and the monotonic time of the commit."""
    with db.connection_context():
        clinic = Clinic.by_slug(slug)
        with db.atomic():
            event = ChangeEvent.record(clinic.id, "request.updated", {"requestId": str(uuid.uuid4())}, now())
        return str(event), time.monotonic()


def now() -> datetime:
    return datetime.now(UTC)


def test_a_real_worker_delivers_and_the_receiver_verifies_with_standardwebhooks(
    app, clock, config, https_server, webhook_worker
):
    load(lifecycle_organization())
    token = issue_token(["clinic-a"], ["read", "write"])
    settings = hook_config(config, https_server.ca_path, clock=now)
    receiver = Receiver()
    https_server.route("/hooks", receiver, methods=("POST",))
    _, secret = add_endpoint("clinic-a", https_server.url("/hooks"), settings)
    patient = str(
        app.post_json(api() + "/patients/import", IMPORT, headers=bearer(token)).json["data"]["patient"]["id"]
    )
    created = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": patient, "userECRFId": type_id("PRESCRIPTION"), "userNote": "x"},
        headers=bearer(token),
    ).json["data"]
    app.patch_json(f"{api()}/patientRequests/{created['id']}", {"done": True}, headers=bearer(token))
    assert wait_until(lambda: len(receiver.got) >= 2, timeout=30, interval=0.05), receiver.got
    verifier = Webhook(secret)
    verified = [verifier.verify(body, headers) for headers, body, _ in receiver.got]
    assert [(v["type"], v["data"]["requestId"]) for v in verified] == [
        ("request.created", created["id"]),
        ("request.updated", created["id"]),
    ]
    assert verified[1]["data"]["changed"] == ["done"] and verified[0]["clinicSlug"] == "clinic-a"
    with pytest.raises(Exception, match="signature"):
        Webhook(endpoints.new_secret()).verify(receiver.got[0][1], receiver.got[0][0])


IMPORT = {"externalId": "NIS-1", "externalIdSource": "nis", "firstName": "Jana", "lastName": "Dvořáková"}


def test_one_clinics_endpoint_that_never_answers_does_not_delay_another_clinics_by_a_second(
    app, config, https_server, webhook_worker
):
    load(lifecycle_organization())
    settings = hook_config(config, https_server.ca_path, clock=now)
    receiver = Receiver()
    https_server.route("/b", receiver, methods=("POST",))
    https_server.route("/dead", hang(60), methods=("POST",))
    add_endpoint("clinic-a", https_server.url("/dead"), settings)
    add_endpoint("clinic-b", https_server.url("/b"), settings)

    def latency() -> float:
        before = len(receiver.got)
        event, committed = record_in_its_own_transaction("clinic-b")
        assert wait_until(lambda: len(receiver.got) > before, timeout=30, interval=0.01)
        assert receiver.ids()[-1] == event
        return receiver.got[-1][2] - committed

    baseline = sorted(latency() for _ in range(5))[2]
    # clinic-a's endpoint accepts the connection and never answers: five events wait on it.
    for _ in range(5):
        record_in_its_own_transaction("clinic-a")
    assert wait_until(lambda: https_server.request_count("/dead") >= 1, timeout=10, interval=0.02)
    beside = [latency() for _ in range(5)]
    assert max(beside) < baseline + 1.0, f"baseline {baseline:.3f} s, beside a dead endpoint {beside}"
    with db.connection_context():
        pending_a = (
            Outbox.select()
            .where(
                (Outbox.topic == TOPIC)
                & (Outbox.state == "pending")
                & (Outbox.clinic_id == Clinic.by_slug("clinic-a").id)
            )
            .count()
        )
    assert pending_a == 5, "the dead endpoint's events wait for it"
    assert https_server.request_count("/dead") == 1, "tried once, then paused: not once per event"


def test_the_log_keeps_an_event_thirty_days(app, clock):
    load(lifecycle_organization())
    with db.connection_context():
        clinic = Clinic.by_slug("clinic-a")
        ChangeEvent.record(clinic.id, "patient.erased", {"patientId": "p"}, clock())
        clock.set(clock() + timedelta(days=29))
        assert ChangeEvent.purge(clock()) == 0
        clock.set(clock() + timedelta(days=2))
        assert ChangeEvent.purge(clock()) == 1
