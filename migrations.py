"""Versioned schema migrations for PostgreSQL and SQLite.

Each migration is a numbered function that is itself idempotent ("create table if
missing", "add column if missing"), so a fresh database and an old one converge on
the same schema. Applied versions are recorded in `schema_migration`; `migrate()`
runs only the pending ones, each in its own transaction, and on PostgreSQL under an
advisory lock so two release steps cannot race.
"""
from __future__ import annotations

from typing import Callable

import peewee as pw
from playhouse.migrate import PostgresqlMigrator, SchemaMigrator, SqliteMigrator

import models as m

Migration = Callable[[pw.Database, SchemaMigrator], None]
_ADVISORY_LOCK_KEY = 7_341_002  # arbitrary, constant for this application


def _create(*tables: type[pw.Model]) -> Migration:
    def run(database: pw.Database, migrator: SchemaMigrator) -> None:
        database.create_tables(list(tables), safe=True)

    return run


MIGRATIONS: list[tuple[int, str, Migration]] = [
    (1, "foundation", _create(*m.MODELS)),
]


def _migrator(database: pw.Database) -> SchemaMigrator:
    if isinstance(database, pw.PostgresqlDatabase):
        return PostgresqlMigrator(database)
    return SqliteMigrator(database)


def applied_versions(database: pw.Database) -> set[int]:
    if not database.table_exists(m.SchemaMigration._meta.table_name):
        return set()
    return {row.version for row in m.SchemaMigration.select(m.SchemaMigration.version)}


def migrate(database: pw.Database | None = None) -> list[str]:
    """Apply pending migrations; returns the names applied (empty when up to date)."""
    database = database or m.db.obj
    applied: list[str] = []
    with database.connection_context():
        database.create_tables([m.SchemaMigration], safe=True)
        migrator = _migrator(database)
        for version, name, run in MIGRATIONS:
            with database.atomic():
                if isinstance(database, pw.PostgresqlDatabase):
                    database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))
                if m.SchemaMigration.get_or_none(m.SchemaMigration.version == version):
                    continue
                run(database, migrator)
                m.SchemaMigration.create(version=version, name=name)
                applied.append(f"{version:04d}_{name}")
    return applied
