"""The console's admin pages: only a clinic's admins open its settings; a staff
member, or an admin of another clinic, gets 403."""

from __future__ import annotations

from models import Clinic, StaffMembership
from plumbing.database import db
from tests.support.console import login


def make_admin(user, slug: str) -> None:
    with db.connection_context():
        StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == slug), role="admin")


def test_a_staff_member_gets_403_on_the_settings_and_sees_no_settings_link(staff, app):
    login(app, status=303)
    inbox = app.get("/console/")
    assert 'href="/console/settings"' not in inbox.text
    refused = app.get("/console/settings/", status=403)
    assert "správci" in refused.text and refused.headers["Cache-Control"] == "no-store"


def test_an_admin_opens_the_settings_of_their_own_clinic_only(staff, app):
    make_admin(staff, "clinic-b")
    login(app, status=303)
    assert 'href="/console/settings"' in app.get("/console/").text
    page = app.get("/console/settings/", status=200)
    assert "Clinic-B" in page.text, "the first clinic the user administers"
    app.get("/console/settings/?clinic=clinic-a", status=403)  # staff there, not admin
    app.get("/console/settings/?clinic=nowhere", status=403)


def test_the_settings_need_a_login(staff, app):
    assert app.get("/console/settings/", status=303).headers["Location"].endswith("/console/login")
