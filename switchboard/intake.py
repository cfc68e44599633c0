"""Group commit for `recording-complete`: concurrent calls share one INSERT and one commit.

Each hand-off must be durable before it is answered, and on PostgreSQL a commit (its
WAL flush) costs more than the rest of the request together: a commit of eight rows costs
hardly more than a commit of one (bench/handoff_bench.py measures the intake against a
bare baseline). So the requests of one web process that arrive while a write is in
flight queue up, and the next write stores all of them at once. Nobody waits for a
timer: the first request with nothing in flight writes at once (alone, when the switchboard
is quiet), and the others are written by whichever of them is promoted next. Every
request is still answered only after its own row is committed; a failed write fails
exactly the requests whose rows it carried. The same statement writes each stored call's
`call.receive` audit event (`Call.insert_rows`).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime

import peewee as pw

from models import ApiToken, Call, Clinic, Origin
from plumbing.database import release_connection


@dataclass(eq=False)
class _Waiting:
    row: dict
    # For the call's audit event: the batch is written from another request's thread.
    origin: Origin = field(default_factory=Origin.current)
    woken: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    stored: bool = False
    error: BaseException | None = None
    lead: bool = False  # promoted: this request's thread writes the next batch


class GroupCommit:
    def __init__(self, max_batch: int = 64) -> None:
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._writing = False
        self.writes = 0  # INSERT statements issued (each one commit)

    def receive(self, clinic: Clinic, fields: dict, token: ApiToken | None, now: datetime) -> tuple[Call, bool]:
        """Store the call once per CallSid (a unique constraint, not check-then-insert).

        Returns the stored call, which may be an earlier copy, and whether this request
        created it. Raises `models.CallSidConflict` when the CallSid belongs to another
        clinic."""
        me = _Waiting(Call.row_for(clinic, fields, token, now))
        # Hand this request's pooled connection back before waiting on others: with
        # more requests in flight than pooled connections (gevent workers), waiting
        # requests holding them all would leave the writer none. Deadlock, until the
        # pool's timeout.
        release_connection()
        with self._lock:
            self._queue.append(me)
            me.lead = not self._writing
            self._writing = True
        while True:
            if me.lead:
                self._write_next()
            if me.done:
                break
            me.woken.wait()
            me.woken.clear()
        if me.error is not None:
            raise me.error
        if me.stored:
            return Call(**me.row), True
        return Call.stored(clinic, fields["call_sid"]), False

    def _write_next(self) -> None:
        """Write one batch (this thread's own row among it), then hand the lead on."""
        with self._lock:
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            self.writes += 1
        stored, errors = _insert(batch)
        with self._lock:
            successor = self._queue[0] if self._queue else None
            if successor is not None:
                successor.lead = True
            else:
                self._writing = False
        for waiting in batch:
            waiting.done, waiting.lead = True, False
            waiting.stored = waiting.row["id"] in stored
            waiting.error = errors.get(waiting.row["id"])
            waiting.woken.set()
        if successor is not None:
            successor.woken.set()


def _insert(batch: list[_Waiting]) -> tuple[set[uuid.UUID], dict[uuid.UUID, BaseException]]:
    """Store the batch's rows; returns the ids stored and, per row, the error that kept
    it out. A row the database refuses (a clinic deleted meanwhile, ...) fails alone:
    the batch is retried row by row. A database outage fails the whole batch."""
    try:
        return Call.insert_rows([w.row for w in batch], {w.row["id"]: w.origin for w in batch}), {}
    except (pw.IntegrityError, pw.DataError) as exc:
        if len(batch) == 1:
            return set(), {batch[0].row["id"]: exc}
    except Exception as exc:
        return set(), {w.row["id"]: exc for w in batch}
    stored: set[uuid.UUID] = set()
    errors: dict[uuid.UUID, BaseException] = {}
    for waiting in batch:
        more, failed = _insert([waiting])
        stored |= more
        errors.update(failed)
    return stored, errors
