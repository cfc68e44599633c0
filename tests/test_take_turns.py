"""Under gevent every request first lets the others run (web.middleware.TakeTurns).

A routing check answered from memory never waits on I/O; without a yield, one keep-alive
connection's requests ran back to back while the process's other connections waited
(bench/routing_bench.py: p99 400-800 ms against 15 ms with it). Checked in a process
gevent has patched, as the Procfile's web workers are: a request that arrives while
another is being handled starts before that one goes on.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT

SCRIPT = """
from gevent import monkey
monkey.patch_all()
import gevent
from web.middleware import TakeTurns

order = []
turns = TakeTurns()

def request(name):
    order.append(name + " arrives")
    turns.process_request(None, None)
    order.append(name + " handled")

first, second = gevent.spawn(request, "first"), gevent.spawn(request, "second")
gevent.joinall([first, second])
print(order)
"""


def test_under_gevent_a_request_lets_the_waiting_one_start_first():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(["first arrives", "second arrives", "first handled", "second handled"])


def test_outside_gevent_it_does_nothing():
    from web.middleware import TakeTurns

    turns = TakeTurns()
    assert turns._yield is None
    turns.process_request(None, None)  # no hub to yield to, nothing to wait for
