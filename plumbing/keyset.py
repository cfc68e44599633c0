"""Keyset pagination: a page of rows after a position in a unique sort order, and the
cursor strings that carry that position from one page to the next.

A search orders its rows by a unique key (one or more columns, all ascending or all
descending) and answers a page at a time: the rows after the cursor's key, one more than
the page to know whether another follows, and the cursor of the page's last row. The
same row always gives the same cursor, so cursors handed out earlier keep working. A
one-column key's cursor is its value's text (a patient id); a longer key's is the JSON
list of the values' texts in URL-safe base64 without padding. A cursor that is neither
is refused: 400 VALIDATION_FAILED.
"""

from __future__ import annotations

import base64
import json
import operator
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import peewee as pw

from plumbing.errors import Invalid

INVALID_CURSOR = "pagination.cursor: not a cursor of this search"

# How a key column's value is written in a cursor, and read back from it.
_FORMS: tuple[tuple[type[pw.Field], Callable[[Any], str], Callable[[str], Any]], ...] = (
    (pw.DateTimeField, lambda value: value.isoformat(), datetime.fromisoformat),
    (pw.UUIDField, str, uuid.UUID),
    (pw.IntegerField, str, int),  # BigAutoField too (the audit trail's insertion order)
)


def _form(column: pw.Field) -> tuple[Callable[[Any], str], Callable[[str], Any]]:
    for kind, write, read in _FORMS:
        if isinstance(column, kind):
            return write, read
    raise TypeError(f"{column.name}: no cursor form for a {type(column).__name__}")


class Keyset:
    """The unique order of a search over `columns`, ascending or descending."""

    def __init__(self, *columns: pw.Field, descending: bool = False) -> None:
        self.columns = columns
        self.descending = descending
        self._forms = [_form(c) for c in columns]

    def cursor(self, row: pw.Model) -> str:
        """The cursor of the position just after `row`."""
        texts = [write(getattr(row, c.name)) for c, (write, _) in zip(self.columns, self._forms)]
        if len(texts) == 1:
            return texts[0]
        return base64.urlsafe_b64encode(json.dumps(texts).encode()).decode().rstrip("=")

    def key(self, cursor: str) -> tuple[Any, ...]:
        """The key `cursor` names, else 400 VALIDATION_FAILED."""
        try:
            if len(self.columns) == 1:
                texts: tuple[Any, ...] = (cursor,)
            else:
                texts = tuple(json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))))
                if len(texts) != len(self.columns):
                    raise ValueError("not one value per key column")
            return tuple(read(text) for (_, read), text in zip(self._forms, texts))
        except (ValueError, TypeError, AttributeError):  # AttributeError: uuid.UUID(1)
            raise Invalid(INVALID_CURSOR, param="/pagination/cursor") from None

    def after(self, key: tuple[Any, ...]) -> pw.Expression:
        """The rows after `key` in this order."""
        beyond = operator.lt if self.descending else operator.gt
        condition = beyond(self.columns[-1], key[-1])
        for column, value in zip(self.columns[-2::-1], key[-2::-1]):
            condition = beyond(column, value) | ((column == value) & condition)
        return condition

    def page(self, query: pw.ModelSelect[Any], cursor: str | None, limit: int) -> tuple[list[Any], str | None]:
        """Up to `limit` rows of `query` after `cursor` (None: from the first) in this
        order, and the next page's cursor (None on the last page)."""
        if cursor is not None:
            query = query.where(self.after(self.key(cursor)))
        order = [c.desc() for c in self.columns] if self.descending else self.columns
        rows = list(query.order_by(*order).limit(limit + 1))
        return rows[:limit], self.cursor(rows[limit - 1]) if len(rows) > limit else None
