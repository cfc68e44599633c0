"""The console's inbox (WebTest): rows of voice messages and missed calls, filters, the
live update's rows, resolve and reopen (audited as the staff user), the play route,
another clinic's requests, escaping."""

from __future__ import annotations

from datetime import timedelta

from models import AuditEvent, Clinic, Patient, PatientRequest, StaffUser
from plumbing.database import db
from tests.support import bearer, issue_token, switchboard_url
from tests.support.clocks import WEDNESDAY
from tests.support.console import cs, csrf_of, form_to, login, make


def test_rows_show_voice_messages_and_missed_calls_in_czech(staff, app):
    make(
        "clinic-a",
        "voice_message",
        name=("Jana", "Dvořáková"),
        transcript="Prosím o recept.",
        status="unreliable",
        callback_number="+420777888999",
        has_recording=True,
        recording_url="https://example.test/r.wav",
    )
    make("clinic-a", "missed_call", phone="+420602000000", minutes=1)
    make("clinic-b", "missed_call", phone="+420603000000", minutes=2)
    login(app, status=303)
    page = app.get("/console/")
    rows = page.html.select("li.row")
    assert [r["class"][1] for r in rows] == ["missed_call", "voice_message"], "newest first, clinic-a only"
    voice = rows[1]
    assert "Jana Dvořáková" in voice.text and "Prosím o recept." in voice.text
    assert "Přepis je nespolehlivý – poslechněte si nahrávku" in voice.text
    assert voice.select_one('a[href="tel:+420601123456"]') and voice.select_one('a[href="tel:+420777888999"]')
    assert voice.select_one("audio")["src"].endswith("/recording")
    assert voice.select_one("time").text == cs("18. 11. 2026 11:00"), "Prague time, the Czech way"
    missed = rows[0]
    assert "neznámý volající" in missed.text and "Zavolat zpět" in missed.text


def test_the_unknown_caller_is_said_in_the_readers_language_not_as_stored(staff, app):
    """A withheld number's patient is stored under the service's marker (English); the
    console says who it is in the reader's words."""
    withheld = make("clinic-a", "missed_call", name=("", Patient.UNKNOWN_CALLER), phone="")
    login(app, status=303)
    row = app.get("/console/").html.select_one("li.row")
    assert Patient.UNKNOWN_CALLER not in row.text and "neznámý volající" in row.text
    assert Patient.UNKNOWN_CALLER not in app.get(f"/console/requests/{withheld.id}").text


def test_filters_and_search(staff, app):
    make("clinic-a", "voice_message", name=("Jana", "Dvořáková"), transcript="x", status="reliable")
    make("clinic-a", "missed_call", phone="+420602000000", minutes=1)
    login(app, status=303)
    assert len(app.get("/console/?kind=missed_call").html.select("li.row")) == 1
    assert len(app.get("/console/?kind=other").html.select("li.row")) == 0
    assert len(app.get("/console/?q=dvořák").html.select("li.row")) == 1
    assert len(app.get("/console/?q=602000").html.select("li.row")) == 1
    assert len(app.get("/console/?q=%25").html.select("li.row")) == 0, "% is literal"
    assert len(app.get("/console/?state=resolved").html.select("li.row")) == 0


def test_the_live_update_renders_the_rows_created_after(staff, app):
    make("clinic-a", "missed_call", phone="+420602000000")
    login(app, status=303)
    after = app.get("/console/").html.select_one("ul.rows")["data-after"]
    assert app.get(f"/console/rows?clinic=clinic-a&state=open&kind=&q=&after={after}").text == ""
    make("clinic-a", "voice_message", transcript="<script>alert(1)</script>", status="reliable", minutes=3)
    fresh = app.get(f"/console/rows?clinic=clinic-a&state=open&kind=&q=&after={after}")
    assert fresh.text.count('<li class="row') == 1
    assert "<script>alert(1)</script>" not in fresh.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in fresh.text
    app.get("/console/rows?after=nonsense", status=400)


def test_resolve_and_reopen_drive_has_active_request_and_are_audited(staff, app):
    request = make("clinic-a", "voice_message", transcript="x", status="reliable")
    token = issue_token(["clinic-a"], ["read"])

    def active() -> bool:
        return app.post_json(
            switchboard_url("clinic-a", "has-active-request"), {"callFrom": "+420601123456"}, headers=bearer(token)
        ).json["hasActiveRequest"]

    assert active()
    login(app, status=303)
    page = app.get("/console/")
    done = form_to(page, "/resolution").submit(status=303)
    assert done.headers["Location"].endswith("/console/?clinic=clinic-a")
    assert not active()
    page = app.get("/console/?state=resolved")
    assert "Znovu otevřít" in page.text
    form_to(page, "/resolution").submit(status=303)
    assert active()
    with db.connection_context():
        events = [e for e in AuditEvent.trail() if e.action == "patient_request.patch"]
    assert [(e.actor_kind, e.actor_name, e.target_id) for e in events] == [
        ("staff", "anna@example.cz", str(request.id))
    ] * 2
    assert app.post(f"/console/requests/{request.id}/resolution", {"done": "1"}, status=403), "no CSRF token"


def test_another_clinics_request_is_not_found(staff, app):
    other = make(
        "clinic-b",
        "voice_message",
        transcript="x",
        status="reliable",
        has_recording=True,
        recording_url="https://example.test/r.wav",
    )
    login(app, status=303)
    csrf = csrf_of(app.get("/console/"))
    app.post(f"/console/requests/{other.id}/resolution", {"done": "1", "csrf_token": csrf}, status=404)
    app.get(f"/console/requests/{other.id}/recording", status=404)
    app.get("/console/requests/not-a-uuid/recording", status=404)
    assert "Clinic-A" in app.get("/console/?clinic=clinic-b").text, "not a membership: the user's own clinic"


def test_the_play_route_redirects_or_says_the_recording_is_gone(staff, app, clock):
    live = make(
        "clinic-a",
        "voice_message",
        transcript="x",
        status="reliable",
        has_recording=True,
        recording_url="https://example.test/r.wav",
    )
    gone = make(
        "clinic-a",
        "voice_message",
        transcript="x",
        status="reliable",
        has_recording=True,
        minutes=1,
        recording_url="https://example.test/g.wav",
        recording_gone_reason="deleted",
    )
    clock.set(WEDNESDAY + timedelta(minutes=2))
    login(app, status=303)
    played = app.get(f"/console/requests/{live.id}/recording", status=302)
    assert played.headers["Location"] == "https://example.test/r.wav"
    page = app.get(f"/console/requests/{gone.id}/recording", status=410)
    assert cs("Nahrávka už není k dispozici – přepis zůstává.") in page.text
    app.reset()
    app.get(f"/console/requests/{live.id}/recording", status=303), "no session: the login page"


def test_the_request_page_shows_notes_and_history_and_hides_other_clinics(staff, app):
    request = make("clinic-a", "voice_message", name=("Jana", "Dvořáková"), transcript="x", status="reliable")
    other = make("clinic-b", "missed_call", phone="+420603000000")
    with db.connection_context():
        PatientRequest.update(clinic_note="<b>bold</b> note", user_note="called back").where(
            PatientRequest.id == request.id
        ).execute()
    login(app, status=303)
    inbox_page = app.get("/console/")
    form_to(inbox_page, "/resolution").submit(status=303)
    page = app.get(f"/console/requests/{request.id}")
    assert page.html.h1.text == "Jana Dvořáková"
    assert "&lt;b&gt;bold&lt;/b&gt; note" in page.text and "called back" in page.text
    note = form_to(page, "/note")
    note["note"] = "<i>rang twice</i>"
    note.submit(status=303)
    page = app.get(f"/console/requests/{request.id}")
    assert page.html.select_one("textarea#note").text == "<i>rang twice</i>" and "&lt;i&gt;rang twice" in page.text
    with db.connection_context():
        assert PatientRequest.get_by_id(request.id).user_note == "<i>rang twice</i>"
    history = page.html.select_one("ol.history").text
    assert "Označeno jako vyřízené – Anna Nováková" in history and "Změněna poznámka – Anna Nováková" in history
    author = page.html.select_one("ol.history span.who span")
    assert author["title"] == "anna@example.cz", "the e-mail in a tooltip"
    assert "Podepsané dokumenty" in page.text and "Žádné." in page.text
    app.get(f"/console/requests/{other.id}", status=404)
    app.get("/console/requests/nonsense", status=404)


def test_a_user_who_prefers_english_gets_english_and_english_dates(staff, app):
    make("clinic-a", "missed_call", phone="+420602000000")
    with db.connection_context():
        StaffUser.update(language="en").execute()
    login(app, status=303)
    page = app.get("/console/")
    assert "Inbox – Clinic-A" in page.text and "unknown caller" in page.text and "Call back" in page.text
    assert (
        page.html.select_one("li.row time").text == "Nov 18, 2026 11:00\u202fAM"
        or page.html.select_one("li.row time").text.replace("\u202f", " ") == "Nov 18, 2026 11:00 AM"
    )


def test_tags_are_added_and_removed_on_the_request_page_and_audited(staff, app):
    from models import PatientRequestTag, Tag

    request = make("clinic-a", "voice_message", transcript="x", status="reliable")
    with db.connection_context():
        clinic_a, clinic_b = Clinic.get(Clinic.slug == "clinic-a"), Clinic.get(Clinic.slug == "clinic-b")
        urgent = Tag.create(clinic=clinic_a, type="patient_request", name="<urgent>")
        Tag.create(clinic=clinic_a, type="patient", name="a patient tag, not offered")
        foreign = Tag.create(clinic=clinic_b, type="patient_request", name="clinic-b's")
    login(app, status=303)
    page = app.get(f"/console/requests/{request.id}")
    offered = [o.text for o in page.html.select("#add-tag option")]
    assert offered == ["<urgent>"], offered
    add = next(f for f in page.forms.values() if "add" in f.fields)
    add.submit(status=303)
    page = app.get(f"/console/requests/{request.id}")
    assert [t.text for t in page.html.select("ul.tags .tag")] == ["<urgent>"] and "&lt;urgent&gt;" in page.text
    assert not page.html.select("#add-tag"), "nothing left to add"
    # Another clinic's tag typed into the form is refused and not attached.
    app.post(f"/console/requests/{request.id}/tags", {"csrf_token": csrf_of(page), "add": str(foreign.id)}, status=400)
    remove = next(f for f in page.forms.values() if "remove" in f.fields)
    remove.submit(status=303)
    page = app.get(f"/console/requests/{request.id}")
    assert not page.html.select("ul.tags .tag")
    with db.connection_context():
        assert PatientRequestTag.select().where(PatientRequestTag.request == request.id).count() == 0
        fields = [
            e.details
            for e in AuditEvent.select()
            .where((AuditEvent.target_id == str(request.id)) & (AuditEvent.action == "patient_request.patch"))
            .order_by(AuditEvent.at)
        ]
    assert len(fields) == 2 and "addTagIds" in fields[0] and "removeTagIds" in fields[1], fields
    app.post(f"/console/requests/{request.id}/tags", {"add": str(urgent.id)}, status=403)  # no CSRF token
