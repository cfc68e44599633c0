"""The API keys page, /console/settings/api-keys, through WebTest: admins only; create (the
secret shown once, through the session's one-time flash after a 303), rotate, revoke; the
list's facts in words; a form sent twice writes once; and the key rules of api_keys.rules,
the same for the console and `manage.py token`."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from api_keys import rules
from models import Actor, ApiToken, AuditEvent, Clinic
from plumbing.clock import as_utc
from plumbing.database import db
from tests.support import bearer, switchboard_url
from tests.support.api_key_pages import ADDRESS, PAGE, create, create_form, new_key_form, secret_of
from tests.support.clocks import WEDNESDAY
from tests.support.console import csrf_of, login


@pytest.fixture
def admin(staff, app):
    """anna: admin of clinic-a (and staff of nothing else); logged in."""
    with db.connection_context():
        from models import StaffMembership

        StaffMembership.update(role="admin").where(StaffMembership.user == staff).execute()
    login(app, status=303)
    return staff


def works(app, text: str, slug: str = "clinic-a") -> bool:
    return app.post(switchboard_url(slug, "is-on-vacation"), headers=bearer(text), expect_errors=True).status_int == 200


def the_token(text: str) -> ApiToken:
    with db.connection_context():
        return ApiToken.get_by_id(text.split("_")[1])


def test_an_admin_creates_a_key_shown_once_that_works_and_is_listed_without_its_secret(admin, app):
    page = create(app)
    text = secret_of(page)
    assert text.startswith("csk_") and "Zobrazí se jen teď" in page.text and page.headers["Cache-Control"] == "no-store"
    assert works(app, text)
    listed = app.get(PAGE + "?clinic=clinic-a")
    assert text.split("_", 2)[2] not in listed.text and "new-key" not in listed.text, "shown once: never again"
    token = the_token(text)
    row = listed.html.find(id=f"key-{token.id}")
    facts = {dt.text: dd for dt, dd in zip(row.find_all("dt"), row.find_all("dd"))}
    assert row.find("h3").find(class_="name").text == "pbx"
    assert facts["Kliniky"].text == "Clinic-A" and facts["Oprávnění"].text == "čtení, zápis"
    author = facts["Kdo vytvořil"].find("span")
    assert (author.text, author["title"]) == ("Anna Nováková", "anna@example.cz"), "by name, the e-mail in a tooltip"
    assert "nikdy" not in row, "used once: its last use is shown (the page's clock)"
    assert as_utc(token.expires_at) == as_utc(WEDNESDAY) + timedelta(days=90), "90 days unless chosen"
    with db.connection_context():
        event = AuditEvent.get(AuditEvent.action == "token.create")
    assert (event.actor_kind, event.actor_name, event.target_id, event.address) == (
        "staff",
        "anna@example.cz",
        str(token.id),
        "203.0.113.9",
    )
    assert text.split("_", 2)[2] not in event.details and token.secret_hash not in event.details


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"days": "366"}, "Platnost musí být od 1 do 365 dní."),
        ({"days": "0"}, "Platnost musí být od 1 do 365 dní."),
        ({"scopes": ()}, "Vyberte oprávnění"),
        ({"grants": ()}, "Vyberte aspoň jednu kliniku."),
        ({"name": "   "}, "Zadejte název servisního účtu"),
    ],
)
def test_the_key_rules_refuse_a_bad_key_with_400_and_issue_nothing(admin, app, fields, message):
    page = create(app, status=400, **fields)
    assert message in page.text and page.html.find("code", {"id": "new-key"}) is None
    with db.connection_context():
        assert ApiToken.select().count() == 0


def test_a_key_grants_only_clinics_the_admin_administers(admin, app):
    form = new_key_form(app.get(PAGE + "?clinic=clinic-a"))
    assert [f for f in form.fields if f and f.startswith("grant_")] == ["grant_clinic-a"]
    fields = {k: v[0].value for k, v in form.fields.items() if v[0].value is not None}
    fields.update({"name": "sneaky", "scope_read": "on", "grant_clinic-b": "on"})
    fields.pop("grant_clinic-a", None)
    page = app.post(PAGE, fields, status=400)
    assert "Vyberte aspoň jednu kliniku." in page.text


def test_a_key_expiring_within_14_days_is_flagged(admin, app):
    with db.connection_context():
        soon, _ = rules.issue(
            Actor("operator", "ops"), "soon", [Clinic.by_slug("clinic-a")], ["read"], WEDNESDAY, timedelta(days=14)
        )
        later, _ = rules.issue(
            Actor("operator", "ops"), "later", [Clinic.by_slug("clinic-a")], ["read"], WEDNESDAY, timedelta(days=15)
        )
        forever, _ = rules.issue(
            Actor("operator", "ops"),
            "forever",
            [Clinic.by_slug("clinic-a")],
            ["read"],
            WEDNESDAY,
            None,
            never_expires=True,
        )
    page = app.get(PAGE + "?clinic=clinic-a")
    assert "soon" in page.html.find(id=f"key-{soon.id}")["class"]
    assert "vyprší do 14 dnů" in page.html.find(id=f"key-{soon.id}").text
    assert "soon" not in page.html.find(id=f"key-{later.id}")["class"]
    assert "nikdy (nastavil provozovatel)" in page.html.find(id=f"key-{forever.id}").text


def test_never_expires_is_the_operators_explicit_choice_only(admin):
    with db.connection_context():
        clinics = [Clinic.by_slug("clinic-a")]
        with pytest.raises(rules.KeyRuleError, match="An expiry is required"):
            rules.issue(Actor("operator", "ops"), "x", clinics, ["read"], WEDNESDAY, None)  # no expiry, no flag
        with pytest.raises(rules.KeyRuleError, match="between 1 and 365"):
            rules.issue(Actor("operator", "ops"), "x", clinics, ["read"], WEDNESDAY, timedelta(days=366))
        assert ApiToken.select().count() == 0


def test_rotate_keeps_the_old_key_until_the_chosen_time_then_only_the_new_one(admin, app, clock):
    old = secret_of(create(app, scopes=("read",)))
    listed = app.get(PAGE + "?clinic=clinic-a")
    form = next(f for f in listed.forms.values() if f.action.endswith("/rotate"))
    form["old_until"] = "2026-11-18T12:00:00"  # clinic-a is in Prague: 11:00 UTC, an hour ahead
    page = form.submit(status=303, extra_environ=ADDRESS).follow()
    new = secret_of(page)
    assert new != old and "Starý klíč funguje do" in page.text
    assert works(app, old) and works(app, new)
    new_token, old_token = the_token(new), the_token(old)
    assert (new_token.name, new_token.scopes, new_token.rotated_from) == ("pbx", "read", old_token.id)
    assert as_utc(old_token.expires_at) == as_utc(WEDNESDAY) + timedelta(hours=1)
    clock.set(WEDNESDAY + timedelta(hours=1, seconds=1))
    assert not works(app, old) and works(app, new)
    with db.connection_context():
        event = AuditEvent.get(AuditEvent.action == "token.rotate")
    assert (event.actor_name, event.target_id, event.address) == ("anna@example.cz", str(old_token.id), "203.0.113.9")
    assert new.split("_", 2)[2] not in event.details


@pytest.mark.parametrize("until", ["2026-11-25T11:00:01", "2026-11-18T10:59:00", "not a time"])
def test_rotation_keeps_the_old_key_at_most_7_days_and_not_in_the_past(admin, app, until):
    old = secret_of(create(app))
    form = next(f for f in app.get(PAGE + "?clinic=clinic-a").forms.values() if f.action.endswith("/rotate"))
    form["old_until"] = until
    page = form.submit(status=400)
    assert "nejvýše 7 dní" in page.text and works(app, old)
    with db.connection_context():
        assert ApiToken.select().count() == 1


def test_revoke_stops_the_key_at_once_and_is_recorded(admin, app):
    text = secret_of(create(app))
    assert works(app, text)
    form = next(f for f in app.get(PAGE + "?clinic=clinic-a").forms.values() if f.action.endswith("/revoke"))
    done = form.submit(status=303, extra_environ=ADDRESS)
    assert done.headers["Location"].endswith(PAGE + "?clinic=clinic-a")
    assert not works(app, text)
    row = app.get(PAGE + "?clinic=clinic-a").html.find(id=f"key-{the_token(text).id}")
    assert "revoked" in row["class"] and row.find("form") is None, "nothing more to do with it"
    with db.connection_context():
        event = AuditEvent.get(AuditEvent.action == "token.revoke")
    assert (event.actor_name, event.address) == ("anna@example.cz", "203.0.113.9")


def test_a_staff_member_gets_403_on_the_keys_page_and_its_actions(staff, app):
    with db.connection_context():
        token, text = rules.issue(Actor("operator", "ops"), "pbx", [Clinic.by_slug("clinic-a")], ["read"], WEDNESDAY)
    login(app, status=303)
    csrf = csrf_of(app.get("/console/"))
    app.get(PAGE, status=403)
    app.get(PAGE + "?clinic=clinic-a", status=403)
    for action in ("rotate", "revoke"):
        app.post(
            f"{PAGE}/{token.id}/{action}",
            {"csrf_token": csrf, "clinic": "clinic-a", "old_until": "2026-11-18T12:00:00"},
            status=403,
        )
    app.post(
        PAGE,
        {"csrf_token": csrf, "clinic": "clinic-a", "name": "x", "scope_read": "on", "grant_clinic-a": "on"},
        status=403,
    )
    assert works(app, text)
    with db.connection_context():
        assert ApiToken.select().count() == 1


def test_an_admin_revokes_but_cannot_rotate_a_key_that_also_opens_another_clinic(admin, app):
    with db.connection_context():
        shared, text = rules.issue(
            Actor("operator", "ops"),
            "shared",
            [Clinic.by_slug("clinic-a"), Clinic.by_slug("clinic-b")],
            ["read"],
            WEDNESDAY,
        )
        other, other_text = rules.issue(
            Actor("operator", "ops"), "b-only", [Clinic.by_slug("clinic-b")], ["read"], WEDNESDAY
        )
    page = app.get(PAGE + "?clinic=clinic-a")
    row = page.html.find(id=f"key-{shared.id}")
    assert "Clinic-A, Clinic-B" in row.text and row.find("form", {"class": "rotate"}) is None
    assert page.html.find(id=f"key-{other.id}") is None, "another clinic's key is not listed"
    csrf = csrf_of(page)
    app.post(
        f"{PAGE}/{shared.id}/rotate",
        {"csrf_token": csrf, "clinic": "clinic-a", "old_until": "2026-11-18T12:00:00"},
        status=404,
    )
    app.post(f"{PAGE}/{other.id}/revoke", {"csrf_token": csrf, "clinic": "clinic-a"}, status=404)
    assert works(app, other_text, "clinic-b")
    app.post(f"{PAGE}/{shared.id}/revoke", {"csrf_token": csrf, "clinic": "clinic-a"}, status=303)
    assert not works(app, text, "clinic-b"), "a leaked key is stopped everywhere"


def test_the_settings_index_lists_the_api_keys_section(admin, app):
    page = app.get("/console/settings?clinic=clinic-a")
    assert re.search(r'href="/console/settings/api-keys\?clinic=clinic-a">Klíče API<', page.text)


def test_last_use_is_written_at_most_once_a_minute_per_token_by_any_process(admin, app, clock):
    text = secret_of(create(app))
    token_id = the_token(text).id
    assert works(app, text)
    with db.connection_context():
        first = ApiToken.get_by_id(token_id).last_used_at
        assert first == as_utc(WEDNESDAY)
        # Another process (its own throttle) at +30 s: the row already has a use within the minute.
        assert ApiToken.touch(token_id, WEDNESDAY + timedelta(seconds=30), timedelta(minutes=1)) == first
        assert ApiToken.get_by_id(token_id).last_used_at == first
    clock.set(WEDNESDAY + timedelta(seconds=30))
    assert works(app, text)
    with db.connection_context():
        assert ApiToken.get_by_id(token_id).last_used_at == first, "no write per request"
    clock.set(WEDNESDAY + timedelta(seconds=61))
    assert works(app, text)
    with db.connection_context():
        assert ApiToken.get_by_id(token_id).last_used_at == as_utc(WEDNESDAY + timedelta(seconds=61)), (
            "at most a minute stale"
        )


def keys_named(name: str) -> int:
    with db.connection_context():
        return ApiToken.select().where(ApiToken.name == name).count()


def test_a_create_sent_again_makes_no_second_key_and_the_secret_is_never_shown_again(admin, app):
    form = create_form(app, name="twice")
    first = form.submit(status=303, extra_environ=ADDRESS)
    again = form.submit(status=303, extra_environ=ADDRESS)  # the browser's reload of the POST
    assert again.headers["Location"] == first.headers["Location"], "sent where the first was sent"
    assert keys_named("twice") == 1
    page = first.follow()
    text = secret_of(page)
    assert text.startswith("csk_") and keys_named("twice") == 1
    assert page.html.find("section", {"class": "new-key"}).find("h2").text == "Klíč: twice"
    for reload in (first.follow(), again.follow(), app.get(PAGE + "?clinic=clinic-a")):
        assert text.split("_", 2)[2] not in reload.text and reload.html.find(id="new-key") is None
    with db.connection_context():
        assert AuditEvent.select().where(AuditEvent.action == "token.create").count() == 1


def test_a_refused_create_gives_its_form_back_for_the_corrected_try(admin, app):
    form = create_form(app, name="   ")
    assert "Zadejte název servisního účtu" in form.submit(status=400).text
    form["name"] = "fixed"
    secret_of(form.submit(status=303).follow())
    assert keys_named("fixed") == 1


def test_a_double_click_on_rotate_rotates_once(admin, app):
    old = secret_of(create(app))
    form = next(f for f in app.get(PAGE + "?clinic=clinic-a").forms.values() if f.action.endswith("/rotate"))
    form["old_until"] = "2026-11-18T12:00:00"
    first, second = form.submit(status=303), form.submit(status=303)
    assert first.headers["Location"] == second.headers["Location"]
    with db.connection_context():
        assert (
            ApiToken.select().count() == 2
            and AuditEvent.select().where(AuditEvent.action == "token.rotate").count() == 1
        )
    new = secret_of(second.follow())  # the page the second click lands on shows the new key
    assert new != old and works(app, new)


def test_the_one_time_flash_is_bound_to_the_session_and_stored_encrypted(admin, app):
    import redis as redis_lib

    from tests.conftest import REDIS_URL

    answer = create_form(app, name="sealed").submit(status=303)
    client = redis_lib.Redis.from_url(REDIS_URL)
    (key,) = client.keys("console:flash:*")
    stored = client.get(key)
    with db.connection_context():
        token = ApiToken.get(ApiToken.name == "sealed")
    assert token.secret_hash not in stored.decode() and b"csk_" not in stored, "never kept readable"
    # Another session (another login of the same user) finds nothing to show.
    other = type(app)(app.app)
    login(other, status=303)
    assert other.get(PAGE + "?clinic=clinic-a").html.find(id="new-key") is None
    assert secret_of(answer.follow()).startswith("csk_") and client.keys("console:flash:*") == []
