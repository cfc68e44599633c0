"""Searches by change: `updatedAt` on requests and patients, and `updatedSince` paging in the
order of the changes, which passes over no change and repeats no version of a row however
the writes interleave with the reader's pages."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import timedelta

from models import Clinic, Patient, PatientRequest
from onboarding.writer import stable_id
from plumbing.clock import as_utc
from plumbing.database import db
from tests.support import bearer, issue_token, load
from tests.support.live_service import api, type_id
from tests.support.people import lifecycle_organization

SINCE = "2000-01-01T00:00:00Z"


def organization_with_patient() -> str:
    load(
        {
            **lifecycle_organization(),
            "patients": [{"key": "p", "firstName": "Eva", "lastName": "Malá", "records": [{"clinic": "clinic-a"}]}],
        }
    )
    return str(stable_id("patient", "test-org", "p"))


def search(app, token: str, body: dict) -> dict:
    return app.post_json(api() + "/patientRequests/search", body, headers=bearer(token)).json


def test_a_change_moves_a_request_after_the_readers_place_and_its_updated_at(app, clock):
    patient = organization_with_patient()
    token = issue_token(["clinic-a"], ["read", "write"])
    made = []
    for n in range(3):
        clock.set(clock() + timedelta(seconds=1))
        made.append(
            app.post_json(
                api() + "/patientRequests/create",
                {"patientId": patient, "userECRFId": type_id("PRESCRIPTION"), "userNote": str(n)},
                headers=bearer(token),
            ).json["data"]["id"]
        )
    first = search(app, token, {"filter": {"updatedSince": SINCE}, "pagination": {"limit": 10}})
    assert [r["id"] for r in first["data"]] == made, "in the order of their changes"
    cursor = first["pagination"]["nextCursor"]
    assert cursor, "a cursor on the last page too: the poller keeps its place"
    assert search(app, token, {"filter": {"updatedSince": SINCE}, "pagination": {"cursor": cursor}})["data"] == []
    clock.set(clock() + timedelta(minutes=5))
    app.patch_json(f"{api()}/patientRequests/{made[0]}", {"done": True}, headers=bearer(token))
    after = search(app, token, {"filter": {"updatedSince": SINCE}, "pagination": {"cursor": cursor}})["data"]
    assert [r["id"] for r in after] == [made[0]]
    assert after[0]["updatedAt"] == clock().isoformat(timespec="milliseconds").replace("+00:00", "Z")
    later = search(app, token, {"filter": {"updatedSince": after[0]["updatedAt"]}})["data"]
    assert [r["id"] for r in later] == [made[0]], "updatedSince leaves out what changed before"


def test_paging_by_change_during_concurrent_writes_passes_over_nothing_and_repeats_no_version(app):
    patient = organization_with_patient()
    token = issue_token(["clinic-a"], ["read"])
    with db.connection_context():
        clinic = Clinic.by_slug("clinic-a")
        ids = []
        for n in range(40):
            ids.append(uuid.uuid4())
            PatientRequest.insert(id=ids[-1], clinic=clinic, patient=patient, title=f"r{n}", user_note="v0").execute()
    stop = threading.Event()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with db.connection_context():
            n = 0
            while not stop.is_set():
                n += 1
                with db.atomic():
                    PatientRequest.update(user_note=f"w{seed}-{n}").where(
                        PatientRequest.id == rng.choice(ids)
                    ).execute()
                    time.sleep(rng.uniform(0, 0.02))  # overlapping transactions, committed out of order

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for w in writers:
        w.start()
    seen: list[tuple[str, str]] = []
    cursor = None
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline:
            body = {
                "filter": {"updatedSince": SINCE},
                "pagination": {"limit": 7, **({"cursor": cursor} if cursor else {})},
            }
            page = search(app, token, body)
            seen += [(r["id"], r["userNote"]) for r in page["data"]]
            cursor = page["pagination"]["nextCursor"] or cursor
    finally:
        stop.set()
        for w in writers:
            w.join(30)
    while True:
        page = search(app, token, {"filter": {"updatedSince": SINCE}, "pagination": {"limit": 50, "cursor": cursor}})
        if not page["data"]:
            break
        seen += [(r["id"], r["userNote"]) for r in page["data"]]
        cursor = page["pagination"]["nextCursor"]
    assert len(seen) == len(set(seen)), "no version of a row twice"
    with db.connection_context():
        final = {str(r.id): r.user_note for r in PatientRequest.select().where(PatientRequest.id.in_(ids))}
    assert sum(1 for note in final.values() if note != "v0") > 10, "the writers changed rows while the reader paged"
    last_seen = dict(seen)  # each row's last version read
    assert last_seen == final, "every row read, each in its last version: no change passed over"


def test_patients_search_by_change(app):
    organization_with_patient()
    token = issue_token(["clinic-a"], ["read", "write"])
    first = app.post_json(api() + "/patients/search", {"filter": {"updatedSince": SINCE}}, headers=bearer(token)).json
    assert [p["lastName"] for p in first["data"]] == ["Malá"]
    cursor = first["pagination"]["nextCursor"]
    with db.connection_context():
        Patient.update(last_name="Malá-Nová").where(Patient.last_name == "Malá").execute()
        assert as_utc(Patient.get(Patient.last_name == "Malá-Nová").updated_at) is not None
    again = app.post_json(
        api() + "/patients/search",
        {"filter": {"updatedSince": SINCE}, "pagination": {"cursor": cursor}},
        headers=bearer(token),
    ).json["data"]
    assert [p["lastName"] for p in again] == ["Malá-Nová"]
