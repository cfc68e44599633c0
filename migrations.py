"""Versioned schema migrations for PostgreSQL and SQLite.

Each migration is a numbered step that is itself idempotent ("create table if missing",
"add column if missing"), so a fresh database and an old one converge on the same schema.
Applied steps are recorded by name in `schema_migration`; `migrate()` runs only the pending
ones, each in its own transaction, and on PostgreSQL under an advisory lock so two release
steps cannot race.

Every migration carries the schema it needs and never reads the live models: what a step
creates is frozen SQL (`frozen_schema/<number>_<name>.<database>.sql`: tables and indexes,
and on PostgreSQL the functions and triggers), a column it adds is defined where it adds
it, and a foreign key names a frozen copy of the table it points at. So an old migration
means today what it meant when it was written, and a model changed without a migration is
a drift that tests/test_schema_drift.py finds (a database built by every step in order is
the one each earlier release, upgraded, has).

The steps, by number (a new one gets the next number after the last):

| # | name | what it did |
|---|---|---|
| 1 | foundation | organizations, clinics, office hours, calendars, vacations, patients, API keys |
| 2 | calls | the handed-off calls, and a request's call |
| 3 | documents | request types, tags, requests, reservations, upload links, attachments |
| 4 | recordings | a call's recording link, its expiry, and why it is gone |
| 5 | call_relay | calls claimed for the queue; the NOTIFY of a new call (the relay's wake-up) |
| 6 | auth_cache | NOTIFY of token and clinic changes (the web's row cache) |
| 7 | voicemail_detail | a clinic's caller languages; a call's callback number and transcript status; search by kind |
| 8 | schedule_cache | NOTIFY of office hours, calendars and vacations (the routing checks' cache) |
| 9 | sealed_attachments | an attachment's sealed copy and its SHA-256 |
| 10 | cache_generation | the change counter the caches poll behind a pooler that drops NOTIFY |
| 11 | audit_trail | the append-only audit trail (a trigger refuses UPDATE and DELETE) |
| 12 | upload_link_created_at_index | open upload links counted and purged by issue time |
| 13 | platform_names | `pbx_*` columns renamed `platform_*` (the switchboard platform's API) |
| 14 | staff_console | staff users, their clinics, their server-side sessions |
| 15 | platform_source_markers | a clinic's own marker words for its platform |
| 16 | api_key_rules | who issued a key, the key a rotation replaced; the audit trail's client address |
| 17 | heard_callback_number | a callback number not confirmed as heard, kept apart, and where it was said |
| 18 | handoff_anomalies | what was odd about a hand-off; the recording bound to its bytes; refused hand-offs |
| 20 | staff_accounts | set-password links, two-factor login, recovery codes, half-done logins |
| 21 | idempotency_keys | the stored answers of writes sent with an Idempotency-Key |
| 22 | data_lifecycle | each clinic's retention, objects waiting to be deleted, an old event's address removable |
| 50 | triage | a voice message's suggested type and urgency on its request, a clinic's words |
| 51 | notices | the outbox the workers deliver (e-mail first), who is told of urgent messages, refused keys |
| 52 | webhooks | the event log, webhook endpoints, a request's and a patient's last change and its place |
| 53 | read_trail | the append-only read trail (no UPDATE), its period per clinic, corrected transcripts |
| 54 | open_requests_cache | NOTIFY and a change counter of their own for the open requests by caller |

The gaps: 19 was never used. 23 to 49 were never used either: the API keys' rules were first
numbered 50, clear of the numbers the branches beside them were taking, and were renumbered 16
before the steps between were written; triage then took 50. A number is only a place in the
order: the log is matched by name (`_renumber_log`), so a database that logged a step under an
older number runs it neither twice nor never.
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
# The NOTIFY channels the frozen triggers announce on (migrations 5, 6, 8, 10 and 54): the row
# cache and the call relay listen under the same names (tests/test_schema_drift.py).
CHANNELS = ("auth_changed", "call_pending", "requests_changed")


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


def _frozen(name: str) -> Migration:
    """The statements of `frozen_schema/<name>.<database>.sql`, each idempotent: tables and
    indexes created if missing; on PostgreSQL also functions and triggers, replaced. One
    statement per line or more, each ending with ";" at a line's end."""

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
    """Rename a column the table still has under its old name (a table migration 1's frozen
    SQL creates has the new one already: it was frozen after the rename). Both databases
    rename in place."""

    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        names = {c.name for c in database.get_columns(table)}
        if old in names and new not in names:
            apply_operations(migrator.rename_column(table, old, new))

    return run


def _steps(*steps: Migration) -> Migration:
    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        for step in steps:
            step(database, migrator)

    return run


# Append only: a new step gets the next number and its frozen SQL; a step already released
# is never changed. The table at the top of this module says what each one did.
MIGRATIONS: list[tuple[int, str, Migration]] = [
    (1, "foundation", _frozen("0001_foundation")),
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
        _steps(_add_column("call", "queued_at", pw.DateTimeField(null=True)), _frozen("0005_call_relay")),
    ),
    (6, "auth_cache", _frozen("0006_auth_cache")),
    (
        7,
        "voicemail_detail",
        _steps(
            _add_column("clinic", "languages", pw.TextField(null=True)),
            _add_column("call", "callback_number", pw.CharField(max_length=20, null=True)),
            _add_column("call", "transcript_status", pw.CharField(max_length=12, null=True)),
            _add_column("call", "transcript_issue", pw.CharField(max_length=40, null=True)),
            _frozen("0007_voicemail_detail"),
        ),
    ),
    (8, "schedule_cache", _frozen("0008_schedule_cache")),
    (
        9,
        "sealed_attachments",
        _steps(
            _add_column("medical_record", "object_key", pw.CharField(max_length=512, null=True)),
            _add_column("medical_record", "sha256", pw.CharField(max_length=64, null=True)),
        ),
    ),
    (10, "cache_generation", _frozen("0010_cache_generation")),
    (11, "audit_trail", _frozen("0011_audit_trail")),
    (12, "upload_link_created_at_index", _frozen("0012_upload_link_created_at_index")),
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
    (14, "staff_console", _frozen("0014_staff_console")),
    (
        15,
        "platform_source_markers",
        _steps(
            _add_column("clinic", "platform_source_markers", pw.TextField(null=True)),
        ),
    ),
    (
        16,
        "api_key_rules",
        _steps(
            _add_column("api_token", "created_by", pw.CharField(max_length=220, null=True)),
            _add_column("api_token", "rotated_from", pw.UUIDField(null=True)),
            _add_column("audit_event", "address", pw.CharField(max_length=64, null=True)),
        ),
    ),
    (
        17,
        "heard_callback_number",
        _steps(
            _add_column("call", "heard_number", pw.CharField(max_length=20, null=True)),
            _add_column("call", "callback_number_at", pw.FloatField(null=True)),
        ),
    ),
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
    (21, "idempotency_keys", _frozen("0021_idempotency_keys")),
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
            _frozen("0022_data_lifecycle"),
        ),
    ),
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
    (
        52,
        "webhooks",
        _steps(
            _frozen("0052_webhooks"),
            _add_column("patient_request", "updated_at", pw.DateTimeField(null=True)),
            _add_column("patient_request", "change_position", pw.BigIntegerField(null=True, unique=True)),
            _add_column("patient", "updated_at", pw.DateTimeField(null=True)),
            _add_column("patient", "change_position", pw.BigIntegerField(null=True, unique=True)),
            _frozen("0052_change_positions"),
        ),
    ),
    (
        53,
        "read_trail",
        _steps(
            _frozen("0053_read_trail"),
            _add_column("clinic", "retention_reads_days", pw.IntegerField(null=True)),
            _add_column("clinic", "retention_api_requests_days", pw.IntegerField(null=True)),
            _add_column("call", "corrected_transcript", pw.TextField(null=True)),
            _add_column("call", "corrected_at", pw.DateTimeField(null=True)),
            _add_column("call", "corrected_by", pw.CharField(max_length=254, null=True)),
        ),
    ),
    (54, "open_requests_cache", _frozen("0054_open_requests_cache")),
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
