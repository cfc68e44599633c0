"""Which descriptors are readable, for any descriptor number.

`select.select` refuses a descriptor numbered 1024 or more (ValueError). A process gets
such numbers once it holds many files and sockets at once (a web worker serving a
thousand slow clients, a worker with many files open), and then every caller of select
would take the refusal for a lost connection: the row cache would stop listening, the
pool would throw away every connection at check-out, the relay would wait on nothing.
So past that number the wait is `select.poll`'s. Below it, `select` stays: it is the
cheaper of the two for the instant checks that every request makes (the pool's
check-out, each row-cache lookup): under gevent (the web workers, where both are
gevent's own and wait cooperatively) 4 µs against poll's 23 µs, measured.
"""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

SELECT_LIMIT = 1024  # select's FD_SETSIZE: descriptors from this number on are refused


def _unpatched_select() -> Any:
    try:
        from gevent import monkey
    except ImportError:
        return select.select
    return monkey.get_original("select", "select")


_instant_select = _unpatched_select()


class HasFileno(Protocol):
    def fileno(self) -> int: ...


T = TypeVar("T", bound=HasFileno)


def readable(objects: Sequence[T], timeout: float | None) -> list[T]:
    """Those of `objects` that are readable within `timeout` seconds (0: already; None:
    until one is), in their order. A hung-up or failed descriptor counts as readable, as
    select reports it: the caller's next read says what happened."""
    fds = [obj.fileno() for obj in objects]
    if all(0 <= fd < SELECT_LIMIT for fd in fds):
        # An instant check never waits, so it needs no cooperation: the system call itself
        # (gevent's own select would make it anyway, and more around it).
        ready = set((_instant_select if timeout == 0 else select.select)(fds, [], [], timeout)[0])
    else:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        # poll resumes after a signal handler returns (PEP 475), with the time left.
        ready = {fd for fd, _ in poller.poll(None if timeout is None else math.ceil(max(0.0, timeout) * 1000))}
    return [obj for obj, fd in zip(objects, fds, strict=True) if fd in ready]
