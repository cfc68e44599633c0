"""`readable` (plumbing/readiness.py): what select answered, for any descriptor number."""

from __future__ import annotations

import os
import threading
import time

from plumbing.readiness import readable
from tests.support.descriptors import SELECT_LIMIT, numbered_past_select_limit


class End:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def test_a_descriptor_past_selects_limit_is_waited_on_like_any_other():
    with numbered_past_select_limit():
        read, write = os.pipe()
        quiet_read, quiet_write = os.pipe()
        try:
            assert read > SELECT_LIMIT
            ends = [End(quiet_read), End(read)]
            assert readable(ends, 0) == []
            started = time.monotonic()
            assert readable(ends, 0.2) == []
            assert time.monotonic() - started >= 0.19, "the timeout is honoured"
            threading.Timer(0.05, os.write, (write, b"x")).start()
            assert readable(ends, 30) == [ends[1]]
            os.close(write)
            write = -1
            os.read(read, 1)
            assert readable(ends, 0) == [ends[1]], "a hung-up end counts as readable, as with select"
        finally:
            for fd in (read, write, quiet_read, quiet_write):
                if fd >= 0:
                    os.close(fd)
