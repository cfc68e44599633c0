"""What every model shares: the database proxy they bind to, and the storage conventions.

Times are stored as naive UTC (`plumbing.clock.as_utc`); office hours and vacations are
evaluated in the clinic's IANA timezone by `switchboard.office_hours`. Phones are stored in
E.164 (`plumbing.phones`).
"""

from __future__ import annotations

import uuid
from typing import Any

import peewee as pw

from plumbing.database import db


def as_uuid(value: Any) -> uuid.UUID:
    """A UUID column's raw value (a string on SQLite, a UUID on PostgreSQL) as a UUID."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


class BaseModel(pw.Model):
    class Meta:
        database = db
        legacy_table_names = False


#: What every change of a row marks on PostgreSQL (migration 52's trigger): `updated_at`
#: (the writer's, else the database's time) and `change_position` emptied, to be given by
#: `place_changes`. The searches' `updatedSince` pages by `change_position`.
def place_changes(
    model: type[BaseModel], lock: int, limit: int = 1000, *, column: str = "change_position", order: str = "updated_at"
) -> int:
    """Give the rows changed since their last place (`change_position` empty) a place
    after every place given, oldest change first; how many. One placer at a time per table
    (a transaction-scoped advisory lock: another caller meanwhile places nothing), so the
    places become visible in increasing order and a reader paging by them passes over no
    change committed late: it gets a place after the reader's."""
    from plumbing.database import is_postgresql

    table = model._meta.table_name
    key = model._meta.primary_key.column_name  # type: ignore[union-attr]
    with db.atomic():
        # Advisory locks are the cluster's: the second key is this database's, so a placer of
        # another database on the same server never holds this one's back.
        if (
            is_postgresql()
            and not db.execute_sql(
                "SELECT pg_try_advisory_xact_lock(%s, "
                "(SELECT oid::int FROM pg_database WHERE datname = current_database()))",
                (lock,),
            ).fetchone()[0]
        ):
            return 0
        # A sequence, not the table's highest place: that one goes down when the row that
        # holds it changes, and a place given again would fall behind a reader's cursor.
        given = "nextval('change_position_seq')" if is_postgresql() else "base.m + waiting.n"
        cursor = db.execute_sql(
            f'WITH waiting AS (SELECT "{key}" AS k, row_number() OVER (ORDER BY "{order}", "{key}") AS n '
            f'FROM "{table}" WHERE "{column}" IS NULL ORDER BY "{order}", "{key}" LIMIT {int(limit)}), '
            f'base AS (SELECT COALESCE(MAX("{column}"), 0) AS m FROM "{table}") '
            f'UPDATE "{table}" SET "{column}" = {given} FROM waiting, base '
            f'WHERE "{table}"."{key}" = waiting.k'
        )
        return int(cursor.rowcount or 0)
