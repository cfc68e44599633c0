"""A worker's children end with it (jobs/companions.py): the kernel's parent-death signal,
and, should it not come, the child's own watch of its parent.

Here the kernel's signal is switched off in the child (its `prctl` option made an invalid
one), so what ends the child is the watch alone. A real parent (a Python process) starts
the child and is SIGKILLed, as a PaaS kills the worker's process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT
from tests.support.servers import wait_until

# The child: ties itself to its parent with the kernel's signal disabled, records the stop
# signals it gets, and idles; `told` says whether a stop was already taken.
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from jobs import companions
    out, told = sys.argv[2], sys.argv[3] == "told"
    companions._PR_SET_PDEATHSIG = 0  # not an option: prctl refuses it, no kernel signal
    def stopped(signum, frame):
        with open(out, "a") as f:
            f.write("stop\\n")
    signal.signal(signal.SIGTERM, stopped)
    companions.die_with_parent(os.getppid(), told=(lambda: True) if told else None, check_every=0.1)
    with open(out, "a") as f:
        f.write("tied\\n")
    time.sleep(30)
""")

# The parent: starts the child, says its pid, and waits to be killed.
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
    print(child.pid, flush=True)
    time.sleep(60)
""")


def _family(tmp_path: Path, told: bool) -> tuple[subprocess.Popen, int, Path]:
    out = tmp_path / "child.out"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, str(ROOT), str(out), "told" if told else "not-told"],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(parent.stdout.readline())  # type: ignore[union-attr]
    assert wait_until(lambda: out.exists() and "tied" in out.read_text(), timeout=30)
    return parent, child, out


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_a_child_whose_parent_is_killed_is_stopped_by_its_watch_without_the_kernels_signal(tmp_path: Path) -> None:
    parent, child, out = _family(tmp_path, told=False)
    try:
        parent.kill()
        parent.wait(timeout=10)
        assert wait_until(lambda: "stop" in out.read_text(), timeout=10), out.read_text()
        assert out.read_text().count("stop") == 1
    finally:
        _kill(child)


def test_a_child_that_already_took_a_stop_is_not_signalled_again(tmp_path: Path) -> None:
    """An RQ worker told twice stops cold (its job cut off): the watch sends nothing when
    the process says a stop was taken (the kernel's signal came first)."""
    parent, child, out = _family(tmp_path, told=True)
    try:
        parent.kill()
        parent.wait(timeout=10)
        # The watch notices within 0.1 s and decides 0.1 s later; a signal would be written
        # at once. Three seconds is fifteen times that.
        assert not wait_until(lambda: "stop" in out.read_text(), timeout=3)
    finally:
        _kill(child)
