"""PostgreSQL databases the tests and benchmarks own."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlparse

import psycopg2


def recreate_database(url: str) -> None:
    """Drop the database `url` names (its sessions ended: WITH (FORCE)) and create it
    empty, through the server's `postgres` database, as the URL's user (default
    `postgres`) with its password, if any, and the URL's connection parameters (sslmode...)."""
    parts = urlparse(url)
    name = parts.path.lstrip("/")
    admin = psycopg2.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password,
        dbname="postgres",
        **dict(parse_qsl(parts.query)),
    )
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    admin.close()


class TableEmptier:
    """Empty every table of `models` between tests, as `TRUNCATE ... RESTART IDENTITY
    CASCADE` of them all would, in a few milliseconds instead of 200 (a TRUNCATE replaces
    each table's files; most tests write to a handful of tables).

    One query finds the tables holding rows; those are emptied by DELETE, children first,
    so that the triggers fire as for any change (the row caches' NOTIFY); the audit trail,
    whose trigger refuses DELETE, by TRUNCATE. Then every identity starts again at 1."""

    def __init__(self, database, models: list) -> None:
        import peewee as pw

        self.database = database
        ordered = list(reversed(pw.sort_models(models)))  # children before their parents
        self.tables = [m._meta.table_name for m in ordered]
        self.exists = "SELECT " + ", ".join(f'EXISTS (SELECT 1 FROM "{t}")' for t in self.tables)
        self._sequences: list[str] | None = None

    def sequences(self) -> list[str]:
        if self._sequences is None:
            cursor = self.database.execute_sql(
                "SELECT pg_get_serial_sequence(quote_ident(t), 'id') FROM unnest(%s::text[]) AS t", (self.tables,)
            )
            self._sequences = [row[0] for row in cursor.fetchall() if row[0]]
        return self._sequences

    def empty(self) -> None:
        flags = self.database.execute_sql(self.exists).fetchone()
        dirty = [table for table, held in zip(self.tables, flags) if held]
        statements = [f'TRUNCATE "{t}" RESTART IDENTITY' if t == "audit_event" else f'DELETE FROM "{t}"' for t in dirty]
        statements += [f"SELECT setval('{sequence}', 1, false)" for sequence in self.sequences()]
        with self.database.atomic():
            for statement in statements:
                self.database.execute_sql(statement)


def schema_of(database, tables: tuple[str, ...]) -> dict[str, object]:
    """Columns (name, type, nullable) and indexes (name, columns, unique) of `tables`."""
    return {
        table: (
            sorted((c.name, c.data_type, c.null) for c in database.get_columns(table)),
            sorted((i.name, tuple(i.columns), i.unique) for i in database.get_indexes(table)),
        )
        for table in tables
    }
