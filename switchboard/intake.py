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

With a `deadline` (HANDOFF_DEADLINE_SECONDS), a request waits at most that long for its
row (a lost network, a lock on the table, a pool without a free connection): past it the
request answers 503 "safe to retry". A row not yet written is taken out of the queue; one
whose write is under way may still commit, and the retry then finds it stored (one call
per CallSid). The write itself runs beside the request that leads it (`within`), so
that request too answers on time.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime

import peewee as pw

from models import ApiToken, Call, Clinic, Origin
from plumbing.database import DeadlinePassed, release_connection, within

#: Seconds a batch's write is waited for at least, however little of its writer's own
#: deadline is left (a request promoted to write as its time ran out).
MIN_WRITE = 0.25


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
    def __init__(self, max_batch: int = 64, deadline: float | None = None) -> None:
        self.max_batch = max_batch
        self.deadline = deadline  # seconds a request waits for its row; None: as long as it takes
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
        ends = None if self.deadline is None else time.monotonic() + self.deadline
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
                self._write_next(ends)
            if me.done:
                break
            if not me.woken.wait(None if ends is None else max(0.0, ends - time.monotonic())):
                with self._lock:
                    if me.done:
                        break
                    if me.lead:
                        continue  # promoted as its time ran out: it writes (briefly) and hands the lead on
                    if me in self._queue:
                        self._queue.remove(me)  # never written: nothing of it to commit later
                raise DeadlinePassed(f"the call was not stored within {self.deadline:g} s")
            me.woken.clear()
        if me.error is not None:
            raise me.error
        if me.stored:
            return Call(**me.row), True
        if ends is None:
            return Call.stored(clinic, fields["call_sid"]), False
        return within(max(MIN_WRITE, ends - time.monotonic()), lambda: Call.stored(clinic, fields["call_sid"])), False

    def _write_next(self, ends: float | None) -> None:
        """Write one batch (this thread's own row among it), then hand the lead on; the
        write waited for until `ends` (at least MIN_WRITE seconds), when it is not None."""
        with self._lock:
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            self.writes += 1
        if ends is None:
            stored, errors = _insert(batch)
        else:
            try:
                stored, errors = within(max(MIN_WRITE, ends - time.monotonic()), lambda: _insert(batch))
            except DeadlinePassed as exc:  # still running: it may commit, and a retry finds it stored
                stored, errors = set(), {w.row["id"]: exc for w in batch}
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
