"""What the retention newly covers (docs/data-protection.md, "Retention"): the read trail's
rows past their clinic's period (the default when the clinic set none: never kept for ever),
and resolved requests made through the API past theirs (an open one stays); another clinic's
rows are left whole, and the round says what it deleted."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from models import AuditEvent, Clinic, PatientRequest, Reader, ReadEvent
from plumbing.clock import as_utc
from plumbing.database import db
from privacy import retention
from tests.support import bearer, issue_token, load
from tests.support.live_service import api, patient_id, signing_organization, type_id
from tests.test_data_lifecycle import LIFETIMES, storage

READER = Reader("staff", uuid.uuid4(), "bob@example.cz")


def test_the_read_trail_goes_after_its_period_and_by_default_after_two_years(app, clock):
    load(signing_organization())
    now = clock()
    with db.connection_context():
        a, b = Clinic.by_slug("clinic-a"), Clinic.by_slug("clinic-b")
        Clinic.update(retention_reads_days=30).where(Clinic.id == a.id).execute()
        for clinic, days in ((a, 31), (a, 29), (b, 31), (b, 729), (b, 731)):
            ReadEvent.record(
                READER, clinic.id, "request", [(uuid.uuid4(), uuid.uuid4())], at=now - timedelta(days=days)
            )
        done = retention.run(storage(), now, LIFETIMES)
        left = sorted((r.clinic_id == a.id, (as_utc(now) - as_utc(r.at)).days) for r in ReadEvent.select())
    assert left == [(False, 31), (False, 729), (True, 29)]
    assert done[a.id].reads == 1 and done[b.id].reads == 1


def test_resolved_api_requests_go_after_their_period_but_for_documents_and_open_ones(app, clock):
    load(signing_organization())
    token = issue_token(["clinic-a", "clinic-b"], ["read", "write"])
    made = {}
    for name, slug, who in (
        ("resolved", "clinic-a", "jana"),
        ("open", "clinic-a", "jana"),
        ("other", "clinic-b", "petr"),
    ):
        made[name] = app.post_json(
            api(slug) + "/patientRequests/create",
            {"patientId": patient_id(who), "userECRFId": type_id("SIGNED_CONSENT", slug)},
            headers=bearer(token),
        ).json["data"]["id"]
    for name, slug in (("resolved", "clinic-a"), ("other", "clinic-b")):
        app.patch_json(f"{api(slug)}/patientRequests/{made[name]}", {"done": True}, headers=bearer(token))
    with db.connection_context():
        Clinic.update(retention_api_requests_days=10).where(Clinic.slug.in_(["clinic-a"])).execute()
        Clinic.update(retention_api_requests_days=None).where(Clinic.slug == "clinic-b").execute()
        early = retention.run(storage(), clock() + timedelta(days=9), LIFETIMES)
        assert PatientRequest.select().count() == 3 and not any(d.api_requests for d in early.values())
        done = retention.run(storage(), clock() + timedelta(days=11), LIFETIMES)
        left = {str(r.id) for r in PatientRequest.select()}
        a = Clinic.by_slug("clinic-a")
        (event,) = AuditEvent.select().where(AuditEvent.action == "retention.delete")
    assert left == {made["open"], made["other"]}
    assert done[a.id].api_requests == 1
    assert event.clinic_id == a.id and json.loads(event.details)["api_requests"] == 1


def test_a_staff_account_disabled_past_its_period_goes_and_its_reads_stay_answerable(app, clock):
    from dataclasses import replace

    from models import StaffMembership, StaffUser
    from privacy import read_trail
    from staff.passwords import hash_password

    load(signing_organization())
    now = clock()
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        for email, disabled_days in (("gone@example.cz", 366), ("recent@example.cz", 364), ("active@example.cz", None)):
            user = StaffUser.create(
                email=email,
                name=email,
                password_hash=hash_password("a long password"),
                disabled_at=None if disabled_days is None else as_utc(now - timedelta(days=disabled_days)),
            )
            StaffMembership.create(user=user, clinic=a, role="staff")
            ReadEvent.record(Reader.of(user), a.id, "request", [(uuid.uuid4(), uuid.uuid4())], at=now)
        done = retention.run(storage(), now, replace(LIFETIMES, disabled_staff=timedelta(days=365)))
        assert sorted(u.email for u in StaffUser.select()) == ["active@example.cz", "recent@example.cz"]
        assert done[None].staff_users == 1
        assert StaffMembership.select().count() == 2
        # The breach question still answers for the deleted account, by the e-mail it read under.
        assert len(read_trail.reads_by([a.id], "gone@example.cz", None, None)) == 1
