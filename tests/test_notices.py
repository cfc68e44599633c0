"""E-mail notices through the real SMTP server of the suite (STARTTLS with the session's CA,
a login), delivered by the outbox's own job function in this process, by the test's clock
(tests/support/outbox.py): urgent messages gathered per recipient, keys about to expire
and keys refused, "forgot password", a new staff member's link, and the server down.
The same path through a real worker and gunicorn: tests/test_notices_service.py."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
import redis
import webtest
from rq import Queue

from config import Config
from jobs import outbox
from jobs.context import JobContext
from jobs.outbox import OutboxRelay, gauges
from models import (
    ApiToken,
    AuditEvent,
    Call,
    Clinic,
    Outbox,
    PatientRequest,
    RefusedHandoff,
    StaffMembership,
    StaffUser,
)
from models.requests import Triage
from notices import key_notices
from plumbing import metrics, smtp
from plumbing.clock import as_utc, utc_now
from plumbing.database import db
from staff.passwords import hash_password
from switchboard.finished_calls import finish
from tests.conftest import ROOT, app_beside
from tests.support import bearer, clinic, load, organization, switchboard_url
from tests.support.console import PASSWORD, cs
from tests.support.log_audit import remember, remember_personal
from tests.support.outbox import FUTURE, PUBLIC, deliver_due
from tests.support.ports import free_port
from tests.support.smtp_server import SENDER, html_of, mail_server, text_of

PHONE = "+420601987654"
TRANSCRIPT = "Dobrý den, tady Jaroslav Kratochvíl, mám silnou bolest na hrudi, zavolejte mi prosím."
ON_CALL = "sluzba@clinic.test"


def people(*, when: str = "outsideOfficeHours", hours: list | None = None) -> None:
    """clinic-a (Prague; office hours as given, none by default: always closed) with anna
    (admin, Czech) and ben (staff, English) who asked for urgent notices, cyril who did
    not, and an on-call address."""
    load(
        organization(
            clinic(
                "clinic-a",
                officeHours=hours or [],
                urgentNotices={"staff": True, "onCallEmail": ON_CALL, "when": when},
            ),
            clinic("clinic-b"),
        )
    )
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        for email, name, language, role, opted in (
            ("anna@example.cz", "Anna Nováková", "cs", "admin", True),
            ("ben@example.cz", "Ben Smith", "en", "staff", True),
            ("cyril@example.cz", "Cyril Malý", "cs", "staff", False),
        ):
            user = StaffUser.create(email=email, name=name, password_hash=hash_password(PASSWORD), language=language)
            StaffMembership.create(user=user, clinic=a, role=role, urgent_notices=opted)
            remember_personal(email, "a staff member's e-mail")


def flagged(n: int = 1) -> list[uuid.UUID]:
    """`n` voice messages flagged "may be urgent", finished as the ingest finishes them."""
    made = []
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        for _ in range(n):
            call = Call.create(
                clinic=a, call_sid=f"CA{uuid.uuid4().hex}", call_from=PHONE, call_to="+420222000111", state="pending"
            )
            finish(
                call,
                "voice_message",
                utc_now(),  # the test's clock
                transcript=TRANSCRIPT,
                language="cs",
                triage=Triage(None, [], True, [(47, 53)]),
            )
            made.append(PatientRequest.get(PatientRequest.call == call.id).id)
    remember_personal(TRANSCRIPT, "a transcript")
    return made


def no_patient_data(message) -> None:
    whole = f"{message['Subject']}\n{text_of(message)}\n{html_of(message)}"
    for said in ("Kratochvíl", "Jaroslav", "bolest", "601987654", "601 987 654", PHONE):
        assert said not in whole, f"{said!r} in an e-mail"


def links(message) -> list[str]:
    return sorted(set(re.findall(r"https://clinic\.test/console/requests/[0-9a-f-]{36}", text_of(message))))


# --- urgent messages ------------------------------------------------------------------------


def test_three_flagged_messages_in_a_minute_are_one_email_to_each_opted_in_recipient(mailing, mailbox, clock):
    people()
    first = flagged(1)
    assert deliver_due(mailing) == ["gathered"], "the event became gathered e-mails, none due yet"
    assert mailbox.messages == []
    clock.set(FUTURE + timedelta(seconds=20))
    more = flagged(2)
    deliver_due(mailing)
    assert mailbox.messages == [], "still gathering"
    clock.set(FUTURE + timedelta(seconds=31))
    assert deliver_due(mailing) == ["sent"] * 3
    got = {m["To"]: m for m in mailbox.wait_for(3, timeout=5)}
    assert set(got) == {"anna@example.cz", "ben@example.cz", ON_CALL}, "opted-in staff and the on-call address"
    expected = sorted(f"{PUBLIC}/console/requests/{i}" for i in first + more)
    for message in got.values():
        assert links(message) == expected, "one e-mail with all three"
        assert message["From"] == SENDER
        no_patient_data(message)
    assert "Zprávy, které mohou být naléhavé: 3. Klinika: Clinic-A." in text_of(got["anna@example.cz"]), "Czech"
    assert "Messages to Clinic-A that may be urgent: 3." in text_of(got["ben@example.cz"]), "English for ben"
    assert "Clinic-A" in got[ON_CALL]["Subject"]
    with db.connection_context():
        sent = AuditEvent.select().where(AuditEvent.action == "notice.urgent_sent")
        assert (
            sorted(e.details for e in sent)
            == ['{"requests": 3, "toStaff": false}'] + ['{"requests": 3, "toStaff": true}'] * 2
        )


def test_a_recipient_gets_at_most_one_urgent_email_every_five_minutes(mailing, mailbox, clock):
    people()
    flagged(1)
    clock.set(FUTURE + timedelta(seconds=31))
    deliver_due(mailing)
    mailbox.wait_for(3, timeout=5)
    mailbox.clear()
    clock.set(FUTURE + timedelta(minutes=1))
    later = flagged(1)
    for minutes in (2, 4):
        clock.set(FUTURE + timedelta(minutes=minutes))
        deliver_due(mailing)
        assert mailbox.messages == [], f"nothing within five minutes of the last ({minutes} min)"
    clock.set(FUTURE + timedelta(minutes=5, seconds=35))
    deliver_due(mailing)
    for message in mailbox.wait_for(3, timeout=5):
        assert links(message) == [f"{PUBLIC}/console/requests/{later[0]}"]


def test_a_message_in_office_hours_is_mailed_only_when_the_clinic_says_always(mailing, mailbox, clock):
    # 2100-03-03 is a Wednesday; 20:14 UTC is 21:14 in Prague.
    evening = [{"weekday": "wed", "opens": "20:00", "closes": "23:00"}]
    people(hours=evening)
    flagged(1)
    assert deliver_due(mailing) == ["office_hours"]
    with db.connection_context():
        Clinic.update(urgent_notice_when="always").where(Clinic.slug == "clinic-a").execute()
    flagged(1)
    clock.set(FUTURE + timedelta(seconds=31))
    assert deliver_due(mailing) == ["gathered", "sent", "sent", "sent"]


def test_a_message_cleared_before_its_email_goes_is_not_mailed(mailing, mailbox, clock):
    people()
    (request,) = flagged(1)
    deliver_due(mailing)
    with db.connection_context():
        PatientRequest.delete().where(PatientRequest.id == request).execute()  # erased meanwhile
    clock.set(FUTURE + timedelta(seconds=31))
    assert deliver_due(mailing) == ["gone", "gone", "gone"]
    assert mailbox.messages == []


# --- API keys -------------------------------------------------------------------------------


def issue(days: float, name: str = "switchboard") -> ApiToken:
    with db.connection_context():
        token, text = ApiToken.issue(
            name, [Clinic.by_slug("clinic-a")], ["read", "write"], FUTURE, expires_at=FUTURE + timedelta(days=days)
        )
    remember(text, "an API key")
    return token


def test_a_key_14_and_3_days_from_expiry_gives_one_email_each_the_banner_and_the_metric(
    mailing, mailbox, clock, wsgi_app
):
    people()
    token = issue(20)
    console = app_beside(mailing)
    with db.connection_context():
        assert gauges(clock())["api_keys_expiring_soon"] == 0
    for day, expected in ((7, 1), (8, 0), (16, 0), (17, 1), (18, 0)):
        clock.set(FUTURE + timedelta(days=day))
        with db.connection_context():
            assert key_notices.expiring(clock()) == expected, f"day {day}"
        deliver_due(mailing)
    messages = mailbox.wait_for(4, timeout=5)
    assert sorted((m["To"], m["Subject"]) for m in messages) == [
        ("anna@example.cz", f"Klíč API vyprší za 13 dní: {token.name}"),
        ("anna@example.cz", f"Klíč API vyprší za 3 dny: {token.name}"),  # 1 den, 2-4 dny, 5 dní
        ("provoz@clinic.test", f"An API key expires in 13 days: {token.name}"),
        ("provoz@clinic.test", f"An API key expires in 3 days: {token.name}"),
    ], "the clinic's admin (not its staff) and the operator, each notice once"
    assert f"{PUBLIC}/console/settings/api-keys?clinic=clinic-a" in text_of(messages[0])
    with db.connection_context():
        assert gauges(clock())["api_keys_expiring_soon"] == 1
    # The banner, on every page of an admin of the clinic, and of nobody else.
    web = webtest.TestApp(console)
    form = web.get("/console/login").forms[0]
    form["email"], form["password"] = "anna@example.cz", PASSWORD
    form.submit(status=303)
    for page in ("/console/", "/console/settings", "/console/account"):
        banner = web.get(page).html.find(id="keys-expiring")
        assert banner is not None and "Klíče API vašich klinik, které vyprší do 14 dnů: 1." in banner.text, page
    staff = webtest.TestApp(console)
    form = staff.get("/console/login").forms[0]
    form["email"], form["password"] = "ben@example.cz", PASSWORD
    form.submit(status=303)
    assert staff.get("/console/").html.find(id="keys-expiring") is None
    # The gauge reaches /metrics through the relay's round.
    OutboxRelay(Queue("outbox", connection=redis.Redis.from_url(mailing.redis_url)), mailing).round()
    assert re.search(r"^clinic_api_keys_expiring_soon 1\.0$", web.get("/metrics").text, re.M)


def test_a_rotated_or_revoked_key_gets_no_expiry_notice(mailing, clock):
    people()
    rotated, revoked = issue(5, "old"), issue(5, "gone")
    with db.connection_context():
        ApiToken.issue(
            "new",
            [Clinic.by_slug("clinic-a")],
            ["read"],
            FUTURE,
            expires_in=timedelta(days=90),
            rotated_from=rotated.id,
        )
        ApiToken.update(revoked_at=as_utc(FUTURE)).where(ApiToken.id == revoked.id).execute()
        assert key_notices.expiring(clock()) == 0


def test_a_handoff_with_an_expired_key_is_listed_and_its_admins_get_one_email_a_day(mailing, mailbox, clock):
    people()
    with db.connection_context():
        token, text = ApiToken.issue(
            "switchboard-2099",
            [Clinic.by_slug("clinic-a")],
            ["read", "write"],
            FUTURE,
            expires_at=FUTURE - timedelta(days=1),
        )
    remember(text, "an API key")
    service = webtest.TestApp(app_beside(mailing))
    url = switchboard_url("clinic-a", "recording-complete")
    for n in range(3):
        answer = service.post_json(url, {"CallSid": f"CA-lost-{n}"}, headers=bearer(text), status=401)
        assert answer.json["code"] == "UNAUTHORIZED"
    with db.connection_context():
        refused = list(RefusedHandoff.select().where(RefusedHandoff.clinic_slug == "clinic-a"))
        assert [(r.reason, r.token_id, r.status) for r in refused] == [("expired", token.id, 401)] * 3
        assert Outbox.select().where(Outbox.topic == "key.refused").count() == 1, "one notice a key a day"
    deliver_due(mailing)
    messages = mailbox.wait_for(2, timeout=5)
    assert sorted(m["To"] for m in messages) == ["anna@example.cz", "provoz@clinic.test"]
    czech = next(m for m in messages if m["To"] == "anna@example.cz")
    assert czech["Subject"] == "Hovory odmítnuty: klíč API switchboard-2099 už neplatí (vypršela mu platnost)"
    assert cs("Vydejte nový klíč v Nastavení › Klíče API") in text_of(czech)
    # The next day's first refusal tells them again, once.
    clock.set(FUTURE + timedelta(days=1))
    for n in range(2):
        service.post_json(url, {"CallSid": f"CA-next-{n}"}, headers=bearer(text), status=401)
    deliver_due(mailing)
    assert len(mailbox.wait_for(4, timeout=5)) == 4
    # Listed on the API keys page with the reason, and by `manage.py calls --refused`.
    form = service.get("/console/login").forms[0]
    form["email"], form["password"] = "anna@example.cz", PASSWORD
    form.submit(status=303)
    page = service.get("/console/settings/api-keys?clinic=clinic-a")
    rows = page.html.find(id="refused").find_all("tr")[1:]
    said = "klíči vypršela platnost"
    assert len(rows) == 5 and all(said in row.text and "switchboard-2099" in row.text for row in rows)
    listed = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "calls", "--refused", "--clinic", "clinic-a"],
        env={"DATABASE_URL": mailing.database_url, "PATH": "/usr/bin:/bin", "SECRET_KEY": mailing.secret_key},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert listed.count("401 UNAUTHORIZED  key expired") == 5


def test_an_unknown_or_forged_key_is_counted_only(mailing, mailbox):
    people()
    token = issue(30)
    service = webtest.TestApp(app_beside(mailing))
    url = switchboard_url("clinic-a", "recording-complete")
    forged = f"csk_{token.id.hex}_{'x' * 43}"
    stranger = f"csk_{uuid.uuid4().hex}_{'y' * 43}"
    for text in (forged, stranger):
        service.post_json(url, {"CallSid": "CA-x"}, headers=bearer(text), status=401)
    with db.connection_context():
        assert RefusedHandoff.select().count() == 0
        assert Outbox.select().count() == 0
    scraped = service.get("/metrics").text
    assert re.search(r'^clinic_handoff_keys_refused_total\{reason="unknown"\} 2\.0$', scraped, re.M)


# --- staff accounts by e-mail ---------------------------------------------------------------


def forgot(web: webtest.TestApp, email: str, status: int = 200):
    form = web.get("/console/login/forgot?lang=cs").forms[0]
    form["email"] = email
    return form.submit(status=status)


def test_forgot_password_answers_the_same_for_an_unknown_address_and_mails_a_single_use_link(mailing, mailbox, clock):
    people()
    web = webtest.TestApp(app_beside(mailing))
    assert web.get("/console/login?lang=cs").html.find("a", string="Zapomenuté heslo?") is not None
    known, unknown = forgot(web, "Ben@Example.cz"), forgot(web, "nikdo@example.cz")
    notice = known.html.find(class_="notice").text
    assert notice == unknown.html.find(class_="notice").text and "60 minut" in notice
    assert known.status_int == unknown.status_int == 200
    assert deliver_due(mailing) == ["sent"]
    (message,) = mailbox.wait_for(1, timeout=5)
    assert message["To"] == "ben@example.cz" and message["Subject"] == "Set a new password for the clinic console"
    (link,) = re.findall(r"https://clinic\.test(/console/password/[A-Za-z0-9_-]+)\?lang=en", text_of(message))
    remember(link.rsplit("/", 1)[1], "a set-password link")
    form = web.get(link).forms[0]
    form["password"] = form["repeat"] = "violet harbour trombone acorn"
    form.submit(status=303)
    assert web.get(link, status=410)
    clock.set(FUTURE + timedelta(minutes=1))
    forgot(web, "ben@example.cz")
    deliver_due(mailing)
    (_, second) = mailbox.wait_for(2, timeout=5)
    (late,) = re.findall(r"https://clinic\.test(/console/password/[A-Za-z0-9_-]+)", text_of(second))
    remember(late.rsplit("/", 1)[1], "a set-password link")
    clock.set(FUTURE + timedelta(minutes=62))
    web.get(late, status=410)  # short-lived: an hour


def test_forgot_password_is_throttled_per_address_and_per_client(mailing, mailbox):
    people()
    web = webtest.TestApp(app_beside(mailing))
    for _ in range(3):
        forgot(web, "ben@example.cz")
        forgot(web, "nikdo@example.cz")
    for email in ("ben@example.cz", "nikdo@example.cz"):
        refused = forgot(web, email, status=429)
        assert "Příliš mnoho žádostí" in refused.text and int(refused.headers["Retry-After"]) > 3000
    others = [forgot(web, f"n{i}@example.cz", status="*").status_int for i in range(6)]
    assert others == [200, 200, 429, 429, 429, 429], "ten from one client an hour, refused ones counted"
    assert deliver_due(mailing) == ["sent"] * 3, "three links for ben, nothing for the others"


def test_without_smtp_the_login_page_offers_no_link_and_the_page_says_whom_to_ask(app):
    page = app.get("/console/login?lang=cs")
    assert page.html.find("a", string="Zapomenuté heslo?") is None
    assert "Požádejte správce své kliniky" in app.get("/console/login/forgot?lang=cs").text


def test_a_new_staff_member_gets_the_set_password_link_by_email(mailing, mailbox):
    people()
    web = webtest.TestApp(app_beside(mailing))
    form = web.get("/console/login").forms[0]
    form["email"], form["password"] = "anna@example.cz", PASSWORD
    form.submit(status=303)
    page = web.get("/console/settings/staff?clinic=clinic-a")
    form = next(f for f in page.forms.values() if "email" in f.fields and "name" in f.fields)
    form["email"], form["name"] = "dana@example.cz", "Dana Veselá"
    remember_personal("dana@example.cz", "a new staff member's e-mail")
    page = form.submit(status=303).follow()
    assert "e-mailem" in page.html.find(id="link-mailed").text and page.html.find(id="new-link") is None
    assert deliver_due(mailing) == ["sent"]
    (message,) = mailbox.wait_for(1, timeout=5)
    assert message["To"] == "dana@example.cz" and message["Subject"] == "Váš účet v konzoli kliniky"
    (link,) = re.findall(r"https://clinic\.test(/console/password/[A-Za-z0-9_-]+)", text_of(message))
    remember(link.rsplit("/", 1)[1], "a set-password link")
    assert "Dana Veselá" in web.get(link).text


def test_the_account_page_and_the_clinic_settings_choose_who_is_told(mailing, mailbox):
    people()
    web = webtest.TestApp(app_beside(mailing))
    form = web.get("/console/login").forms[0]
    form["email"], form["password"] = "cyril@example.cz", PASSWORD
    form.submit(status=303)
    page = web.get("/console/account")
    form = next(f for f in page.forms.values() if "action" in f.fields and f["action"].value == "notices")
    clinic_id = next(name for name in form.fields if name.startswith("urgent-"))
    form[clinic_id].checked = True
    form.submit(status=303)
    with db.connection_context():
        assert StaffMembership.get(StaffMembership.user == StaffUser.by_email("cyril@example.cz").id).urgent_notices
    admin = webtest.TestApp(app_beside(mailing))
    form = admin.get("/console/login").forms[0]
    form["email"], form["password"] = "anna@example.cz", PASSWORD
    form.submit(status=303)
    page = admin.get("/console/settings/calls?clinic=clinic-a")
    form = next(f for f in page.forms.values() if "action" in f.fields and f["action"].value == "urgent-notices")
    form["staff"].checked = False
    form["on_call"] = ""
    form["when"] = "always"
    form.submit(status=303)
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        assert (a.urgent_notice_staff, a.urgent_notice_email, a.urgent_notice_when) == (False, None, "always")
    flagged(1)
    assert deliver_due(mailing) == ["nobody"]


# --- the server -----------------------------------------------------------------------------


def test_the_smtp_server_down_loses_no_email(mailing, mailbox, clock):
    people()
    flagged(1)
    deliver_due(mailing)
    mailbox.stop()
    try:
        clock.set(FUTURE + timedelta(seconds=31))
        assert deliver_due(mailing) == ["error:connectionrefusederror"]
        with db.connection_context():
            waiting = Outbox.select().where((Outbox.topic == "mail") & (Outbox.state == "pending"))
            assert waiting.count() == 3 and max(r.attempts for r in waiting) == 1
    finally:
        mailbox.start()
    clock.set(FUTURE + timedelta(minutes=1))
    assert deliver_due(mailing) == ["sent"] * 3
    assert len(mailbox.wait_for(3, timeout=5)) == 3


def test_the_certificate_is_verified_and_starttls_required(mailbox):
    sent = smtp.message(SENDER, "x@clinic.test", "hi", "text")
    with pytest.raises(smtp.MailError) as untrusted:
        smtp.send(smtp.Server.parse(mailbox.url), sent)  # the system's authorities do not know the suite's CA
    assert (untrusted.value.word, untrusted.value.transient) == ("certificate_refused", True)
    box = mail_server.Mailbox()
    server = mail_server.controller(box, free_port())  # bin/run's: no STARTTLS
    server.start()
    try:
        with pytest.raises(smtp.MailError) as no_tls:
            smtp.send(smtp.Server.parse(f"smtp://127.0.0.1:{server.port}"), sent)
        assert no_tls.value.word == "no_starttls" and not no_tls.value.transient
        smtp.send(smtp.Server.parse(f"smtp://127.0.0.1:{server.port}?starttls=off"), sent)
        assert box.wait_for(1, timeout=5)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("settings", "refused"),
    [
        ({"smtp_url": "smtp://smtp.example.cz?starttls=off"}, "loopback"),
        ({"smtp_url": "http://smtp.example.cz"}, "smtp://"),
        ({"smtp_url": "smtp://smtp.example.cz", "mail_from": ""}, "MAIL_FROM"),
        ({"smtp_url": "smtp://smtp.example.cz", "public_base_url": ""}, "PUBLIC_BASE_URL"),
        ({"smtp_url": "", "mail_from": "a@b.cz", "public_base_url": ""}, "SMTP_URL is not"),
        ({"mail_retry_delays": "10,x"}, "MAIL_RETRY_DELAYS"),
    ],
)
def test_mail_settings_that_would_not_work_refuse_the_start(settings, refused):
    values = {"mail_from": "ordinace@clinic.test", "public_base_url": PUBLIC, **settings}
    with pytest.raises(ValueError, match=re.escape(refused)):
        Config(**values)


def test_the_smtp_password_is_masked_in_the_settings_shown(mailing):
    assert mailing.describe()["smtp_url"] == "***"


def test_outbox_rows_are_deleted_a_week_after_delivery(mailing, clock):
    people()
    flagged(1)
    deliver_due(mailing)
    with db.connection_context():
        assert Outbox.purge(clock() + timedelta(days=6)) == 0
        assert Outbox.purge(clock() + timedelta(days=8)) == 1, "the delivered event; the pending e-mails stay"


def test_the_emails_link_to_the_consoles_own_addresses():
    from console import pages
    from notices import console_links

    assert (console_links.INBOX, console_links.ACCOUNT, console_links.API_KEYS) == (
        pages.INBOX,
        pages.ACCOUNT,
        pages.API_KEYS,
    )
    assert console_links.request("R") == pages.request("R")
    assert console_links.password_link("T", "cs") == pages.with_query(pages.password_link("T"), lang="cs")
    assert console_links.api_keys("clinic-a") == pages.of_clinic(pages.API_KEYS, "clinic-a")


def test_a_job_for_a_row_done_already_does_nothing(mailing):
    people()
    flagged(1)
    with db.connection_context():
        (row,) = Outbox.select()
    context = JobContext.build(mailing)
    assert outbox.deliver(row.id, context=context) == "gathered"
    assert outbox.deliver(row.id, context=context) == "noop"
    context.relay.close()
    assert metrics.MAIL.name == "mail_total"
