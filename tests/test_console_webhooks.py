"""The webhooks page, /console/settings/webhooks, through WebTest: admins only; an endpoint
added (its secret shown once, after a 303), rotated, disabled and enabled, removed; a
delivery sent again; every write with its CSRF token and audited; an address the server may
not call refused."""

from __future__ import annotations

import pytest

from models import AuditEvent, ChangeEvent, Clinic, Outbox, StaffMembership, WebhookEndpoint
from models.change_events import TOPIC
from plumbing.database import db
from tests.support.console import form_to, login

PAGE = "/console/settings/webhooks"


@pytest.fixture
def admin(staff, app):
    with db.connection_context():
        StaffMembership.update(role="admin").where(StaffMembership.user == staff).execute()
    login(app, status=303)
    return staff


def add(app, url: str = "https://hooks.example.com/clinic", types: tuple[str, ...] = (), status: int = 303):
    form = form_to(app.get(PAGE + "?clinic=clinic-a"), PAGE)
    form["url"] = url
    for t in types:
        form[f"type_{t}"] = True
    return form.submit(status=status)


def actions() -> list[str]:
    with db.connection_context():
        return [
            e.action
            for e in AuditEvent.select().where(AuditEvent.action.startswith("webhook.")).order_by(AuditEvent.id)
        ]


def test_an_admin_adds_an_endpoint_whose_secret_is_shown_once_and_kept_encrypted(admin, app, config):
    answer = add(app, types=("request.created", "patient.erased"))
    assert answer.headers["Location"].endswith(PAGE + "?clinic=clinic-a#secret-title")
    page = answer.follow()
    secret = page.html.find("code", {"id": "new-secret"}).text
    assert secret.startswith("whsec_") and "zobrazí se jen teď" in page.text
    assert page.headers["Cache-Control"] == "no-store"
    again = app.get(PAGE + "?clinic=clinic-a")
    assert secret not in again.text and "new-secret" not in again.text, "shown once"
    with db.connection_context():
        endpoint = WebhookEndpoint.get()
    assert endpoint.types == ["patient.erased", "request.created"]
    assert config.secret_keys.decrypt(endpoint.secret_encrypted) == secret and secret not in endpoint.secret_encrypted
    assert actions() == ["webhook.add"]


def test_an_address_the_server_may_not_call_is_refused_with_400(admin, app):
    for url in ("http://hooks.example.com/x", "https://192.168.1.10/x", "https://intranet.local/x"):
        page = add(app, url=url, status=400)
        assert page.html.find(class_="error")
    with db.connection_context():
        assert not WebhookEndpoint.select().exists()


def test_rotate_disable_enable_send_again_and_remove_each_audited(admin, app, clock):
    add(app).follow()
    with db.connection_context():
        endpoint = WebhookEndpoint.get()
        old = endpoint.secret_encrypted
        ChangeEvent.record(Clinic.by_slug("clinic-a").id, "patient.erased", {"patientId": None}, clock())

    def do(action: str):
        return form_to(app.get(PAGE + "?clinic=clinic-a"), f"/{endpoint.id}/action") if action == "first" else None

    page = app.get(PAGE + "?clinic=clinic-a")
    forms = [f for f in page.forms.values() if (f.action or "").endswith(f"/{endpoint.id}/action")]
    assert [f["do"].value for f in forms] == ["rotate", "disable", "remove"]
    rotated = forms[0].submit(status=303).follow()
    assert rotated.html.find("code", {"id": "new-secret"}).text.startswith("whsec_")
    with db.connection_context():
        endpoint = WebhookEndpoint.get()
    assert endpoint.previous_secret_encrypted == old and endpoint.secret_encrypted != old
    forms = [f for f in app.get(PAGE + "?clinic=clinic-a").forms.values() if (f.action or "").endswith("/action")]
    forms[1].submit(status=303)
    with db.connection_context():
        assert WebhookEndpoint.get().disabled_reason == "by_admin"
    forms = [f for f in app.get(PAGE + "?clinic=clinic-a").forms.values() if (f.action or "").endswith("/action")]
    assert forms[1]["do"].value == "enable"
    forms[1].submit(status=303)
    page = app.get(PAGE + "?clinic=clinic-a")
    (again,) = [f for f in page.forms.values() if (f.action or "").endswith("/again")]
    assert "patient.erased" in page.text, "the recent delivery, with its event's type"
    again.submit(status=303)
    with db.connection_context():
        assert Outbox.select().where(Outbox.topic == TOPIC).count() == 2
    forms = [f for f in app.get(PAGE + "?clinic=clinic-a").forms.values() if (f.action or "").endswith("/action")]
    forms[2].submit(status=303)
    with db.connection_context():
        assert not WebhookEndpoint.select().exists()
    assert actions() == [
        "webhook.add",
        "webhook.rotate",
        "webhook.disable",
        "webhook.enable",
        "webhook.send_again",
        "webhook.remove",
    ]
    assert do("none") is None


def test_a_write_without_its_csrf_token_is_refused(admin, app):
    form = form_to(app.get(PAGE + "?clinic=clinic-a"), PAGE)
    form["url"] = "https://hooks.example.com/x"
    form["csrf_token"] = "forged"
    form.submit(status=403)
    with db.connection_context():
        assert not WebhookEndpoint.select().exists()


def test_staff_who_are_not_admins_are_kept_out(staff, app):
    login(app, status=303)
    assert app.get(PAGE + "?clinic=clinic-a", expect_errors=True).status_int in (403, 404)
