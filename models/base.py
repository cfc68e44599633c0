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
