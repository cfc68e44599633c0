"""Personal data has a lifecycle (docs/data-protection.md): the inventory names every column,
each clinic's retention deletes what is past it (the clock moved, not waited for), in
batches that survive a crash, counted in a metric and the audit trail; the audit trail
allows one change, an old event's address removed; the settings are the console's, the
onboarding file's and the CLI's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from datetime import timedelta

import peewee as pw
import pytest
import redis

from models import (
    MODELS,
    AuditEvent,
    Call,
    Clinic,
    MedicalRecord,
    Patient,
    PatientRequest,
    PendingObjectDeletion,
    StaffMembership,
    StaffPasswordLink,
    StaffRecoveryCode,
    StaffSession,
    StaffUser,
)
from onboarding.clinic_settings import ClinicSettings
from onboarding.writer import OnboardingError
from plumbing import metrics
from plumbing.clock import as_utc
from plumbing.database import db
from privacy import patient_copy, retention
from staff.passwords import hash_password
from storage import LocalStorage
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY, clinic, issue_token, load, organization
from tests.support.people import (
    STORAGE_DIR,
    bucket_bytes,
    database_dump,
    finish_call,
    found,
    lifecycle_organization,
    new_person,
    redis_values,
    seed,
)

INVENTORY = ROOT / "docs" / "data-protection.md"
LIFETIMES = retention.Lifetimes(
    session_idle=timedelta(hours=12),
    session_absolute=timedelta(hours=24),
    session_pending=timedelta(minutes=15),
    audit_details_without_clinic=timedelta(days=180),
)
PASSWORD = "correct horse battery"


def storage() -> LocalStorage:
    return LocalStorage(STORAGE_DIR, signing_key=b"x" * 16, public_base_url="http://x")


def run_round(clock, **kwargs) -> retention.Deleted:
    """A worker's purge round: the uploads never registered, then the retention's (counted)."""
    from config import Config
    from jobs.storage_purge import purge_storage

    total = retention.Deleted()
    with db.connection_context():
        purge_storage(storage(), Config(database_url=PG_URL, secret_key=SECRET_KEY, clock=clock))
        for deleted in retention.run(storage(), clock(), LIFETIMES, **kwargs).values():
            total.add(deleted)
    return total


# --- the inventory ------------------------------------------------------------------------------


def _sections() -> dict[str, str]:
    """Each `### ` section of the inventory, by every table its heading names."""
    text = INVENTORY.read_text("utf-8")
    out: dict[str, str] = {}
    for part in re.split(r"^### ", text, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        for table in re.findall(r"`([a-z_]+)`", heading):
            out[table] = body
    return out


def test_the_inventory_names_every_column_of_every_table():
    sections = _sections()
    missing = []
    for model in MODELS:
        table = model._meta.table_name
        body = sections.get(table)
        if body is None:
            missing.append(f"{table} (no section)")
            continue
        named = set(re.findall(r"`([a-z_0-9]+(?:\.[a-z_0-9]+)?)`", body))
        for f in model._meta.sorted_fields:
            if f.column_name not in named and f"{table}.{f.column_name}" not in named:
                missing.append(f"{table}.{f.column_name}")
    assert missing == [], "docs/data-protection.md must say what each column holds"


def test_the_inventory_and_the_patients_copy_name_the_same_fields():
    """Every column the inventory says is in the copy is there under the key it says, and
    the copy holds no column the inventory does not list."""
    documented: dict[tuple[str, str], str] = {}
    for table, body in _sections().items():
        for row in re.findall(r"^\| (`[^|]+) \| [^|]+ \| (`[^|]+) \|$", body, flags=re.M):
            columns = re.findall(r"`([a-z_0-9]+)`", row[0])
            keys = re.findall(r"`([A-Za-z0-9\[\]._]+)`", row[1])
            if len(keys) == 1:
                keys = keys * len(columns)
            documented.update({(table, c): k for c, k in zip(columns, keys)})
    assert documented == patient_copy.FIELDS


# --- retention ----------------------------------------------------------------------------------


@pytest.fixture
def token(app):
    load(lifecycle_organization())
    return issue_token(["clinic-a"], ["read", "write"])


def test_a_new_clinic_gets_the_default_retention_and_an_existing_one_keeps_its_own(app):
    load(organization(clinic("clinic-a")))
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        assert retention.settings_of(a) == {
            "resolvedCallRequestsDays": 90,
            "callsWithoutRequestDays": 30,
            "auditDetailsDays": 180,
            "signedDocumentsDays": None,
            "resolvedApiRequestsDays": 365,
            "readTrailDays": 730,
        }
        # A clinic from before the settings (the migration leaves them empty): a file without
        # `retention` never starts deleting its data.
        Clinic.update(
            retention_call_requests_days=None,
            retention_calls_days=None,
            retention_audit_details_days=None,
            retention_api_requests_days=None,
            retention_reads_days=None,
        ).where(Clinic.id == a.id).execute()
    load(organization(clinic("clinic-a")))
    with db.connection_context():
        assert set(retention.settings_of(Clinic.by_slug("clinic-a")).values()) == {None}
    load(organization(clinic("clinic-a", retention={"resolvedCallRequestsDays": 7, "signedDocumentsDays": 3650})))
    with db.connection_context():
        assert retention.settings_of(Clinic.by_slug("clinic-a")) == {
            "resolvedCallRequestsDays": 7,
            "callsWithoutRequestDays": None,
            "auditDetailsDays": None,
            "signedDocumentsDays": 3650,
            "resolvedApiRequestsDays": None,
            "readTrailDays": None,
        }


@pytest.mark.parametrize("value", [0, -1, "30", 1.5, 40000])
def test_the_onboarding_file_refuses_a_retention_that_is_not_a_number_of_days(app, value):
    with pytest.raises(OnboardingError) as refused:
        load(organization(clinic("clinic-a", retention={"callsWithoutRequestDays": value})))
    assert "retention.callsWithoutRequestDays" in refused.value.path


def test_past_each_period_the_round_leaves_nothing_of_the_expired_data(app, token, clock):
    """A resolved voicemail, a call without a request, a patient only a call made, a signed
    document, an old login's address: each gone once its period passed, not a day before,
    from the database, the bucket and Redis; an open request stays."""
    start = clock()
    with db.connection_context():
        ClinicSettings(Clinic.by_slug("clinic-a"), retention.WORKER, SECRET_KEY, clock()).set_retention(
            {"signedDocumentsDays": 365}
        )
    person = seed(app, token, new_person(), start)  # a named patient: stays, their calls go
    caller = new_person()  # a number and nothing else: a patient only a call made
    message = finish_call("clinic-a", caller.national, start, "voice_message", transcript=caller.transcript)
    waiting = new_person()
    still_open = finish_call("clinic-a", waiting.phone, start, "voice_message", transcript=waiting.transcript)
    with db.connection_context():
        PatientRequest.update(done_at=as_utc(start)).where(
            PatientRequest.call.in_([uuid.UUID(message), uuid.UUID(person.calls["message"])])
        ).execute()
        AuditEvent.insert(
            at=as_utc(start),
            actor_kind="staff",
            actor_name="anna@example.cz",
            clinic_id=Clinic.by_slug("clinic-a").id,
            action="staff.login",
            details="{}",
            address="203.0.113.77",
        ).execute()
    gone = [*caller.traces(), person.transcript]

    clock.set(start + timedelta(days=29))
    assert run_round(clock).counts() == {}
    clock.set(start + timedelta(days=31))
    assert run_round(clock).counts() == {"calls": 1}  # the call that made no request
    with db.connection_context():
        assert Call.select().where(Call.id == person.calls["bare"]).count() == 0

    clock.set(start + timedelta(days=89))
    assert run_round(clock).counts() == {}
    clock.set(start + timedelta(days=91))
    deleted = run_round(clock)
    assert deleted.counts() == {"call_requests": 2, "calls": 2, "patients": 1}
    dump, cached = database_dump(PG_URL), redis_values(REDIS_URL)
    assert found(gone, dump, cached) == []
    assert person.last in dump, "a named patient stays; only their call's data went"
    assert found(waiting.traces(), dump) != [], "an open request is never deleted by age"
    with db.connection_context():
        assert Call.select().where(Call.id == still_open).count() == 1
        assert Patient.select().where(Patient.phone == caller.phone).count() == 0
        events = list(AuditEvent.select().where(AuditEvent.action == "retention.delete").order_by(AuditEvent.id))
        assert [json.loads(e.details) for e in events] == [{"calls": 1}, deleted.counts()]
        assert all(e.actor_kind == "operator" and e.actor_name == "worker" and e.address is None for e in events)

    clock.set(start + timedelta(days=181))
    assert set(run_round(clock).counts()) == {"audit_addresses"}
    with db.connection_context():
        login = AuditEvent.get(AuditEvent.address.is_null() & (AuditEvent.action == "staff.login"))
        assert login.actor_name == "anna@example.cz" and login.redacted_at is not None, "who and what stay"
    assert "203.0.113.77" not in database_dump(PG_URL)

    assert person.document_text.encode() in bucket_bytes()
    clock.set(start + timedelta(days=366))
    counts = run_round(clock).counts()
    # The booked request (resolved when it was made, a year ago) goes with its period too.
    assert {kind: n for kind, n in counts.items() if kind != "audit_addresses"} == {
        "documents": 1,
        "objects": 2,
        "api_requests": 1,
    }
    assert person.document_text.encode() not in bucket_bytes()
    with db.connection_context():
        assert MedicalRecord.select().count() == 0 and PendingObjectDeletion.select().count() == 0
    assert run_round(clock).counts() == {}, "a second round finds nothing more"


def test_a_round_that_dies_halfway_loses_nothing_and_the_next_one_finishes(app, token, clock):
    """Five expired voicemails in batches of two; the database refuses the second batch
    (a trigger): the first batch is gone whole (requests and their calls), the others are
    whole; the next round deletes them."""
    start = clock()
    calls = [
        finish_call("clinic-a", f"+42077{n:07d}", start, "voice_message", transcript=f"zpráva {n}") for n in range(5)
    ]
    with db.connection_context():
        for n, call in enumerate(calls):  # resolved one after the other: the batches' order
            PatientRequest.update(done_at=as_utc(start) + timedelta(minutes=n)).where(
                PatientRequest.call == call
            ).execute()
        third = PatientRequest.get(PatientRequest.call == calls[2])
        db.execute_sql(
            "CREATE FUNCTION refuse_third() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF OLD.id = '{third.id}' THEN RAISE EXCEPTION 'worker killed'; END IF; RETURN OLD; END $$"
        )
        db.execute_sql(
            'CREATE TRIGGER refuse_third BEFORE DELETE ON "patient_request" '
            "FOR EACH ROW EXECUTE FUNCTION refuse_third()"
        )
    clock.set(start + timedelta(days=91))
    try:
        with pytest.raises(pw.InternalError, match="worker killed"), db.connection_context():
            retention.clinic_round(Clinic.by_slug("clinic-a"), as_utc(clock()), batch=2)
        with db.connection_context():
            left = {str(r.call_id) for r in PatientRequest.select()}
            assert len(left) == 3 and Call.select().count() == 3
            assert {str(c.id) for c in Call.select()} == left, "every request still has its call"
    finally:
        with db.connection_context():
            db.execute_sql('DROP TRIGGER refuse_third ON "patient_request"')
            db.execute_sql("DROP FUNCTION refuse_third()")
    assert run_round(clock, batch=2).counts()["call_requests"] == 3
    with db.connection_context():
        assert PatientRequest.select().count() == 0 and Call.select().count() == 0


def test_ended_sessions_used_links_and_used_recovery_codes_go(app, token, clock):
    now = as_utc(clock())
    with db.connection_context():
        user = StaffUser.create(email="anna@example.cz", name="Anna", password_hash=hash_password(PASSWORD))
        for sid, seen, made, pending in (
            ("idle", 13, 13, None),
            ("old", 0, 25, None),
            ("half", 0, 1, "code"),
            ("live", 0, 1, None),
        ):
            StaffSession.create(
                id=sid,
                user=user,
                created_at=now - timedelta(hours=made),
                last_seen_at=now - timedelta(hours=seen),
                csrf_token="x",
                pending=pending,
                ip="198.51.100.7",
            )
        for lid, used, expires in (
            ("used", now, now + timedelta(hours=1)),
            ("expired", None, now),
            ("live", None, now + timedelta(hours=1)),
        ):
            StaffPasswordLink.create(user=user, token_hash=lid, created_at=now, expires_at=expires, used_at=used)
        StaffRecoveryCode.create(user=user, code_hash="used", used_at=now)
        StaffRecoveryCode.create(user=user, code_hash="unused")
    deleted = run_round(clock)
    assert (deleted.staff_sessions, deleted.password_links, deleted.recovery_codes) == (3, 2, 1)
    with db.connection_context():
        assert [s.id for s in StaffSession.select()] == ["live"]
        assert [p.token_hash for p in StaffPasswordLink.select()] == ["live"]
        assert [c.code_hash for c in StaffRecoveryCode.select()] == ["unused"]


def test_a_clinic_without_retention_keeps_everything_however_old(app, token, clock):
    start = clock()
    call = finish_call("clinic-a", "+420770000123", start, "voice_message", transcript="stará zpráva")
    with db.connection_context():
        PatientRequest.update(done_at=as_utc(start)).execute()
        Clinic.update(
            retention_call_requests_days=None,
            retention_calls_days=None,
            retention_audit_details_days=None,
            retention_api_requests_days=None,
            retention_reads_days=None,
        ).execute()
    clock.set(start + timedelta(days=3650))
    assert run_round(clock).counts() == {}
    with db.connection_context():
        assert Call.select().where(Call.id == call).count() == 1


def test_the_workers_round_counts_what_it_deleted_in_the_metric(app, token, clock):
    from config import Config
    from jobs.storage_purge import retain

    start = clock()
    finish_call("clinic-a", "+420770000124", start, "no_recording")
    clock.set(start + timedelta(days=31))
    config = Config(database_url=PG_URL, redis_url=REDIS_URL, secret_key=SECRET_KEY, clock=clock)
    recorder = metrics.Recorder()  # the worker's
    with db.connection_context():
        assert retain(storage(), config, recorder).calls == 1
    connection = redis.Redis.from_url(REDIS_URL)
    assert recorder.flush(connection)
    scraped = app.get("/metrics").text
    assert re.search(r'clinic_retention_deleted_total\{kind="calls"\} [1-9]', scraped), scraped[-2000:]


# --- the audit trail ----------------------------------------------------------------------------


def test_the_trail_allows_removing_an_old_address_and_nothing_else(app, token, clock):
    old_event = (
        'INSERT INTO "audit_event" ("at", "actor_kind", "actor_name", "action", "details", "address") '
        "VALUES ('2026-11-01 08:00', 'staff', 'anna@example.cz', 'staff.login', '{}', '192.0.2.1')"
    )
    for statement in (
        'UPDATE "audit_event" SET "actor_name" = \'x\'',
        'UPDATE "audit_event" SET "address" = NULL',  # without saying when it was redacted
        'UPDATE "audit_event" SET "address" = NULL, "redacted_at" = now(), "details" = \'{"x": 1}\'',
        'DELETE FROM "audit_event"',
    ):
        with db.connection_context(), pytest.raises(pw.ProgrammingError, match="append-only"), db.atomic():
            db.execute_sql(old_event)
            db.execute_sql(statement)
    with db.connection_context():
        with db.atomic():
            db.execute_sql(old_event)
        assert AuditEvent.forget_addresses(None, as_utc(clock()) + timedelta(days=1), as_utc(clock()), 10) == 1
        event = AuditEvent.get()
        assert event.address is None and event.redacted_at is not None
        assert (event.actor_name, event.action) == ("anna@example.cz", "staff.login")
        assert AuditEvent.forget_addresses(None, as_utc(clock()) + timedelta(days=1), as_utc(clock()), 10) == 0


# --- the console and the CLI ---------------------------------------------------------------------


@pytest.fixture
def admin(app, token):
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        for email, role in (("anna@example.cz", "admin"), ("bob@example.cz", "staff")):
            user = StaffUser.create(
                email=email, name=email.split("@")[0].title(), password_hash=hash_password(PASSWORD)
            )
            StaffMembership.create(user=user, clinic=a, role=role)


def log_in(app, email: str) -> None:
    app.reset()
    form = app.get("/console/login").forms[0]
    form["email"], form["password"] = email, PASSWORD
    form.submit(status=303)


def test_an_admin_sets_the_retention_in_the_console(app, admin):
    with db.connection_context():
        Clinic.update(
            retention_call_requests_days=None,
            retention_calls_days=None,
            retention_audit_details_days=None,
            retention_api_requests_days=None,
            retention_reads_days=None,
        ).execute()
    log_in(app, "anna@example.cz")
    page = app.get("/console/settings/retention?clinic=clinic-a")
    assert "Uchovávání údajů" in page.text and "nic se podle stáří nemaže" in page.text
    assert "Uchovávání údajů" in app.get("/console/settings?clinic=clinic-a").text
    form = page.forms[next(k for k, f in page.forms.items() if "resolvedCallRequestsDays" in f.fields)]
    form["resolvedCallRequestsDays"], form["callsWithoutRequestDays"] = "60", "14"
    form["auditDetailsDays"], form["signedDocumentsDays"] = "365", ""
    form.submit(status=303)
    with db.connection_context():
        assert retention.settings_of(Clinic.by_slug("clinic-a")) == {
            "resolvedCallRequestsDays": 60,
            "callsWithoutRequestDays": 14,
            "auditDetailsDays": 365,
            "signedDocumentsDays": None,
            "resolvedApiRequestsDays": None,
            "readTrailDays": None,
        }
        event = AuditEvent.get(AuditEvent.action == "settings.retention.update")
        assert event.actor_name == "anna@example.cz" and json.loads(event.details)["callsWithoutRequestDays"] == 14
    page = app.get("/console/settings/retention?clinic=clinic-a")
    assert "nic se podle stáří nemaže" not in page.text
    form = page.forms[next(k for k, f in page.forms.items() if "resolvedCallRequestsDays" in f.fields)]
    form["callsWithoutRequestDays"] = "0"
    refused = form.submit(status=400)
    assert "callsWithoutRequestDays" in refused.text
    audit = app.get("/console/audit?clinic=clinic-a").text
    assert "Změna doby uchovávání údajů" in audit
    log_in(app, "bob@example.cz")
    app.get("/console/settings/retention?clinic=clinic-a", status=403)


def test_manage_py_retention_shows_sets_and_runs(app, token):
    env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "STORAGE_DIR": str(STORAGE_DIR),
    }

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )

    shown = manage("retention", "show", "--clinic", "clinic-a")
    assert shown.returncode == 0 and "resolvedCallRequestsDays 90 days" in shown.stdout
    assert "signedDocumentsDays kept" in shown.stdout
    changed = manage(
        "retention", "set", "--clinic", "clinic-a", "--calls-without-request-days", "7", "--audit-details-days", "keep"
    )
    assert changed.returncode == 0, changed.stderr
    assert "callsWithoutRequestDays 7 days" in changed.stdout and "auditDetailsDays kept" in changed.stdout
    assert manage("retention", "set", "--clinic", "clinic-a", "--audit-details-days", "soon").returncode == 2
    assert manage("retention", "set", "--clinic", "nowhere", "--audit-details-days", "5").returncode == 2
    ran = manage("retention", "run")
    assert ran.returncode == 0 and "retention deleted:" in ran.stderr


def test_an_upgraded_database_leaves_its_clinics_without_retention(config):
    """A database from before the retention settings (migration 21) gets them empty on its
    existing clinics: an upgrade deletes nothing until an administrator decides."""
    from migrations import MIGRATIONS, migrate
    from models import SchemaMigration
    from plumbing.database import bind_database
    from tests.support.databases import recreate_database

    url = PG_URL + "_upgrade_v21"
    recreate_database(url)
    database = bind_database(url, pool_size=1)
    try:
        with database.connection_context():
            migrate(database)
            load(organization(clinic("clinic-a")))
            for column in (
                "retention_call_requests_days",
                "retention_calls_days",
                "retention_audit_details_days",
                "retention_documents_days",
                "retention_api_requests_days",
                "retention_reads_days",
            ):
                database.execute_sql(f'ALTER TABLE "clinic" DROP COLUMN "{column}"')
            database.execute_sql('ALTER TABLE "audit_event" DROP COLUMN "redacted_at"')
            database.execute_sql('DROP TABLE "pending_object_deletion"')
            SchemaMigration.delete().where(SchemaMigration.version >= 22).execute()
            assert migrate(database) == [f"{v:04d}_{n}" for v, n, _ in MIGRATIONS if v >= 22]
            assert set(retention.settings_of(Clinic.by_slug("clinic-a")).values()) == {None}
            assert PendingObjectDeletion.select().count() == 0
    finally:
        database.close_all()
        bind_database(config.database_url, pool_size=config.db_pool_size)
