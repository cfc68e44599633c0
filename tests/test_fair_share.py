"""Fair share: one clinic's burst of calls does not make the other clinics wait.

The relay keeps at most `RELAY_PER_CLINIC` calls of a clinic in flight and claims the
clinics' calls in turn (`Call.claim_unqueued`); a job's end wakes it (`RelayWakeUp.job_ended`).
The claim and the relay on PostgreSQL and SQLite (`bin/run`'s) with the outbox of
tests/test_relay.py; then end to end: 20 calls of one clinic, then one of another, through
the API, the session's real worker, Redis and PostgreSQL.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
import webtest

from config import Config
from jobs.context import RelayWakeUp
from jobs.relay import CallRelay, job_id, requeue_pending
from models import Call, Clinic, PatientRequest
from plumbing import clock
from plumbing.clock import utc_now
from plumbing.database import db
from tests.support import bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.handoffs import audio
from tests.support.https_server import static
from tests.support.relay import queued_job_ids, relay_thread
from tests.support.servers import wait_until

PER_CLINIC = 2


def store(slug: str, count: int, **fields: object) -> list[uuid.UUID]:
    """`count` calls of the clinic, each received a millisecond after the one before."""
    with db.connection_context():
        clinic_id = Clinic.get(Clinic.slug == slug).id
        start_at = utc_now()
        last = Call.select(Call.received_at).order_by(Call.received_at.desc()).first()
        if last is not None and last.received_at >= start_at:
            start_at = last.received_at + timedelta(milliseconds=1)
        rows = [
            Call.row_for(
                Clinic(id=clinic_id),
                {
                    "call_sid": f"CA-fair-{uuid.uuid4().hex}",
                    "call_from": "+12015550198",
                    "call_to": "+12015550100",
                    **fields,
                },
                None,
                start_at,
            )
            for _ in range(count)
        ]
        for i, row in enumerate(rows):
            row["received_at"] = start_at + timedelta(milliseconds=i)
        Call.insert_rows(rows)
        return [row["id"] for row in rows]


def finish(*ids: uuid.UUID) -> None:
    with db.connection_context():
        Call.update(state="done").where(Call.id.in_(list(ids))).execute()


def claim(per_clinic: int = PER_CLINIC) -> list[uuid.UUID]:
    with db.connection_context():
        return Call.claim_unqueued(clock.now(), 200, per_clinic)


@pytest.fixture
def two_clinics(outbox) -> str:
    """The outbox's clinic ("relay-clinic") is A; B is another clinic beside it."""
    load(organization(clinic("clinic-b", tz="America/New_York", country="US"), slug="org-b"))
    return outbox


def test_a_clinic_has_at_most_its_share_in_flight_and_clinics_take_turns(two_clinics):
    a = store("relay-clinic", 10)
    [b] = store("clinic-b", 1)
    # Turns: each clinic's first call, then each clinic's second; B's one call comes
    # before A's second although A's ten are older.
    assert claim() == [a[0], b, a[1]]
    assert claim() == [], "A has its two in flight, B has nothing more"
    finish(a[0])
    assert claim() == [a[2]], "one of A's left flight: its next one, only that"
    [b2, b3] = store("clinic-b", 2)
    finish(b)
    assert claim() == [b2, b3]


def test_a_call_waiting_for_a_download_retry_holds_no_place(two_clinics):
    a = store("relay-clinic", 4)
    assert claim() == a[:2]
    with db.connection_context():  # as the job leaves it when it raises for RQ's retry
        Call.update(fetch_error="timed out").where(Call.id == a[0]).execute()
    assert claim() == [a[2]]


def test_without_a_share_the_claim_is_oldest_first(two_clinics):
    a = store("relay-clinic", 5)
    [b] = store("clinic-b", 1)
    assert claim(per_clinic=0) == [*a, b]


def test_the_sweep_leaves_calls_not_claimed_yet_to_the_relays_turns(two_clinics, queue, relay_config):
    """A worker's first sweep (and `manage.py requeue`) re-queues claimed calls whose job is
    gone; queueing a whole unclaimed backlog there would put it before the other clinics."""
    a = store("relay-clinic", 5)
    assert requeue_pending(queue, relay_config) == 0
    assert claim() == a[:2]
    assert requeue_pending(queue, relay_config) == 2  # claimed, and no job holds them
    assert sorted(queued_job_ids(queue)) == sorted(job_id(i) for i in a[:2])


def test_the_relay_queues_in_turns_and_nothing_is_lost(two_clinics, queue, relay_config):
    """Every call is queued in the end, each once, while each clinic has at most its share
    queued at a time, and the other clinic's call goes to the front half of the queue."""
    config = Config(**{**relay_config.__dict__, "relay_per_clinic": PER_CLINIC})
    a = store("relay-clinic", 7)
    [b] = store("clinic-b", 1)
    relay = CallRelay(queue, config, RelayWakeUp(), batch=2)  # turns hold across the claim's batches
    assert relay.relay_new() == 3
    assert queued_job_ids(queue) == [job_id(a[0]), job_id(b), job_id(a[1])]
    seen = list(queued_job_ids(queue))
    while len(seen) < 8:
        finish(*[Call.id.python_value(j.removeprefix("ingest-call-")) for j in queue.get_job_ids()])
        queue.empty()
        assert relay.relay_new() <= PER_CLINIC
        seen += queued_job_ids(queue)
    assert sorted(seen) == sorted(job_id(i) for i in [*a, b]) and len(set(seen)) == 8


def test_two_relays_at_once_keep_every_clinic_within_its_share(two_clinics, queue, relay_config):
    """Two relays claim side by side while jobs end: every call is queued exactly once, and
    no clinic ever has more than its share queued and not done."""
    config = Config(**{**relay_config.__dict__, "relay_per_clinic": PER_CLINIC})
    ids = {"relay-clinic": store("relay-clinic", 12), "clinic-b": store("clinic-b", 9)}
    clinic_of = {call_id: slug for slug, calls in ids.items() for call_id in calls}
    relays = [CallRelay(queue, config, RelayWakeUp(), batch=3), CallRelay(queue, config, RelayWakeUp(), batch=3)]
    counts: list[int] = []
    ever: set[str] = set()
    for _ in range(60):
        threads = [threading.Thread(target=lambda r=r: counts.append(r.relay_new())) for r in relays]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        in_flight = [Call.id.python_value(j.removeprefix("ingest-call-")) for j in queue.get_job_ids()]
        for slug in ids:
            assert sum(clinic_of[i] == slug for i in in_flight) <= PER_CLINIC, (slug, in_flight)
        ever |= set(queue.get_job_ids())
        if not in_flight:
            break
        finish(in_flight[0])  # one job ends a round, as a worker finishes them
        queue.remove(job_id(in_flight[0]))
    assert sum(counts) == len(clinic_of) and ever == {job_id(i) for i in clinic_of}


def test_a_job_that_ends_wakes_the_relay_long_before_its_poll(two_clinics, queue, relay_config):
    """With one call of a clinic in flight at a time, the next is queued as soon as a job
    of this process ends (as `WakesRelay` signals it), not at the relay's poll."""
    config = Config(**{**relay_config.__dict__, "relay_per_clinic": 1})
    [first, second] = store("relay-clinic", 2)
    wake = RelayWakeUp()
    with relay_thread(queue, config, wake, poll_every=60.0, sweep_every=3600.0):
        assert wait_until(lambda: queued_job_ids(queue) == [job_id(first)], timeout=10, interval=0.05)
        finish(first)
        wake.job_ended()
        assert wait_until(lambda: job_id(second) in queued_job_ids(queue), timeout=5, interval=0.05), (
            "the next call was not queued within 5 s although the relay polls only every 60 s"
        )


# --- end to end: the API, the session's worker, Redis, PostgreSQL ---------------------------

BURST = 20


def test_another_clinics_call_is_not_kept_behind_a_burst(app, handoff: webtest.TestApp, https_server, worker):
    """Clinic A hands off 20 calls at once, then clinic B one. B's request is made after at
    most the share (2) of A's calls beyond those done by the time B's call was stored,
    long before A's last ones; before the fair share it was made after all 20."""
    load(
        organization(
            clinic("clinic-a", tz="America/New_York", country="US", language="en"),
            clinic("clinic-b", tz="America/New_York", country="US", language="en"),
        )
    )
    https_server.route("/silence.wav", static(audio("silence_digital.wav"), "audio/wav"))
    url = https_server.url("/silence.wav")
    tokens = {slug: issue_token([slug], ["write"]) for slug in ("clinic-a", "clinic-b")}

    def hand_off(slug: str, sid: str) -> None:
        handoff.post_json(
            switchboard_url(slug, "recording-complete"),
            {"CallSid": sid, "CallFrom": "+12015550198", "CallTo": "+12015550100", "RecordingUrl": url},
            headers=bearer(tokens[slug]),
        )

    for i in range(BURST):
        hand_off("clinic-a", f"CA-burst-{i}")
    hand_off("clinic-b", "CA-other")
    with db.connection_context():
        done_before = Call.select().where((Call.state == "done") & Call.call_sid.startswith("CA-burst-")).count()

    def all_made() -> bool:
        with db.connection_context():
            return PatientRequest.select().count() == BURST + 1

    assert wait_until(all_made, timeout=300, interval=0.2), "not every call became a request"
    with db.connection_context():
        order = [
            r.call.call_sid
            for r in PatientRequest.select(PatientRequest, Call).join(Call).order_by(PatientRequest.created_at)
        ]
    position = order.index("CA-other")
    assert position <= done_before + PER_CLINIC, (position, done_before, order)
    assert position < BURST - PER_CLINIC, f"B came among A's last {PER_CLINIC}: {order}"
