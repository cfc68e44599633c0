"""One clock: the clock a test hands the service (`Config.clock`) is the time of everything
the service does, so moving it moves the whole service at once: the routing checks, a key's
expiry, the audit trail's times, the rows' own times and the retention that reads them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from models import AuditEvent, Clinic, PatientRequest
from plumbing.clock import as_utc
from plumbing.database import db
from tests.support import bearer, clinic, issue_token, load, organization, switchboard_url

MONDAY_MORNING = datetime(2027, 3, 1, 7, 30, tzinfo=UTC)  # 08:30 in Prague


def test_moving_the_clock_moves_every_part_of_the_service(app, clock):
    clock.set(MONDAY_MORNING)
    load(organization(clinic("clinic-a", officeHours=[{"weekday": "mon", "opens": "08:00", "closes": "16:00"}])))
    token = issue_token(["clinic-a"], ["read", "write"], expires_in=timedelta(hours=10))
    check = switchboard_url("clinic-a", "is-clinic-opened")
    assert app.post_json(check, {}, headers=bearer(token)).json == {"isOpen": True}
    patient = app.post_json(
        "/external/v1/clinics/clinic-a/patients/import",
        {"externalId": "x-1", "firstName": "Eva", "lastName": "Malá"},
        headers=bearer(token),
    ).json["data"]["patient"]
    with db.connection_context():
        event = AuditEvent.get(AuditEvent.action == "patient.import")
        assert as_utc(event.at) == as_utc(MONDAY_MORNING), "the trail's time is the service's clock"
        assert Clinic.by_slug("clinic-a").retention_call_requests_days == 90

    clock.set(MONDAY_MORNING + timedelta(hours=9))  # 17:30 in Prague: closed, the key still good
    assert app.post_json(check, {}, headers=bearer(token)).json == {"isOpen": False}
    clock.set(MONDAY_MORNING + timedelta(hours=10, seconds=1))  # the key's ten hours are over
    app.post_json(check, {}, headers=bearer(token), status=401)

    with db.connection_context():
        request = PatientRequest.create(clinic=Clinic.by_slug("clinic-a"), patient=patient["id"], title="x")
        assert as_utc(request.created_at) == as_utc(clock()), "a row's default time too"
