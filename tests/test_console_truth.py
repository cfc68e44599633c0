"""The console says what is true, in the clinic's words (WebTest against the real app, the
session's real RQ worker and a fake switchboard platform over real HTTPS, as in
test_recordings.py):

- the inbox row and the request page say what a call's recording is now, judged as a play
  judges it, from the stored call and the re-fetch job alone: playable, re-fetchable (a
  player), unreachable ("try again", a player), gone with its reason (words, no player, no
  "Listen to the number"), none; drawing a page asks nothing of the platform, enqueues no
  re-fetch and writes nothing; /recording/state says the same for the page's script;
- every console write is post/redirect/get, and a form sent twice writes once;
- phone numbers in one display format, E.164 in tel: links, found as shown;
- the audit trail in words for every action it can hold."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import redis
from rq.job import Job, JobStatus

from console import audit_actions
from console.inbox import WHY_GONE
from jobs.refetch import job_id
from models import Actor, AuditEvent, Call, Clinic, PatientRequest, StaffMembership, StaffUser, change_events
from plumbing import clock
from plumbing.database import db
from staff.passwords import hash_password
from tests.conftest import REDIS_URL, ROOT
from tests.support.console import PASSWORD, cs, csrf_of, form_to, login, make
from tests.support.https_server import static
from tests.support.recordings import onboard, received_at, stored_call
from tests.support.servers import wait_until
from voicemail.recordings import GONE_REASONS

GONE_CS = cs("Nahrávka už není k dispozici – přepis zůstává.")
TRY_AGAIN_CS = cs("Nahrávku se teď nepodařilo načíst z ústředny – přehrajte ji znovu za chvíli.")


def receptionist(web):
    """Rita, clinic-rec's receptionist (Czech), logged in to `web` once the clinic is onboarded
    and the test clock set (a session older than the clock's jump would have expired)."""
    with db.connection_context():
        user = StaffUser.create(email="rita@example.cz", name="Rita Recepční", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.by_slug("clinic-rec"), role="staff")
    login(web, "rita@example.cz", status=303)
    return web


def row_of(page, request: PatientRequest):
    return page.html.find(id=f"r-{request.id}")


def no_refetch_job(request: PatientRequest) -> bool:
    return not Job.exists(job_id(request.call_id), connection=redis.Redis.from_url(REDIS_URL))


def gone_reason(request: PatientRequest) -> str | None:
    with db.connection_context():
        return Call.get_by_id(request.call_id).recording_gone_reason


def test_each_recording_state_is_said_on_the_row_and_the_page_without_asking_the_platform(web, clock, platform, worker):
    onboard(platform)
    live = stored_call("CA-live", recording_sid="CA-live.mp3")
    fetchable = stored_call("CA-fetch", recording_sid="CA-fetch.mp3")
    deleted = stored_call("CA-deleted", recording_sid="CA-deleted.mp3")
    foreign = stored_call("CA-foreign", source="OtherVendor PBX")
    with db.connection_context():
        Call.update(recording_gone_reason="deleted").where(Call.id == deleted.call_id).execute()
        Call.update(heard_number="+12015550111", callback_number_at=4.2).where(
            Call.id.in_([deleted.call_id, fetchable.call_id])
        ).execute()
        Call.update(received_at=received_at(live) + timedelta(minutes=20)).where(Call.id == live.call_id).execute()
    clock.set(received_at(fetchable) + timedelta(minutes=26))  # the original links expired, but live's
    reader = receptionist(web)
    before = platform.server.request_count()

    for page in (reader.get("/console/"), *(reader.get(f"/console/requests/{r.id}") for r in (live, deleted))):
        assert page.headers["Cache-Control"] == "no-store"
    inbox = reader.get("/console/")
    # Playable and re-fetchable: a player, nothing said.
    for request in (live, fetchable):
        row = row_of(inbox, request)
        assert row.select_one("audio")["src"] == f"/console/requests/{request.id}/recording"
        assert row.select_one("div.recording")["data-state"] == f"/console/requests/{request.id}/recording/state"
        assert row.select_one(".recording-state") is None
    assert row_of(inbox, fetchable).select_one("a.listen") is not None
    # Gone: the words and why, the transcript, no player, no "Listen to the number".
    for request, why in (
        (deleted, "Platforma ústředny ji smazala."),
        (foreign, cs("Platnost odkazu na ni vypršela a tato ústředna nový odkaz vydat neumí.")),
    ):
        for page in (inbox, reader.get(f"/console/requests/{request.id}")):
            row = row_of(page, request)
            said = row.select_one("p.recording-state.gone")
            assert said.text.startswith(GONE_CS) and said.select_one(".why").text == why
            assert row.select_one("audio") is None and row.select_one("a.listen") is None
            assert "Poslechnout číslo" not in row.text
            assert row.select_one("blockquote.transcript").text == "Please call me back about my test results."
    # Nothing was asked of the platform, nothing enqueued, nothing written: a page is a reading.
    assert platform.server.request_count() == before
    assert no_refetch_job(fetchable) and gone_reason(foreign) is None

    # The page's script asks the same thing when a play fails after the page was drawn.
    state = reader.get(f"/console/requests/{deleted.id}/recording/state")
    assert state.json == {"state": "gone", "text": f"{GONE_CS} Platforma ústředny ji smazala."}
    assert state.headers["Cache-Control"] == "no-store"
    assert reader.get(f"/console/requests/{fetchable.id}/recording/state").json == {
        "state": "refetchable",
        "text": TRY_AGAIN_CS,
    }
    assert reader.get(f"/console/requests/{live.id}/recording/state").json["state"] == "playable"
    assert no_refetch_job(fetchable) and platform.server.request_count() == before


def test_without_credentials_an_expired_recording_is_gone_on_the_page(web, clock, worker):
    onboard(None)  # the Source names the platform family, the clinic gave no access to it
    request = stored_call("CA-nocreds", recording_sid="CA-nocreds.mp3")
    clock.set(received_at(request) + timedelta(minutes=26))
    reader = receptionist(web)
    said = row_of(reader.get("/console/"), request).select_one("p.recording-state.gone")
    assert said.select_one(".why").text == cs(
        "Platnost odkazu na ni vypršela a klinika nemá nastavený přístup k platformě ústředny."
    )
    assert gone_reason(request) is None, "a page does not write; the play route remembers it"


def test_a_platform_that_keeps_failing_says_try_again_not_gone(web, clock, platform, worker):
    onboard(platform)
    request = stored_call("CA-down", recording_sid="CA-down.mp3")
    platform.server.route(platform.path("CA-down.mp3"), static(b"busy", "text/plain", status=503))
    clock.set(received_at(request) + timedelta(minutes=26))
    reader = receptionist(web)
    # A play: the re-fetch fails (503), is retried twice (rec_config: 1 s, 1 s), then fails.
    assert reader.get(f"/console/requests/{request.id}/recording", status=503).headers["Retry-After"]
    jobs = redis.Redis.from_url(REDIS_URL)
    assert wait_until(
        lambda: Job.fetch(job_id(request.call_id), connection=jobs).get_status() == JobStatus.FAILED,
        timeout=60,
        interval=0.2,
    )
    for page in (reader.get("/console/"), reader.get(f"/console/requests/{request.id}")):
        row = row_of(page, request)
        assert row.select_one("p.recording-state.unreachable").text == TRY_AGAIN_CS
        assert row.select_one("audio") is not None, "a play is the way to try again"
        assert row.select_one(".recording-state.gone") is None
    assert reader.get(f"/console/requests/{request.id}/recording/state").json == {
        "state": "unreachable",
        "text": TRY_AGAIN_CS,
    }
    assert gone_reason(request) is None


def test_the_platform_deleting_a_recording_turns_the_page_to_words(web, clock, platform, worker):
    onboard(platform)
    request = stored_call("CA-del", recording_sid="CA-del.mp3")
    platform.serve("CA-del.mp3", "deleted")
    clock.set(received_at(request) + timedelta(minutes=26))
    reader = receptionist(web)
    assert row_of(reader.get("/console/"), request).select_one("audio") is not None
    assert reader.get(f"/console/requests/{request.id}/recording", status=410)
    row = row_of(reader.get(f"/console/requests/{request.id}"), request)
    assert row.select_one("audio") is None
    assert row.select_one("p.recording-state.gone .why").text == "Platforma ústředny ji smazala."


def test_every_reason_a_recording_is_gone_has_words_in_czech():
    from console.rendering import Renderer

    cs = Renderer().translations["cs"]
    assert set(WHY_GONE) | {"no_recording"} == set(GONE_REASONS)
    for reason, words in WHY_GONE.items():
        assert cs.gettext(words) != words, reason


def test_a_live_update_row_says_the_recording_state_too(web, clock, platform, worker):
    onboard(platform)
    reader = receptionist(web)
    first = stored_call("CA-first", recording_sid="CA-first.mp3")
    after = reader.get("/console/").html.select_one("ul.rows")["data-after"]
    later = stored_call("CA-later", recording_sid="CA-later.mp3")
    with db.connection_context():
        Call.update(recording_gone_reason="mismatch").where(Call.id == later.call_id).execute()
        PatientRequest.update(created_at=PatientRequest.created_at + timedelta(seconds=5)).where(
            PatientRequest.id == later.id
        ).execute()
    fresh = reader.get(f"/console/rows?clinic=clinic-rec&state=open&kind=&q=&after={after}")
    assert f'id="r-{later.id}"' in fresh.text and f'id="r-{first.id}"' not in fresh.text
    assert cs("Platforma ústředny vydala jinou nahrávku než tu, kterou s hovorem předala ústředna.") in fresh.text
    assert "<audio" not in fresh.text


# --- phones ----------------------------------------------------------------------------------


def test_numbers_are_shown_one_way_linked_as_e164_and_found_as_shown(staff, app):
    make(
        "clinic-a",
        "voice_message",
        name=("Jana", "Dvořáková"),
        phone="+420608333444",
        transcript="x",
        status="reliable",
        callback_number="00420601777321",
    )
    make("clinic-a", "missed_call", phone="anonymous", minutes=1)
    login(app, status=303)
    page = app.get("/console/")
    (voice,) = page.html.select("li.row.voice_message")
    assert voice.select_one("a.phone").text == cs("+420 608 333 444")
    assert voice.select_one("a.phone")["href"] == "tel:+420608333444"
    assert voice.select_one("a.callback").text == cs("+420 601 777 321")
    assert voice.select_one("a.callback")["href"] == "tel:+420601777321"
    (withheld,) = page.html.select("li.row.missed_call")
    assert withheld.select_one("span.phone").text == "anonymous" and not withheld.select("a[href^='tel:']")
    assert not re.search(r"\+420\d{9}(?!\")", page.html.select_one("ul.rows").text), "never the raw E.164"
    for typed in ("608 333 444", "+420 608 333", "608333", cs("+420 608 333 444")):  # copied from the page too
        assert len(app.get("/console/", {"q": typed}).html.select("li.row")) == 1, typed


# --- post/redirect/get and writes sent twice ---------------------------------------------------


def test_every_console_write_answers_with_a_redirect_and_writes_once_when_sent_twice(staff, app):
    request = make("clinic-a", "voice_message", transcript="x", status="reliable")
    with db.connection_context():
        from models import Tag

        tag = Tag.create(clinic=Clinic.by_slug("clinic-a"), type="patient_request", name="zavolat")
    login(app, status=303)

    def patches() -> int:
        with db.connection_context():
            return AuditEvent.select().where(AuditEvent.action == "patient_request.patch").count()

    page = app.get(f"/console/requests/{request.id}")
    note = form_to(page, "/note")
    note["note"] = "volala znovu"
    tags = next(f for f in page.forms.values() if f.action.endswith("/tags") and "add" in f.fields)
    tags["add"] = str(tag.id)
    for form in (note, tags):
        first, second = form.submit(status=303), form.submit(status=303)
        assert first.headers["Location"] == second.headers["Location"]
        assert first.headers["Location"].endswith(f"/console/requests/{request.id}")
    assert patches() == 2
    resolve = form_to(app.get("/console/"), "/resolution")
    resolve.submit(status=303), resolve.submit(status=303)
    assert patches() == 3
    # A fresh form (a new page) is a new write.
    form_to(app.get("/console/?state=resolved"), "/resolution").submit(status=303)
    assert patches() == 4
    # A form without its one-use token (an old page, a script) still works: CSRF guards it.
    app.post(f"/console/requests/{request.id}/note", {"csrf_token": csrf_of(page), "note": "x"}, status=303)
    assert patches() == 5


def test_the_one_use_tokens_live_per_session_in_redis_and_a_refused_write_gives_its_token_back(staff, app):
    with db.connection_context():
        StaffMembership.update(role="admin").execute()
    login(app, status=303)
    form = next(
        f
        for f in app.get("/console/settings/calls?clinic=clinic-a").forms.values()
        if f.method.lower() == "post" and "languages" in f.fields
    )
    form["languages"] = "cs klingon"
    assert "klingon" in form.submit(status=400).text
    form["languages"] = "cs sk"
    form.submit(status=303)
    form.submit(status=303)
    with db.connection_context():
        assert AuditEvent.select().where(AuditEvent.action == "settings.calls.update").count() == 1
    keys = redis.Redis.from_url(REDIS_URL).keys("console:once:*")
    assert len(keys) == 1 and redis.Redis.from_url(REDIS_URL).ttl(keys[0]) > 3600


# --- the audit trail in words --------------------------------------------------------------------

SERVICE = [
    ROOT / d
    for d in (
        "api_keys",
        "commands",
        "console",
        "documents",
        "jobs",
        "onboarding",
        "privacy",
        "resources",
        "storage",
        "switchboard",
        "voicemail",
        "staff",
        "web",
        "models",
    )
]


def recorded_actions() -> set[str]:
    """Every action the service's code writes to the trail (the literals beside
    AuditEvent.record, the hand-off's insert and the settings' changes)."""
    found: set[str] = set()
    pattern = re.compile(
        r'["\']((?:staff|staff_user|token|patient|patient_request|attachment|call|settings|'
        r'onboarding|webhook)\.[a-z_.]+)["\']'
    )
    for root in SERVICE:
        for path in [root] if root.is_file() else root.rglob("*.py"):
            found |= set(pattern.findall(path.read_text("utf-8")))
    # A file name in a help text, the events integrators are told of, and the outbox's topic
    # of a disabled webhook endpoint's e-mail: not actions.
    return found - {"onboarding.json", "webhook.disabled", *change_events.TYPES}


def test_the_audit_words_cover_every_action_the_trail_can_hold():
    recorded = recorded_actions()
    assert {"call.recording_mismatch", "settings.calls.update", "onboarding.file", "staff_user.disable"} <= recorded
    assert recorded <= set(audit_actions.ACTIONS), recorded - set(audit_actions.ACTIONS)
    from console.rendering import Renderer

    cs = Renderer().translations["cs"]
    for action in audit_actions.ACTIONS.values():
        for words in (action.words, *(f.label for f in action.fields)):
            assert cs.gettext(words) != words or words == "Role", words


RAW = [
    (re.compile(r"\w=\S"), "key=value"),
    (re.compile(r"\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|\+00:00)"), "a UTC timestamp"),
    (re.compile(r"\b[a-z_]+:[0-9a-f]{8}-[0-9a-f]{4}"), "table:uuid"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "a uuid"),
    (
        re.compile(r"\b(missedCallRequests|expiresAt|oldValidUntil|newKey|patientId|requestTypeId|ignoreHolidays)\b"),
        "a field's code",
    ),
    (re.compile(r"\b(True|False|None)\b"), "a Python value"),
]


def visible_text(page) -> str:
    table = page.html.select_one("table.audit")
    return table.get_text(" ") + " " + " ".join(t["title"] for t in table.select("[title]"))


def test_every_action_reads_in_words_with_its_object_named_and_linked(staff, app):
    """One event of every action (their details as the recorders write them), on the Czech
    audit page: no raw values, each object named (a link where it has a page)."""
    with db.connection_context():
        StaffMembership.update(role="admin").execute()
        a = Clinic.by_slug("clinic-a")
    request = make("clinic-a", "voice_message", name=("Jana", "Dvořáková"), transcript="x", status="reliable")
    from api_keys import rules
    from models import Calendar, MedicalRecord, Patient, RequestType
    from plumbing.clock import utc_now

    operator, admin = Actor("operator", "root"), Actor.staff(staff)
    with db.connection_context(), db.atomic():
        # The oldest, on the page of older events (more than a page of them in all).
        for action, target, details in [
            ("staff.password_reset_asked", staff, {"knownAccount": True}),
            ("staff_user.urgent_notices", staff, {"on": True}),
            ("settings.urgent_notices.update", None, {"staff": True, "onCallAddress": False, "always": False}),
            ("notice.urgent_sent", ("patient_request", request.id), {"requests": 3, "toStaff": True}),
            ("webhook.add", ("webhook_endpoint", uuid.uuid4()), {"eventTypes": ["request.created"]}),
            ("webhook.rotate", ("webhook_endpoint", uuid.uuid4()), {}),
            ("webhook.disable", ("webhook_endpoint", uuid.uuid4()), {}),
            ("webhook.enable", ("webhook_endpoint", uuid.uuid4()), {}),
            ("webhook.remove", ("webhook_endpoint", uuid.uuid4()), {}),
            ("webhook.send_again", ("webhook_endpoint", uuid.uuid4()), {"event": str(uuid.uuid4())}),
        ]:
            who = Actor("operator", "worker") if target is None else admin
            AuditEvent.record(who, a, action, target, details, at=clock.now())
    with db.connection_context():
        key, _ = rules.issue(admin, "acc-provider-rw", [a], ["read", "write"], utc_now(), timedelta(days=90))
        new, _ = rules.rotate(admin, key, utc_now() + timedelta(days=1), utc_now())
        rules.revoke(operator, new, clock.now())
        calendar = Calendar.create(clinic=a, name="Ordinace MUDr. Nová")
        kind = RequestType.create(clinic=a, ecrf_id="CONSENT", name="Souhlas")
        patient = Patient.get_by_id(request.patient_id)
        document = MedicalRecord.create(
            request=request,
            file_hash="h",
            object_key="k",
            sha256="ab" * 32,
            content_type="application/pdf",
            description="Souhlas s ošetřením",
        )
        sha = "cd" * 32
        with db.atomic():
            for action, target, details in [
                ("staff.login_failed", staff, {"knownAccount": True, "disabled": False}),
                ("patient_request.create", request, {"patientId": str(patient.id), "requestTypeId": str(kind.id)}),
                ("patient_request.patch", request, {"fields": ["addTagIds", "userNote"]}),
                ("patient_request.patch", request, {"fields": ["done"], "done": True}),
                ("attachment.upload_link", request, {"fileHash": "x/y", "contentType": "application/pdf"}),
                (
                    "attachment.register",
                    document,
                    {"patientRequestId": str(request.id), "contentType": "application/pdf", "sha256": "ab" * 32},
                ),
                ("patient.import", patient, {"created": True}),
                ("patient.import_bulk", None, {"created": 1200, "updated": 3, "failed": 0}),
                ("call.receive", ("call", request.call_id), {}),
                (
                    "call.recording_mismatch",
                    ("call", request.call_id),
                    {
                        "expectedBytes": 48213,
                        "receivedBytes": 51002,
                        "expectedSha256": sha,
                        "receivedSha256": "ef" * 32,
                    },
                ),
                ("staff_user.create", staff, {"role": "staff"}),
                ("staff_user.reset_password", staff, {"sessionsEnded": 2}),
                ("staff_user.disable", staff, {"sessionsEnded": 1}),
                ("staff_user.role", staff, {"from": "staff", "to": "admin"}),
                ("staff_user.enable", staff, {}),
                ("staff_user.password_link", staff, {"validHours": 24, "firstPassword": True}),
                ("staff_user.password_set", staff, {"firstPassword": True, "sessionsEnded": 0}),
                ("staff_user.password_change", staff, {"sessionsEnded": 1}),
                ("staff_user.sessions_end", staff, {"sessionsEnded": 2, "others": True}),
                ("staff_user.two_factor_enable", staff, {}),
                ("staff_user.two_factor_disable", staff, {}),
                ("staff_user.two_factor_reset", staff, {"wasOn": True, "sessionsEnded": 1}),
                ("staff_user.recovery_code_used", staff, {"left": 9}),
                ("staff_user.recovery_codes_new", staff, {}),
                ("settings.two_factor.update", None, {"twoFactorRequired": True}),
                (
                    "settings.office_hours.add",
                    None,
                    {"weekday": "mon", "opens": "08:00", "closes": "12:00", "weeks": "odd"},
                ),
                (
                    "settings.office_hours.remove",
                    None,
                    {"weekday": "fri", "opens": "13:00", "closes": "17:00", "weeks": "every"},
                ),
                ("settings.calendar.create", None, {"name": "Ordinace MUDr. Nová"}),
                ("settings.calendar.update", ("calendar", calendar.id), {"name": "Ordinace", "ignoreHolidays": True}),
                (
                    "settings.vacation.add",
                    ("calendar", calendar.id),
                    {"name": "Vánoce", "start": "2026-12-24", "end": "2026-12-31", "switchboard": True},
                ),
                (
                    "settings.vacation.remove",
                    ("calendar", calendar.id),
                    {
                        "name": "Ples",
                        "start": "2027-02-05T17:00:00+00:00",
                        "end": "2027-02-06T07:00:00+00:00",
                        "switchboard": False,
                    },
                ),
                ("settings.calls.update", None, {"missedCallRequests": False, "languages": ["cs", "sk"]}),
                ("settings.calls.update", None, {"missedCallRequests": True, "languages": None}),
                ("settings.tag.create", None, {"name": "souhlas"}),
                ("settings.request_type.create", None, {"ecrfId": "CONSENT", "name": "Souhlas"}),
                ("settings.request_type.update", ("request_type", kind.id), {"ecrfId": "CONSENT", "name": "Souhlas"}),
                ("onboarding.file", None, {"overwroteConsoleChanges": True}),
                ("patient.import", ("patient", 7), {"created": False}),  # a target that is no row: no longer exists
                ("settings.retention.update", None, {"callsWithoutRequestDays": 14, "signedDocumentsDays": None}),
                (
                    "patient_request.confirm_type",
                    request,
                    {"requestTypeId": str(kind.id), "suggestedRequestTypeId": None, "asSuggested": False},
                ),
                ("patient_request.clear_urgent", request, {}),
                ("patient_request.correct_transcript", request, {"characters": 48, "withdrawn": False}),
                ("settings.urgency_words.update", None, {"shipped": False, "counts": {"cs": 40, "en": 31}}),
                ("retention.delete", None, {"call_requests": 3, "calls": 5, "patients": 1}),
                (
                    "patient.erase",
                    ("patient", "0a5a3e2c-3f2b-4a8e-9a77-3f0d1d7c2b10"),
                    {"patients": 2, "requests": 2, "requests_kept": 1, "calls": 3, "documents": 0, "documents_kept": 1},
                ),
                ("patient.copy", patient, {"requests": 1, "calls": 1, "documents": 0, "transcripts": 1}),
            ]:
                AuditEvent.record(
                    operator if action.startswith(("staff_user", "onboarding")) else admin,
                    a,
                    action,
                    target,
                    details,
                    at=clock.now(),
                )
    login(app, status=303)
    page = app.get("/console/audit?clinic=clinic-a")
    trs = page.html.select("table.audit tbody tr")
    older = page.html.find("a", rel="next")
    if older is not None:  # more than a page of them: the older ones too
        trs += app.get(older["href"]).html.select("table.audit tbody tr")
    assert {tr["data-action"] for tr in trs} == set(audit_actions.ACTIONS), "one event of every action at least"
    text = visible_text(page)
    for pattern, what in RAW:
        assert not pattern.search(text), (what, pattern.search(text).group(0))
    for tr in trs:
        what = tr.select_one("td.what").text
        assert what and what != tr["data-action"] and "." not in what, tr["data-action"]

    def row(action: str, n: int = 0):
        return [tr for tr in trs if tr["data-action"] == action][n]

    def fields(tr) -> dict[str, str]:
        return {dt.text: dd.get_text(" ", strip=True) for dt, dd in zip(tr.select("dt"), tr.select("dd"))}

    created = row("token.create", 1)  # the first key (the rotation made the newer one)
    assert fields(created) == {
        "Kliniky": "Clinic-A",
        "Oprávnění": "čtení, zápis",
        "Platnost do": re.search(r"\d+\.\s\d+\.\s2027 \d+:\d\d", fields(created)["Platnost do"]).group(0),
    }
    assert created.select_one("td.subject a")["href"] == f"/console/settings/api-keys?clinic=clinic-a#key-{key.id}"
    assert created.select_one("td.subject a").text == "acc-provider-rw"
    assert created.select_one("td.who span")["title"] == "anna@example.cz"
    assert created.select_one("td.who").text.strip() == "Anna Nováková"
    rotated = row("token.rotate")
    assert rotated.select_one("dd a")["href"].endswith(f"#key-{new.id}") and "Starý klíč platí do" in fields(rotated)
    revoked = row("token.revoke")
    assert revoked.select_one("td.who").text.strip() == "provozovatel (příkazová řádka)"
    assert revoked.select_one("td.who span")["title"] == "root"
    assert fields(row("settings.calls.update", 1)) == {
        "Požadavky ze zmeškaných hovorů": "vypnuto",
        "Jazyky volajících": "čeština, slovenština",
    }
    assert fields(row("settings.calls.update", 0)) == {
        "Požadavky ze zmeškaných hovorů": "zapnuto",
        "Jazyky volajících": "jakýkoli jazyk",
    }
    assert row("settings.calls.update").select_one("td.subject a")["href"] == "/console/settings/calls?clinic=clinic-a"
    assert fields(row("settings.office_hours.add")) == {
        "Den": "pondělí",
        "Od": "08:00",
        "Do": "12:00",
        "Týdny": "liché týdny",
    }
    assert fields(row("settings.vacation.add"))["Od"] == cs("24. 12. 2026")
    assert fields(row("staff_user.role")) == {"Od": "pracovník", "Do": "správce"}
    assert fields(row("staff_user.recovery_code_used")) == {"Zbývající kódy pro obnovení": "9"}
    assert fields(row("settings.two_factor.update")) == {"Vyžadováno dvoufázové přihlášení": "zapnuto"}
    assert row("settings.two_factor.update").select_one("td.subject a")["href"] == (
        "/console/settings/staff?clinic=clinic-a"
    )
    assert fields(row("settings.vacation.remove"))["Od"] == cs("5. 2. 2027 18:00"), "the clinic's time zone"
    assert fields(row("settings.retention.update")) == {
        "Hovory bez požadavku (dní)": "14",
        "Podepsané dokumenty (dní)": "uchovává se trvale",
    }
    assert fields(row("retention.delete")) == {cs("Požadavky z hovorů"): "3", "Hovory": "5", "Pacienti": "1"}
    assert fields(row("patient_request.confirm_type"))["Navrženo podle přepisu"] == "jiný"
    assert fields(row("settings.urgency_words.update"))["Počet slov podle jazyka"] == "čeština 40, angličtina 31"
    assert fields(row("patient.erase"))["Ponechané podepsané dokumenty"] == "1"
    assert "(už neexistuje)" in row("patient.erase").select_one("td.subject").text
    assert (
        row("settings.vacation.add").select_one("td.subject a")["href"]
        == f"/console/settings/calendars?clinic=clinic-a#calendar-{calendar.id}"
    )
    mismatch = fields(row("call.recording_mismatch"))
    assert (
        mismatch["Velikost předaná ústřednou"] == "48\xa0213 bajtů"
        and mismatch["Kontrolní součet předaný ústřednou"] == sha
    )
    subject = row("call.recording_mismatch").select_one("td.subject")
    assert " ".join(subject.text.split()) == "Hovor Hlasová zpráva – Jana Dvořáková"
    assert subject.select_one("a")["href"] == f"/console/requests/{request.id}"
    assert row("patient_request.patch", 0).select_one("td.what").text == "Označeno jako vyřízené"
    assert row("patient_request.patch", 1).select_one("td.what").text == "Změněn požadavek: přidán štítek, poznámka"
    assert fields(row("patient_request.create")) == {"Pacient": "Jana Dvořáková", "Typ požadavku": "Souhlas"}
    assert row("attachment.register").select_one("td.subject a").text == "Souhlas s ošetřením"
    assert fields(row("patient.import_bulk")) == {"Nových": "1\xa0200", "Aktualizovaných": "3", "Chybných": "0"}
    assert row("patient.import", 0).select_one("td.subject").get_text(" ", strip=True) == "Pacient (už neexistuje)"
    assert row("staff_user.create").select_one("td.subject span[title]")["title"] == "anna@example.cz"
    assert fields(row("staff_user.create")) == {"Role": "pracovník"}

    # English: the same page in the admin's other language.
    with db.connection_context():
        StaffUser.update(language="en").execute()
    english = app.get("/console/audit?clinic=clinic-a")
    text = visible_text(english)
    for pattern, what in RAW:
        assert not pattern.search(text), (what, pattern.search(text).group(0))
    assert "Missed-call requests" in text and "operator (command line)" in text and "API key created" in text

    # The raw values stay the operator's: `manage.py audit` prints them as they were recorded.
    from tests.support.processes import run_manage as manage

    printed = manage("audit", "--clinic", "clinic-a", "--since", "2000-01-01").stdout
    assert "missedCallRequests" in printed and str(key.id) in printed


# --- the script and the stylesheet -------------------------------------------------------------


def test_pages_carry_no_inline_script_and_link_their_assets_by_content_hash(staff, app):
    """A Content-Security-Policy without 'unsafe-inline' can hold: every script is a file."""
    import hashlib

    request = make(
        "clinic-a",
        "voice_message",
        transcript="x",
        status="reliable",
        has_recording=True,
        recording_url="https://example.test/r.wav",
    )
    with db.connection_context():
        StaffMembership.update(role="admin").execute()
    login(app, status=303)
    pages = [
        "/console/",
        f"/console/requests/{request.id}",
        "/console/audit",
        "/console/settings",
        "/console/settings/api-keys",
        "/console/settings/calendars",
        "/console/help",
    ]
    for path in pages:
        page = app.get(path)
        scripts = page.html.find_all("script")
        assert scripts and all(s.get("src") and not s.text.strip() for s in scripts), path
        assert not [a for tag in page.html.find_all(True) for a in tag.attrs if a.startswith("on")], path
    page = app.get("/console/")
    for tag, attr, name, kind in (
        ("script", "src", "console.js", "text/javascript"),
        ("link", "href", "console.css", "text/css"),
    ):
        url = page.html.find(tag, {attr: re.compile(name)})[attr]
        body = (ROOT / "console" / "static" / name).read_bytes()
        assert url == f"/console/static/{name}?v={hashlib.sha256(body).hexdigest()[:12]}"
        served = app.get(url)
        assert served.content_type == kind and served.body == body
        assert served.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    app.get("/console/static/nothing.js", status=404)
