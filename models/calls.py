"""Calls the switchboard handed off (the ingest's outbox) and the hand-offs it refused."""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import lru_cache

import peewee as pw

from models.audit import AuditEvent, Origin
from models.base import BaseModel, as_uuid
from models.clinics import Clinic
from models.tokens import ApiToken
from plumbing.clock import as_utc, utc_now
from plumbing.database import db, hot_sql, is_postgresql
from plumbing.errors import Conflict


class Call(BaseModel):
    """A switchboard call, as handed off by `recording-complete`. Deduplicated by CallSid.

    `state` is `pending` until the ingest job has finished with it (`done`); `outcome`
    says what came of it. Every input is kept as received, `Extra` included.
    """

    clinic_id: uuid.UUID
    received_by_id: uuid.UUID | None

    OUTCOMES = ("no_recording", "voice_message", "missed_call", "opted_out", "recording_unavailable")
    # reliable / check / unreliable: the reliability label (voicemail/transcription/reliability.py);
    # failed: no usable text.
    TRANSCRIPT_STATUSES = ("reliable", "check", "unreliable", "failed")

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    clinic = pw.ForeignKeyField(Clinic, backref="calls", on_delete="CASCADE")
    call_sid = pw.CharField(max_length=200, unique=True)
    call_from = pw.CharField(max_length=100)
    call_to = pw.CharField(max_length=100)
    status = pw.CharField(max_length=100, null=True)
    has_recording = pw.BooleanField(null=True)
    recording_url = pw.TextField(null=True)  # a credential while it lives: never logged
    recording_sid = pw.CharField(max_length=500, null=True)
    source = pw.CharField(max_length=200, null=True)
    extra = pw.TextField(null=True)
    received_at = pw.DateTimeField(default=utc_now)
    received_by = pw.ForeignKeyField(ApiToken, null=True, on_delete="SET NULL")
    state = pw.CharField(max_length=10, default="pending", index=True)
    outcome = pw.CharField(max_length=30, null=True)
    attempts = pw.IntegerField(default=0)
    fetch_error = pw.TextField(null=True)  # why the recording could not be fetched
    transcript = pw.TextField(null=True)
    transcript_language = pw.CharField(max_length=8, null=True)  # the detected language
    # How far the transcript can be trusted: TRANSCRIPT_STATUSES, or None when none was
    # attempted (no recording, not fetched, no speech); the issue is a short code
    # (`low_confidence`, `timeout`, `engine_error`, ...) when it is not `reliable`.
    transcript_status = pw.CharField(max_length=12, null=True)
    transcript_issue = pw.CharField(max_length=40, null=True)
    callback_number = pw.CharField(max_length=20, null=True)  # E.164, its digits confirmed as heard
    # A number read from the transcript whose digits were not confirmed (E.164 of the
    # digits as written): never callback_number, for a person to listen to.
    heard_number = pw.CharField(max_length=20, null=True)
    callback_number_at = pw.FloatField(null=True)  # seconds into the recording where either was said
    transcript_signals = pw.TextField(null=True)  # JSON: confidence signals of the engine
    intelligibility = pw.CharField(max_length=30, null=True)  # "ok" or the reason it is not
    processed_at = pw.DateTimeField(null=True)
    # Playable recording (jobs/refetch.py): the latest link re-fetched from the platform
    # (a credential: never logged) and its expiry; why the recording is gone, once known.
    recording_link = pw.TextField(null=True)
    recording_link_expires_at = pw.DateTimeField(null=True)
    recording_gone_reason = pw.CharField(max_length=30, null=True)
    recording_checked_at = pw.DateTimeField(null=True)
    # When the relay (jobs/relay.py) handed the call to the queue; None = not yet.
    queued_at = pw.DateTimeField(null=True)
    # What was odd about the hand-off (JSON list of `switchboard.handoff.ANOMALIES` names);
    # None when nothing was.
    anomalies = pw.TextField(null=True)
    # The recording the hand-off delivered, as the ingest job downloaded it: a re-fetched
    # link is served only when it yields these bytes (voicemail/recordings.py).
    recording_sha256 = pw.CharField(max_length=64, null=True)
    recording_bytes = pw.BigIntegerField(null=True)
    # What staff who listened wrote down as really said (patient_requests/changes.py
    # `correct_transcript`): shown first and returned beside `transcript`, the machine's
    # text, which is kept; who corrected it (a staff user's e-mail) and when. None: never.
    corrected_transcript = pw.TextField(null=True)
    corrected_at = pw.DateTimeField(null=True)
    corrected_by = pw.CharField(max_length=254, null=True)

    #: PostgreSQL NOTIFY channel of a trigger on every new call (migration 5): the relay
    #: LISTENs to queue calls at once, rather than on its next poll.
    NEW_CALL_CHANNEL = "call_pending"

    @classmethod
    def claim_unqueued(cls, now: datetime, limit: int = 200, per_clinic: int = 0) -> list[uuid.UUID]:
        """Mark up to `limit` pending calls as being queued and return their ids, in the
        order to queue them. Atomic per row: two relays never claim the same call.

        `per_clinic` > 0 is the fair share: a clinic has at most that many
        calls in flight (claimed, not done), and clinics take turns: every clinic's next
        call comes before any clinic's call after it. So one clinic's burst holds at most
        `per_clinic` places in the queue, and another clinic's call waits behind those,
        not behind the whole burst. A call waiting for a download retry (`fetch_error`
        set by its job) holds no place: it would block its clinic for minutes. 0: oldest
        first, no limit (the order before the fair share)."""
        if per_clinic <= 0:
            oldest = (
                cls.select(cls.id)
                .where((cls.state == "pending") & cls.queued_at.is_null())
                .order_by(cls.received_at)
                .limit(limit)
            )
            claimed = (
                cls.update(queued_at=as_utc(now)).where(cls.id.in_(oldest) & cls.queued_at.is_null()).returning(cls.id)
            )
            return [row.id for row in claimed.execute()]
        waiting = [as_uuid(row[0]) for row in hot_sql(_FAIR_CLAIM_SQL, (per_clinic, limit)).fetchall()]
        if not waiting:
            return []
        # Selected, then claimed row by row: a call another relay claimed in between is
        # skipped. Two relays at once pick from the front of the same per-clinic order, so
        # together they stay within the share (bar a call stored with an earlier
        # received_at than one already claimed: one more in flight for a while).
        taken = {
            row.id
            for row in cls.update(queued_at=as_utc(now))
            .where(cls.id.in_(waiting) & cls.queued_at.is_null())
            .returning(cls.id)
            .execute()
        }
        return [call_id for call_id in waiting if call_id in taken]

    @classmethod
    def unclaim(cls, ids: list[uuid.UUID]) -> None:
        if ids:
            cls.update(queued_at=None).where(cls.id.in_(ids)).execute()

    @classmethod
    def row_for(cls, clinic: Clinic, fields: dict, token: ApiToken | None, now: datetime) -> dict:
        """The row `recording-complete` stores (`switchboard.intake.GroupCommit` writes it)."""
        return {
            "id": uuid.uuid4(),
            "clinic": clinic.id,
            "received_by": token.id if token else None,
            "received_at": as_utc(now),
            "state": "pending",
            "attempts": 0,
            **fields,
        }

    @classmethod
    def insert_rows(cls, rows: list[dict], origins: dict[uuid.UUID, Origin] | None = None) -> set[uuid.UUID]:
        """INSERT the rows in one statement, so one commit; returns the ids stored (a row
        whose CallSid is already stored, or repeated among `rows`, is skipped).

        Each stored row's `call.receive` audit event (`origins`: the request that handed
        each row off, and its client's address) is written by the same statement on
        PostgreSQL: a multi-row INSERT in a WITH, so still one round trip and one commit;
        none for a row skipped."""
        names = tuple(dict.fromkeys(name for row in rows for name in row))
        fields = [cls._meta.fields[name] for name in names]
        params = [field.db_value(row.get(field.name)) for row in rows for field in fields]
        origins = origins or {}
        if not is_postgresql():  # SQLite has no INSERT inside a WITH
            with db.atomic():
                stored = {as_uuid(r[0]) for r in hot_sql(_insert_call_sql(names, len(rows)), params)}
                AuditEvent.calls_received([row for row in rows if row["id"] in stored], origins)
            return stored
        for row in rows:
            origin = origins.get(row["id"], Origin())
            params += [cls.id.db_value(row["id"]), origin.request_id, origin.address]
        sql = _insert_call_sql(names, len(rows), audited=True)
        return {as_uuid(r[0]) for r in hot_sql(sql, params).fetchall()}

    @classmethod
    def stored(cls, clinic: Clinic, call_sid: str) -> Call:
        """The call already stored under `call_sid`; `CallSidConflict` if another clinic's."""
        call = cls.get(cls.call_sid == call_sid)
        if call.clinic_id != clinic.id:
            raise CallSidConflict(call_sid)
        return call


class CallSidConflict(Conflict):
    """The CallSid of a hand-off is already another clinic's call."""

    def __init__(self, call_sid: str) -> None:
        super().__init__("This CallSid is already used by another clinic.", code="CALL_SID_CONFLICT")
        self.call_sid = call_sid


class RefusedHandoff(BaseModel):
    """A `recording-complete` answered 4xx after its token was authenticated, or 401 for a
    key of the clinic that had expired or was revoked (`reason`): a switchboard
    does not retry those, so each is a voicemail that did not arrive. Kept
    `REFUSED_HANDOFF_RETENTION_DAYS` (the worker purges older rows) for the operator's
    `manage.py calls --refused`, and counted in /metrics. Never the body, and never a URL's
    query string in the message."""

    id = pw.BigAutoField()
    at = pw.DateTimeField(default=utc_now, index=True)  # UTC
    clinic_id = pw.UUIDField(null=True)  # None: the URL named no clinic (404)
    clinic_slug = pw.CharField(max_length=64)  # as the URL named it
    token_id = pw.UUIDField(null=True)
    call_sid = pw.CharField(max_length=200, null=True)  # when the body was read and had one
    status = pw.SmallIntegerField()
    code = pw.CharField(max_length=40)
    message = pw.CharField(max_length=500)
    # Why its key was refused when the key is known (its secret right): expired, revoked.
    reason = pw.CharField(max_length=20, null=True)


# share, by place (clinics take turns), then by age. Plain SQL with window functions:
# PostgreSQL and SQLite (3.25+, the embedded run) both run it.
_FAIR_CLAIM_SQL = """
WITH busy AS (
    SELECT "clinic_id", COUNT(*) AS "n" FROM "call"
    WHERE "state" = 'pending' AND "queued_at" IS NOT NULL AND "fetch_error" IS NULL
    GROUP BY "clinic_id"
), waiting AS (
    SELECT "id", "clinic_id", "received_at",
           ROW_NUMBER() OVER (PARTITION BY "clinic_id" ORDER BY "received_at", "id") AS "turn"
    FROM "call" WHERE "state" = 'pending' AND "queued_at" IS NULL
)
SELECT w."id" FROM waiting AS w LEFT JOIN busy AS b ON b."clinic_id" = w."clinic_id"
WHERE w."turn" + COALESCE(b."n", 0) <= %s
ORDER BY w."turn" + COALESCE(b."n", 0), w."received_at", w."id"
LIMIT %s
"""


@lru_cache(maxsize=256)
def _insert_call_sql(names: tuple[str, ...], rows: int, audited: bool = False) -> str:
    columns = ", ".join(f'"{Call._meta.fields[n].column_name}"' for n in names)
    values = ", ".join([f"({', '.join(['%s'] * len(names))})"] * rows)
    insert = f'INSERT INTO "call" ({columns}) VALUES {values} ON CONFLICT DO NOTHING RETURNING "id"'
    if not audited:
        return insert
    # The stored rows (RETURNING: a skipped row gets no event) joined to their token for the
    # service account's name, and to (call id, request id) pairs passed after the rows.
    a, c = AuditEvent._meta.fields, Call._meta.fields
    events = ", ".join(
        f'"{a[n].column_name}"'
        for n in (
            "at",
            "actor_kind",
            "token",
            "actor_name",
            "clinic_id",
            "action",
            "target_type",
            "target_id",
            "details",
            "request_id",
            "address",
        )
    )
    handed = ", ".join(["(%s::uuid, %s::text, %s::text)"] * rows)
    received_by, clinic, received_at = (c[n].column_name for n in ("received_by", "clinic", "received_at"))
    return (
        f'WITH stored AS ({insert}, "{clinic}", "{received_by}", "{received_at}"), '
        f'audited AS (INSERT INTO "audit_event" ({events}) '
        f'SELECT s."{received_at}", \'token\', s."{received_by}", t."name", s."{clinic}", \'call.receive\', \'call\', '
        f's."id"::text, \'{{}}\', h.request_id, h.address FROM stored AS s JOIN "api_token" AS t ON t."id" = s."{received_by}" '  # noqa: E501
        f'LEFT JOIN (VALUES {handed}) AS h(call_id, request_id, address) ON h.call_id = s."id") '
        'SELECT "id" FROM stored'
    )
