"""API keys: personal access tokens bound to clinics and scopes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import peewee as pw

from models.base import BaseModel
from models.clinics import Clinic
from plumbing.clock import as_utc, utc_now
from plumbing.database import columns, db, from_row, hot_sql
from plumbing.row_cache import Watched

if TYPE_CHECKING:
    from plumbing.row_cache import RowCache


class ApiToken(BaseModel):
    """A personal access token. The secret is shown once; only its SHA-256 is kept.

    The token text is `csk_<id hex>_<secret>`: the id finds the row, the secret's hash
    is compared in constant time. The secret has 256 bits of entropy, so a fast hash
    is the right tool (a password hash would only slow every request down).
    """

    PREFIX = "csk"
    SCOPES = ("read", "write")
    #: A key expiring sooner is flagged in the lists, the administrators' banner and the metric.
    EXPIRY_WARNING = timedelta(days=14)

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    name = pw.CharField(max_length=200)  # the service account every write is attributed to
    secret_hash = pw.CharField(max_length=64)
    scopes = pw.CharField(max_length=50)  # space separated
    created_at = pw.DateTimeField(default=utc_now)
    expires_at = pw.DateTimeField(null=True)
    revoked_at = pw.DateTimeField(null=True)
    last_used_at = pw.DateTimeField(null=True)
    # Who issued it, as the audit trail names them ("staff:anna@example.cz", "operator:deploy")
    # and the key it replaced when issued by a rotation (migration 16; None before).
    created_by = pw.CharField(max_length=220, null=True)
    rotated_from = pw.UUIDField(null=True)
    # The last expiry notice given for it (notices/key_notices.py): 14, then 3 days ahead; None: none.
    expiry_notice_days = pw.SmallIntegerField(null=True)

    class Meta:
        # The columns its trigger announces: a last use written does not change a cached
        # token, and a new token is not cached yet.
        row_cache = Watched(columns=frozenset({"secret_hash", "scopes", "expires_at", "revoked_at"}), inserts=False)

    @staticmethod
    def _hash(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    @classmethod
    def issue(
        cls,
        name: str,
        clinics: list[Clinic],
        scopes: list[str],
        now: datetime,
        expires_in: timedelta | None = None,
        created_by: str | None = None,
        expires_at: datetime | None = None,
        rotated_from: uuid.UUID | None = None,
    ) -> tuple[ApiToken, str]:
        """Create a token; returns the row and the token text (never stored). The rules
        (expiry required, at most a year, ...) are `api_keys`'s: this only writes."""
        secret = secrets.token_urlsafe(32)
        with db.atomic():
            token = cls.create(
                name=name,
                secret_hash=cls._hash(secret),
                scopes=" ".join(sorted(set(scopes))),
                expires_at=as_utc(expires_at) if expires_at else (as_utc(now) + expires_in if expires_in else None),
                created_at=as_utc(now),
                created_by=created_by,
                rotated_from=rotated_from,
            )
            for clinic in clinics:
                ApiTokenClinic.create(token=token, clinic=clinic)
        return token, f"{cls.PREFIX}_{token.id.hex}_{secret}"

    @classmethod
    def authorize(
        cls, text: str, slug: str, now: datetime, cache: RowCache | None = None
    ) -> tuple[ApiToken, Clinic | None] | None:
        """The live token for `text` (None: unknown, bad secret, revoked or expired) and
        the clinic named `slug` (None if there is none), with `covered` telling whether
        the token is bound to it.

        One round trip for every check, in SQL written once (Peewee would rebuild it per
        request, which cost more than running it), or none when `cache` holds them.
        """
        parts = text.split("_", 2)
        if len(parts) != 3 or parts[0] != cls.PREFIX:
            return None
        try:
            token_id = uuid.UUID(hex=parts[1])
        except ValueError:
            return None
        presented = cls._hash(parts[2])

        def load() -> tuple[ApiToken, Clinic | None] | None:
            row = hot_sql(_AUTHORIZE_SQL, (slug, cls.id.db_value(token_id))).fetchone()
            if row is None:
                return None
            # The models built from the row when it was read (building them per request
            # cost as much as the rest of the check); nothing changes them afterwards.
            token = from_row(cls, row)
            clinic_values = row[len(cls._meta.sorted_fields) :]
            clinic = None
            if clinic_values[0] is not None:  # else the LEFT JOIN found no clinic of that slug
                clinic = from_row(Clinic, clinic_values)
                clinic.covered = bool(clinic_values[-1])
            return token, clinic

        def live(found: tuple[ApiToken, Clinic | None]) -> bool:
            token, clinic = found
            return (
                hmac.compare_digest(token.secret_hash, presented)
                and token.revoked_at is None
                and (token.expires_at is None or token.expires_at > as_utc(now))
                and clinic is not None
            )

        # Only rows whose secret matched are kept: no filling the cache with guesses. While
        # the database is unreachable, the last known row (plumbing/row_cache.py).
        found = cache.read((token_id, slug), load, live, lookup="token") if cache is not None else load()
        if found is None:
            hmac.compare_digest(presented, presented)  # same work either way
            return None
        token, clinic = found
        if not hmac.compare_digest(token.secret_hash, presented):
            return None
        if token.revoked_at is not None:
            return None
        if token.expires_at is not None and token.expires_at <= as_utc(now):
            return None
        return token, clinic

    @classmethod
    def refused_reason(cls, text: str, slug: str, now: datetime) -> tuple[ApiToken, Clinic, str] | None:
        """For a token `authorize` refused: the token, the clinic named `slug` that it is
        bound to, and why (`revoked`, `expired`), when its secret is right; None for an
        unknown or forged token, a live one, or a clinic it does not serve. Asked only on
        that refusal (recording-complete's), so the hot path pays nothing."""
        parts = text.split("_", 2)
        if len(parts) != 3 or parts[0] != cls.PREFIX:
            return None
        try:
            token_id = uuid.UUID(hex=parts[1])
        except ValueError:
            return None
        token = cls.get_or_none(cls.id == token_id)
        if token is None or not hmac.compare_digest(token.secret_hash, cls._hash(parts[2])):
            return None
        if token.revoked_at is not None:
            reason = "revoked"
        elif token.expires_at is not None and token.expires_at <= as_utc(now):
            reason = "expired"
        else:
            return None
        clinic = (
            Clinic.select()
            .join(ApiTokenClinic, on=(ApiTokenClinic.clinic == Clinic.id))
            .where((Clinic.slug == slug) & (ApiTokenClinic.token == token.id))
            .first()
        )
        return (token, clinic, reason) if clinic is not None else None

    @property
    def scope_set(self) -> set[str]:
        return set(self.scopes.split())

    @classmethod
    def touch(cls, token_id: uuid.UUID, now: datetime, every: timedelta) -> datetime:
        """Record a use at `now` unless one within `every` is recorded already (by any
        process): at most one write per token per `every`. Returns the recorded last use."""
        now = as_utc(now)
        written = (
            cls.update(last_used_at=now)
            .where((cls.id == token_id) & (cls.last_used_at.is_null() | (cls.last_used_at <= now - every)))
            .execute()
        )
        if written:
            return now
        row = cls.select(cls.last_used_at).where(cls.id == token_id).first()
        return as_utc(row.last_used_at) if row and row.last_used_at else now


class ApiTokenClinic(BaseModel):
    id: Any  # the AutoField: a column in queries, an int on a row
    token_id: uuid.UUID
    clinic_id: uuid.UUID

    token = pw.ForeignKeyField(ApiToken, backref="clinic_links", on_delete="CASCADE")
    clinic = pw.ForeignKeyField(Clinic, on_delete="CASCADE")

    class Meta:
        indexes = ((("token", "clinic"), True),)
        row_cache = Watched()  # which clinics a cached token covers


# --- The hot path's SQL (every authenticated request, every call hand-off), run with
# database.hot_sql.

_AUTHORIZE_SQL = (
    f"SELECT {columns('t', ApiToken)}, {columns('c', Clinic)}, EXISTS ("
    'SELECT 1 FROM "api_token_clinic" AS l WHERE l."token_id" = t."id" AND l."clinic_id" = c."id") '
    'FROM "api_token" AS t LEFT JOIN "clinic" AS c ON c."slug" = %s WHERE t."id" = %s'
)


# The relay's fair claim (`Call.claim_unqueued`): each clinic's calls not queued yet,
