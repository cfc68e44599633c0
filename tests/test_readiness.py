"""`readable` (plumbing/descriptors.py): what select answered, for any descriptor number."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from plumbing.descriptors import SELECT_LIMIT, readable
from tests.conftest import ROOT
from tests.support.descriptors import numbered_past_select_limit


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


GEVENT_SCRIPT = """
from gevent import monkey; monkey.patch_all()  # as the Procfile's web workers run
import os, select, socket, sys, time
from plumbing.descriptors import SELECT_LIMIT, readable
from tests.support.descriptors import numbered_past_select_limit
assert select.poll.__module__ == "gevent.select"
with numbered_past_select_limit():
    a, b = socket.socketpair()
    assert a.fileno() > SELECT_LIMIT
    assert readable([a], 0) == []
    started = time.monotonic()
    assert readable([a], 0.2) == [] and time.monotonic() - started >= 0.19
    b.send(b"x")
    assert readable([a], 0) == [a]
    print("ok")
"""


def test_under_gevent_as_the_web_workers_run_a_descriptor_past_selects_limit_is_waited_on_too():
    """gevent replaces `select.poll` with its own (and its `select` refuses 1024 and up too)."""
    run = subprocess.run([sys.executable, "-c", GEVENT_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
