"""What the onboarding writer's parts share: the error naming the bad field's path, the
stable ids of entities the file gives none, and the row writer that counts changes (so
running the same file twice reports, and writes, nothing)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, TypeVar, cast

import peewee as pw

from plumbing.clock import as_utc
from plumbing.crypto import Keys

NAMESPACE = uuid.UUID("5b0f3c1e-7a0e-4f7e-9a51-6f3c2d1b8e40")


M = TypeVar("M", bound=pw.Model)


class OnboardingError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


def stable_id(*parts: str) -> uuid.UUID:
    """An entity's id when the file gives none: uuid5 of its kind and natural key."""
    return uuid.uuid5(NAMESPACE, "\x1f".join(parts))


def unique(values: list[str], where: str, field: str) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise OnboardingError(f"{where}[{i}].{field}", f"duplicate {value!r}")
        seen.add(value)


class RowWriter:
    """Writes one document's rows, at `now` (the writer's clock): a row it creates is
    created then, and what the document marks deleted or disabled is so from then."""

    def __init__(self, secret_key: Keys, now: datetime) -> None:
        self.secret_key = secret_key
        self.now = as_utc(now)
        self.changes = 0

    def upsert(self, model: type[M], key: Any, values: dict[str, Any]) -> M:
        primary_key = cast(pw.Field, model._meta.primary_key)  # every model here has one
        row = model.get_or_none(primary_key == key)
        if row is None:
            self.changes += 1
            created = {"created_at": self.now} if "created_at" in model._meta.fields else {}
            return model.create(**{primary_key.name: key}, **created, **values)
        dirty = {k: v for k, v in values.items() if getattr(row, _FK_IDS.get(k, k)) != v}
        if dirty:
            self.changes += 1
            model.update(**dirty).where(primary_key == key).execute()
        return row

    def ensure(self, model: type[pw.Model], **values: Any) -> None:
        """Insert a link row unless present."""
        query = model.select()
        for k, v in values.items():
            query = query.where(getattr(model, k) == v)
        if not query.exists():
            self.changes += 1
            model.create(**values)

    def replace(
        self,
        model: type[pw.Model],
        where: pw.Expression,
        wanted: set[tuple],
        columns: tuple[str, ...],
        fixed: dict[str, Any],
    ) -> None:
        have = {tuple(getattr(r, _FK_IDS.get(c, c)) for c in columns): r for r in model.select().where(where)}
        for key, row in have.items():
            if key not in wanted:
                self.changes += 1
                row.delete_instance()
        for key in wanted - set(have):
            self.changes += 1
            model.create(**fixed, **dict(zip(columns, key)))


# Foreign keys compared by their raw id column.
_FK_IDS = {
    "organization": "organization_id",
    "clinic": "clinic_id",
    "calendar": "calendar_id",
    "merged_into": "merged_into_id",
    "tag": "tag_id",
    "patient": "patient_id",
}
