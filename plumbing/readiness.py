"""Which descriptors are readable: `select.poll`, never `select.select`.

`select.select` refuses a descriptor numbered 1024 or more (ValueError). A process gets
such numbers once it holds many files and sockets at once (a web worker serving a
thousand slow clients, a worker with many files open), and then every caller of select
would take the refusal for a lost connection: the row cache would stop listening, the
pool would throw away every connection at check-out, the relay would wait on nothing.
Under gevent (the web workers) `select.poll` is gevent's, which waits cooperatively and
takes any descriptor number too (its `select` refuses them as well).
"""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from typing import Protocol, TypeVar


class HasFileno(Protocol):
    def fileno(self) -> int: ...


T = TypeVar("T", bound=HasFileno)


def readable(objects: Sequence[T], timeout: float | None) -> list[T]:
    """Those of `objects` that are readable within `timeout` seconds (0: already; None:
    until one is), in their order. A hung-up or failed descriptor counts as readable, as
    select would report it: the caller's next read says what happened."""
    poller = select.poll()
    for obj in objects:
        poller.register(obj.fileno(), select.POLLIN)
    # poll resumes after a signal handler returns (PEP 475), with the time left.
    ready = {fd for fd, _ in poller.poll(None if timeout is None else math.ceil(max(0.0, timeout) * 1000))}
    return [obj for obj in objects if obj.fileno() in ready]
