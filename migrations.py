"""Versioned schema migrations for PostgreSQL and SQLite.

Each migration is a numbered function that is itself idempotent ("create table if
missing", "add column if missing"), so a fresh database and an old one converge on
the same schema. Applied versions are recorded in `schema_migration`; `migrate()`
runs only the pending ones, each in its own transaction, and on PostgreSQL under an
advisory lock so two release steps cannot race.

Every migration carries the schema it needs and never reads the live models: the tables
a migration creates are frozen SQL (`frozen_schema/`, one file per migration and database),
a column it adds is defined where it adds it, and a foreign key names a frozen copy of the
table it points at. So an old migration means today what it meant when it was written, and
a model changed without a migration is a drift that tests/test_schema_drift.py finds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import peewee as pw
from playhouse.migrate import PostgresqlMigrator, SchemaMigrator, SqliteMigrator
from playhouse.migrate import migrate as apply_operations

from models import SchemaMigration
from plumbing.database import db, is_postgresql

Migration = Callable[[pw.Database, SchemaMigrator], None]
_ADVISORY_LOCK_KEY = 7_341_002  # arbitrary, constant for this application
FROZEN = Path(__file__).resolve().parent / "frozen_schema"
# The NOTIFY channels the triggers announce on (plumbing/row_cache.py, jobs/relay.py read
# them under the same names).
_CACHE_CHANNEL = "auth_changed"
_NEW_CALL_CHANNEL = "call_pending"


class _FrozenRequestType(pw.Model):
    """The `request_type` table as migration 50's foreign key saw it: its key only."""

    id = pw.UUIDField(primary_key=True)

    class Meta:
        table_name = "request_type"


class _FrozenCall(pw.Model):
    """The `call` table as migration 2's foreign key saw it: its key only."""

    id = pw.UUIDField(primary_key=True)

    class Meta:
        table_name = "call"


def _sql(*statements: str) -> Migration:
    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        for statement in statements:
            database.execute_sql(statement)

    return run


def _postgresql(*statements: str) -> Migration:
    """Statements only PostgreSQL has (triggers with NOTIFY); SQLite skips them."""

    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        if is_postgresql(database):
            _sql(*statements)(database, migrator)

    return run


def _frozen(name: str) -> Migration:
    """The tables of `frozen_schema/<name>.<database>.sql`, each created if missing."""

    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        dialect = "postgresql" if is_postgresql(database) else "sqlite"
        text = (FROZEN / f"{name}.{dialect}.sql").read_text("utf-8")
        for statement in text.split(";\n"):
            lines = [line for line in statement.splitlines() if line and not line.startswith("--")]
            if lines:
                database.execute_sql("\n".join(lines))

    return run


def _add_column(table: str, column: str, field: pw.Field) -> Migration:
    """Add a column unless the table already has it; peewee adds the index that the
    field's `index` / `unique` asks for."""

    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        if column not in {c.name for c in database.get_columns(table)}:
            apply_operations(migrator.add_column(table, column, field))

    return run


def _rename_column(table: str, old: str, new: str) -> Migration:
    """Rename a column the table still has under its old name (a table created from the
    current models has the new one already). Both databases rename in place."""

    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        names = {c.name for c in database.get_columns(table)}
        if old in names and new not in names:
            apply_operations(migrator.rename_column(table, old, new))

    return run


def _per_database(postgresql: Migration, sqlite: Migration) -> Migration:
    """One step written for each database (a table whose DDL differs between them)."""

    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        (postgresql if is_postgresql(database) else sqlite)(database, migrator)

    return run


def _steps(*steps: Migration) -> Migration:
    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        for step in steps:
            step(database, migrator)

    return run


# Append only. A migration may run on a database created by any earlier version, or on a
# fresh one where earlier migrations created tables from the current models.
MIGRATIONS: list[tuple[int, str, Migration]] = [
    (
        1,
        "foundation",
        _frozen("0001_foundation"),
    ),
    (
        2,
        "calls",
        _steps(
            _frozen("0002_calls"),
            _add_column(
                "patient_request",
                "call_id",
                pw.ForeignKeyField(_FrozenCall, null=True, unique=True, field=_FrozenCall.id, on_delete="SET NULL"),
            ),
        ),
    ),
    (3, "documents", _frozen("0003_documents")),
    (
        4,
        "recordings",
        _steps(
            _add_column("call", "recording_link", pw.TextField(null=True)),
            _add_column("call", "recording_link_expires_at", pw.DateTimeField(null=True)),
            _add_column("call", "recording_gone_reason", pw.CharField(max_length=30, null=True)),
            _add_column("call", "recording_checked_at", pw.DateTimeField(null=True)),
        ),
    ),
    (
        5,
        "call_relay",
        _steps(
            _add_column("call", "queued_at", pw.DateTimeField(null=True)),
            _sql(
                'CREATE INDEX IF NOT EXISTS "call_unqueued" ON "call" ("received_at") '
                'WHERE "state" = \'pending\' AND "queued_at" IS NULL'
            ),
            _postgresql(
                "CREATE OR REPLACE FUNCTION call_notify_new() RETURNS trigger LANGUAGE plpgsql AS $$ "
                f"BEGIN PERFORM pg_notify('{_NEW_CALL_CHANNEL}', ''); RETURN NULL; END $$",
                'DROP TRIGGER IF EXISTS "call_notify_new" ON "call"',
                'CREATE TRIGGER "call_notify_new" AFTER INSERT ON "call" FOR EACH ROW EXECUTE FUNCTION call_notify_new()',  # noqa: E501
            ),
        ),
    ),
    # The web processes cache token rows (row_cache.py); these NOTIFY them of changes.
    # Statement-level: one notification per change, however many rows it touched. And the
    # call trigger becomes statement-level too: a group commit's INSERT wakes the relay once.
    (
        6,
        "auth_cache",
        _postgresql(
            "CREATE OR REPLACE FUNCTION auth_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN PERFORM pg_notify('{_CACHE_CHANNEL}', ''); RETURN NULL; END $$",
            *(
                statement
                for table, events in (
                    ("api_token", "UPDATE OF secret_hash, scopes, expires_at, revoked_at OR DELETE OR TRUNCATE"),
                    ("api_token_clinic", "INSERT OR UPDATE OR DELETE OR TRUNCATE"),
                    ("clinic", "INSERT OR UPDATE OR DELETE OR TRUNCATE"),
                )
                for statement in (
                    f'DROP TRIGGER IF EXISTS "auth_changed" ON "{table}"',
                    f'CREATE TRIGGER "auth_changed" AFTER {events} ON "{table}" '
                    "FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed()",
                )
            ),
            'DROP TRIGGER IF EXISTS "call_notify_new" ON "call"',
            'CREATE TRIGGER "call_notify_new" AFTER INSERT ON "call" FOR EACH STATEMENT EXECUTE FUNCTION call_notify_new()',  # noqa: E501
        ),
    ),
    # What the request detail shows about a voicemail, the clinic's caller languages, and
    # the search by request kind. The index is named as Peewee names the model's, so a
    # fresh database (tables made from the current models) gets no second copy.
    (
        7,
        "voicemail_detail",
        _steps(
            _add_column("clinic", "languages", pw.TextField(null=True)),
            _add_column("call", "callback_number", pw.CharField(max_length=20, null=True)),
            _add_column("call", "transcript_status", pw.CharField(max_length=12, null=True)),
            _add_column("call", "transcript_issue", pw.CharField(max_length=40, null=True)),
            _sql(
                'CREATE INDEX IF NOT EXISTS "patient_request_clinic_id_kind_created_at" '
                'ON "patient_request" ("clinic_id", "kind", "created_at")'
            ),
        ),
    ),
    # The web processes also cache each clinic's routing schedule (schedules.py): its
    # office hours, calendars and vacations announce their changes like tokens do.
    (
        8,
        "schedule_cache",
        _postgresql(
            *(
                statement
                for table in ("office_hours", "calendar", "vacation")
                for statement in (
                    f'DROP TRIGGER IF EXISTS "auth_changed" ON "{table}"',
                    f'CREATE TRIGGER "auth_changed" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "{table}" '
                    "FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed()",
                )
            )
        ),
    ),
    # Registered attachments are evidence: an immutable copy and the SHA-256 of its bytes.
    (
        9,
        "sealed_attachments",
        _steps(
            _add_column("medical_record", "object_key", pw.CharField(max_length=512, null=True)),
            _add_column("medical_record", "sha256", pw.CharField(max_length=64, null=True)),
        ),
    ),
    # Behind a pooler in transaction mode NOTIFY never arrives: the same triggers count
    # every change, and the caches poll the count (plumbing/row_cache.py). The
    # organization announces its changes too (patient sharing rides the cached clinic).
    (
        10,
        "cache_generation",
        _postgresql(
            'CREATE TABLE IF NOT EXISTS "cache_generation" ("id" smallint PRIMARY KEY, "n" bigint NOT NULL)',
            'INSERT INTO "cache_generation" ("id", "n") VALUES (1, 0) ON CONFLICT DO NOTHING',
            "CREATE OR REPLACE FUNCTION auth_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            'UPDATE "cache_generation" SET "n" = "n" + 1 WHERE "id" = 1; '
            f"PERFORM pg_notify('{_CACHE_CHANNEL}', ''); RETURN NULL; END $$",
            'DROP TRIGGER IF EXISTS "auth_changed" ON "organization"',
            'CREATE TRIGGER "auth_changed" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "organization" '
            "FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed()",
        ),
    ),
    # Who made every write. The trail is append-only for every client, not only
    # for this code: a statement-level trigger refuses any UPDATE or DELETE (even of no
    # rows). TRUNCATE is not refused: the tests empty every table between cases.
    (
        11,
        "audit_trail",
        _steps(
            _frozen("0011_audit_trail"),
            _postgresql(
                "CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                # No % placeholder: the statement runs through a driver that formats parameters.
                "RAISE EXCEPTION USING MESSAGE = 'audit_event is append-only: ' || TG_OP || ' refused', "
                "ERRCODE = 'insufficient_privilege'; "
                "END $$",
                'DROP TRIGGER IF EXISTS "append_only" ON "audit_event"',
                'CREATE TRIGGER "append_only" BEFORE UPDATE OR DELETE ON "audit_event" '
                "FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only()",
            ),
        ),
    ),
    # Storage limits: the open upload links of a clinic are counted, and expired unregistered
    # uploads purged, by issue time. Named as Peewee names the model's index (no second copy).
    (
        12,
        "upload_link_created_at_index",
        _sql(
            'CREATE INDEX IF NOT EXISTS "upload_link_created_at" ON "upload_link" ("created_at")',
        ),
    ),
    # One name for the switchboard vendor's API that re-fetches recordings: the platform.
    (
        13,
        "platform_names",
        _steps(
            *(
                _rename_column("clinic", f"pbx_{name}", f"platform_{name}")
                for name in ("api_url", "username", "password_encrypted")
            )
        ),
    ),
    # The staff console's users, their clinics and their server-side sessions.
    (14, "staff_console", _frozen("0014_staff_console")),
    # A clinic's own marker words for its platform (were one setting for every clinic).
    (
        15,
        "platform_source_markers",
        _steps(
            _add_column("clinic", "platform_source_markers", pw.TextField(null=True)),
        ),
    ),
    # Who issued each API key and which key a rotation replaced; and the audit
    # trail's "from where" (the client's address).
    (
        16,
        "api_key_rules",
        _steps(
            _add_column("api_token", "created_by", pw.CharField(max_length=220, null=True)),
            _add_column("api_token", "rotated_from", pw.UUIDField(null=True)),
            _add_column("audit_event", "address", pw.CharField(max_length=64, null=True)),
        ),
    ),
    # A callback number whose digits were not confirmed as heard is kept apart
    # from callback_number, and where in the recording the number was said.
    (
        17,
        "heard_callback_number",
        _steps(
            _add_column("call", "heard_number", pw.CharField(max_length=20, null=True)),
            _add_column("call", "callback_number_at", pw.FloatField(null=True)),
        ),
    ),
    # What was odd about a hand-off, kept on the call instead of refused; the recording bound
    # to the bytes the hand-off delivered; and the hand-offs refused all the same.
    (
        18,
        "handoff_anomalies",
        _steps(
            _add_column("call", "anomalies", pw.TextField(null=True)),
            _add_column("call", "recording_sha256", pw.CharField(max_length=64, null=True)),
            _add_column("call", "recording_bytes", pw.BigIntegerField(null=True)),
            _frozen("0018_handoff_anomalies"),
        ),
    ),
    # The clinic runs its own staff: set-password links, two-factor login (TOTP secret,
    # recovery codes, the clinic's requirement), half-done logins, the last login.
    (
        20,
        "staff_accounts",
        _steps(
            _add_column("clinic", "two_factor_required", pw.BooleanField(default=False)),
            _add_column("staff_user", "last_login_at", pw.DateTimeField(null=True)),
            _add_column("staff_user", "totp_secret_encrypted", pw.TextField(null=True)),
            _add_column("staff_user", "totp_enabled_at", pw.DateTimeField(null=True)),
            _add_column("staff_user", "totp_last_step", pw.BigIntegerField(null=True)),
            _add_column("staff_session", "pending", pw.CharField(max_length=8, null=True)),
            _frozen("0020_staff_accounts"),
        ),
    ),
    # Safe retries: the answer of a document write sent with an Idempotency-Key.
    (21, "idempotency_keys", _frozen("0021_idempotency_keys")),
    # Personal data has a lifecycle (docs/data-protection.md): each clinic's retention
    # (None on the clinics that exist: nothing of theirs is deleted until they choose), the
    # objects waiting to be deleted, what the retention's queries walk, and the one change
    # the audit trail allows: an old event's client address removed.
    (
        22,
        "data_lifecycle",
        _steps(
            *(
                _add_column("clinic", column, pw.IntegerField(null=True))
                for column in (
                    "retention_call_requests_days",
                    "retention_calls_days",
                    "retention_audit_details_days",
                    "retention_documents_days",
                )
            ),
            _add_column("audit_event", "redacted_at", pw.DateTimeField(null=True)),
            _per_database(
                _sql(
                    'CREATE TABLE IF NOT EXISTS "pending_object_deletion" ("id" BIGSERIAL NOT NULL PRIMARY KEY, '
                    '"key" VARCHAR(512) NOT NULL, "created_at" TIMESTAMP NOT NULL)'
                ),
                _sql(
                    'CREATE TABLE IF NOT EXISTS "pending_object_deletion" ("id" INTEGER NOT NULL PRIMARY KEY, '
                    '"key" VARCHAR(512) NOT NULL, "created_at" DATETIME NOT NULL)'
                ),
            ),
            _sql(
                'CREATE INDEX IF NOT EXISTS "patient_request_resolved_from_call" ON "patient_request" '
                '("clinic_id", "done_at") WHERE "call_id" IS NOT NULL AND "done_at" IS NOT NULL',
                'CREATE INDEX IF NOT EXISTS "call_clinic_id_received_at" ON "call" ("clinic_id", "received_at")',
                'CREATE INDEX IF NOT EXISTS "audit_event_with_address" ON "audit_event" ("clinic_id", "at") '
                'WHERE "address" IS NOT NULL',
            ),
            _postgresql(
                'DROP TRIGGER IF EXISTS "append_only" ON "audit_event"',
                'CREATE TRIGGER "append_only" BEFORE DELETE ON "audit_event" '
                "FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only()",
                "CREATE OR REPLACE FUNCTION audit_event_redact_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF OLD.address IS NOT NULL AND NEW.address IS NULL AND NEW.redacted_at IS NOT NULL AND "
                "ROW(NEW.id, NEW.at, NEW.actor_kind, NEW.token_id, NEW.actor_name, NEW.clinic_id, NEW.action, "
                "NEW.target_type, NEW.target_id, NEW.details, NEW.request_id) IS NOT DISTINCT FROM "
                "ROW(OLD.id, OLD.at, OLD.actor_kind, OLD.token_id, OLD.actor_name, OLD.clinic_id, OLD.action, "
                "OLD.target_type, OLD.target_id, OLD.details, OLD.request_id) THEN RETURN NEW; END IF; "
                "RAISE EXCEPTION USING MESSAGE = 'audit_event is append-only: ' || TG_OP || ' refused "
                "(only an old event''s client address may be removed)', ERRCODE = 'insufficient_privilege'; "
                "END $$",
                'DROP TRIGGER IF EXISTS "redact_only" ON "audit_event"',
                'CREATE TRIGGER "redact_only" BEFORE UPDATE ON "audit_event" '
                "FOR EACH ROW EXECUTE FUNCTION audit_event_redact_only()",
            ),
        ),
    ),
    # The inbox sorts itself: what a voice message's transcript suggests (a request type,
    # urgency) on its request, staff confirming or clearing it, and the words a clinic reads
    # transcripts for. Old requests and clinics read as "never read" and "the shipped words".
    (
        50,
        "triage",
        _steps(
            _add_column(
                "patient_request",
                "suggested_type_id",
                pw.ForeignKeyField(_FrozenRequestType, null=True, field=_FrozenRequestType.id, on_delete="SET NULL"),
            ),
            _add_column("patient_request", "suggested_type_spans", pw.TextField(null=True)),
            _add_column("patient_request", "type_confirmed_at", pw.DateTimeField(null=True)),
            _add_column("patient_request", "urgent", pw.BooleanField(default=False)),
            _add_column("patient_request", "urgent_spans", pw.TextField(null=True)),
            _add_column("patient_request", "urgent_cleared_at", pw.DateTimeField(null=True)),
            _add_column("clinic", "urgency_words", pw.TextField(null=True)),
            _add_column("request_type", "transcript_words", pw.TextField(null=True)),
        ),
    ),
    # Nothing that matters waits for someone to look: the outbox the workers deliver (e-mail
    # first), who a clinic tells of a message that may be urgent and when, the staff who
    # asked to be told, the last expiry notice of a key, and why a known key was refused.
    # A clinic tells its opted-in staff outside office hours, as a new one does; nobody has
    # opted in yet, so nothing is sent until someone asks for it.
    (
        51,
        "notices",
        _steps(
            _frozen("0051_notices"),
            _add_column("clinic", "urgent_notice_staff", pw.BooleanField(default=True)),
            _add_column("clinic", "urgent_notice_email", pw.CharField(max_length=254, null=True)),
            _add_column("clinic", "urgent_notice_when", pw.CharField(max_length=8, default="closed")),
            _add_column("staff_membership", "urgent_notices", pw.BooleanField(default=False)),
            _add_column("api_token", "expiry_notice_days", pw.SmallIntegerField(null=True)),
            _add_column("refused_handoff", "reason", pw.CharField(max_length=20, null=True)),
        ),
    ),
]


def _migrator(database: pw.Database) -> SchemaMigrator:
    if is_postgresql(database):
        return PostgresqlMigrator(database)
    return SqliteMigrator(database)


def _renumber_log(database: pw.Database) -> None:
    """Put each logged migration under its version today. Early on, branches written side
    by side took the same numbers, and the merge renumbered some (`platform_names` was 10
    and became 13, `upload_link_created_at_index` 11 and became 12): a database from then
    logs a migration under a number another one has now. Matched by name, so that the one
    applied is not run again and the one under its old number is not skipped."""
    today = {name: version for version, name, _ in MIGRATIONS}
    logged = {row.version: row.name for row in SchemaMigration.select()}
    moved = {version: today[name] for version, name in logged.items() if name in today and today[name] != version}
    if not moved:
        return
    with database.atomic():
        for version in moved:  # out of the way first: two may swap numbers
            SchemaMigration.update(version=-version).where(SchemaMigration.version == version).execute()
        for version, now in moved.items():
            SchemaMigration.update(version=now).where(SchemaMigration.version == -version).execute()


def pending(database: pw.Database | None = None) -> list[str]:
    """The migrations this release has that `database` lacks ("0021_idempotency_keys", ...):
    empty when its schema is current. Raises the database's errors (unreachable: peewee's
    OperationalError)."""
    database = database or db.obj
    with database.connection_context():
        if not database.table_exists(SchemaMigration._meta.table_name):
            applied: set[str] = set()
        else:  # by name, as `_renumber_log` matches them: a logged number may be an old one
            applied = {row.name for row in SchemaMigration.select(SchemaMigration.name)}
    return [f"{version:04d}_{name}" for version, name, _ in MIGRATIONS if name not in applied]


def migrate(database: pw.Database | None = None) -> list[str]:
    """Apply pending migrations; returns the names applied (empty when up to date)."""
    database = database or db.obj
    applied: list[str] = []
    with database.connection_context():
        database.create_tables([SchemaMigration], safe=True)
        migrator = _migrator(database)
        with database.atomic():
            if is_postgresql(database):
                database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))
            _renumber_log(database)
        for version, name, run in MIGRATIONS:
            with database.atomic():
                if is_postgresql(database):
                    database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))
                if SchemaMigration.get_or_none(SchemaMigration.version == version):
                    continue
                run(database, migrator)
                SchemaMigration.create(version=version, name=name)
                applied.append(f"{version:04d}_{name}")
    return applied
