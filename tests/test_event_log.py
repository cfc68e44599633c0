"""The event log (`GET /events`): the ids the webhooks carry, oldest first, paged by a cursor
that skips and repeats nothing while changes commit in any order; one clinic's events only."""

from __future__ import annotations

import random
import threading
import time
import uuid

from models import ChangeEvent, Clinic
from plumbing.database import db
from tests.support import assert_error, bearer, issue_token, load
from tests.support.live_service import api, type_id
from tests.support.people import lifecycle_organization


def read_all(app, token: str, limit: int, after: str | None = None) -> tuple[list[dict], str]:
    events: list[dict] = []
    while True:
        params = {"limit": str(limit), **({"after": after} if after else {})}
        page = app.get(api() + "/events", params, headers=bearer(token)).json
        events += page["data"]
        after = page["pagination"]["nextCursor"]
        if not page["pagination"]["hasMore"]:
            return events, after


def record(slug: str, kind: str = "request.updated") -> str:
    with db.connection_context():
        clinic = Clinic.by_slug(slug)
        with db.atomic():
            return str(ChangeEvent.record(clinic.id, kind, {"requestId": str(uuid.uuid4())}, clinic_now()))


def clinic_now():
    from plumbing import clock

    return clock.now()


def test_the_log_lists_the_changes_with_the_webhooks_ids_oldest_first_one_clinic_only(app):
    load(lifecycle_organization())
    token = issue_token(["clinic-a"], ["read", "write"])
    patient = app.post_json(
        api() + "/patients/import",
        {"externalId": "NIS-7", "externalIdSource": "nis", "firstName": "Eva", "lastName": "Malá"},
        headers=bearer(token),
    ).json["data"]["patient"]["id"]
    made = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": patient, "userECRFId": type_id("PRESCRIPTION"), "userNote": "x"},
        headers=bearer(token),
    ).json["data"]
    app.patch_json(f"{api()}/patientRequests/{made['id']}", {"done": True}, headers=bearer(token))
    record("clinic-b")  # another clinic's: never listed here
    events, cursor = read_all(app, token, limit=1)
    assert [(e["type"], e["data"]["requestId"]) for e in events] == [
        ("request.created", made["id"]),
        ("request.updated", made["id"]),
    ]
    with db.connection_context():
        ids = {str(e.id) for e in ChangeEvent.select().where(ChangeEvent.type != "x")}
    assert {e["id"] for e in events} < ids
    # The cursor of the end is kept: a poller asks again later and gets only what is new.
    again = app.get(api() + "/events", {"after": cursor}, headers=bearer(token)).json
    assert again["data"] == [] and again["pagination"] == {"nextCursor": cursor, "hasMore": False}
    later = record("clinic-a")
    assert [e["id"] for e in app.get(api() + "/events", {"after": cursor}, headers=bearer(token)).json["data"]] == [
        later
    ]
    created = app.get(api() + "/events", {"type": "request.created"}, headers=bearer(token)).json["data"]
    assert [e["type"] for e in created] == ["request.created"]


def test_a_bad_cursor_limit_or_type_is_400(app):
    load(lifecycle_organization())
    token = issue_token(["clinic-a"], ["read"])
    for params in ({"after": "not-a-cursor"}, {"limit": "0"}, {"limit": "501"}, {"limit": "x"}, {"type": "nope"}):
        (name,) = params
        answer = app.get(api() + "/events", params, headers=bearer(token), status=400)
        assert_error(answer, 400, "VALIDATION_FAILED", param=f"?{name}")


def test_an_event_committed_late_is_not_passed_over_by_a_reader(app):
    load(lifecycle_organization())
    token = issue_token(["clinic-a"], ["read"])
    started, release = threading.Event(), threading.Event()
    late: list[str] = []

    def slow_change() -> None:
        with db.connection_context():
            clinic = Clinic.by_slug("clinic-a")
            with db.atomic():
                late.append(
                    str(
                        ChangeEvent.record(clinic.id, "request.updated", {"requestId": str(uuid.uuid4())}, clinic_now())
                    )
                )
                started.set()
                release.wait(30)

    slow = threading.Thread(target=slow_change)
    slow.start()
    assert started.wait(30)
    quick = record("clinic-a")  # written after the slow one, committed before it
    seen, cursor = read_all(app, token, limit=10)
    assert [e["id"] for e in seen] == [quick]
    release.set()
    slow.join(30)
    rest, _ = read_all(app, token, limit=10, after=cursor)
    assert [e["id"] for e in rest] == [late[0]], "the event committed late comes after the cursor, not before it"


def test_paging_while_changes_commit_concurrently_skips_and_repeats_nothing(app):
    load(lifecycle_organization())
    token = issue_token(["clinic-a"], ["read"])
    written: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with db.connection_context():
            clinic = Clinic.by_slug("clinic-a")
            while not stop.is_set():
                with db.atomic():
                    made = str(
                        ChangeEvent.record(clinic.id, "request.updated", {"requestId": str(uuid.uuid4())}, clinic_now())
                    )
                    time.sleep(rng.uniform(0, 0.02))  # transactions overlap and commit out of order
                with lock:
                    written.append(made)

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for w in writers:
        w.start()
    seen: list[str] = []
    cursor = None
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        page = app.get(
            api() + "/events", {"limit": "7", **({"after": cursor} if cursor else {})}, headers=bearer(token)
        ).json
        seen += [e["id"] for e in page["data"]]
        cursor = page["pagination"]["nextCursor"] or cursor
    stop.set()
    for w in writers:
        w.join(30)
    rest, _ = read_all(app, token, limit=50, after=cursor)
    seen += [e["id"] for e in rest]
    assert len(written) > 50, "the writers wrote while the reader paged"
    assert len(seen) == len(set(seen)), "nothing repeated"
    assert set(seen) == set(written), f"nothing skipped: {len(set(written) - set(seen))} missing"
