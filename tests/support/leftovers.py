"""pytest plugin: no process the suite started outlives it.

A process a test starts with the session's environment, as the suite starts gunicorn,
workers and their playback workers, bin/run, private Redis and PostgreSQL servers and
browsers, inherits this session's mark.
When the session ends, with every fixture torn down and every xdist process gone, the
controller looks for processes still carrying the mark: each is given a few seconds to
finish its exit, then killed and named, and the session fails. A process left running is a
stop that did not work (a playback worker once outlived its SIGKILLed parent, hung in its
stop, after a run that passed); and on a developer's machine it would run on, serving the
test queues, until the next reboot.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

#: The environment variable that marks the session's processes, and this session's value.
MARK = "CLINIC_TEST_SESSION"
#: How long a process found at the end may still take to exit before it counts as left.
EXIT_GRACE = 15.0

_LEFT = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--exit-grace",
        type=float,
        default=EXIT_GRACE,
        help="seconds the processes the tests started may take to exit once the session ends",
    )


def pytest_configure(config: pytest.Config) -> None:
    # xdist's processes inherit the controller's mark, and everything they start inherits it.
    if not hasattr(config, "workerinput"):
        os.environ[MARK] = uuid.uuid4().hex


def marked(session: str) -> dict[int, str]:
    """The processes other than this one whose environment carries `session`'s mark: pid ->
    command line."""
    wanted = f"{MARK}={session}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0") or not running(int(entry.name)):
                continue
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def running(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie, exited and not yet reaped by
    its parent, has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def left_behind(session: str, grace: float = EXIT_GRACE) -> dict[int, str]:
    """The marked processes still there after `grace` seconds, killed."""
    deadline = time.monotonic() + grace
    found = marked(session)
    while found and time.monotonic() < deadline:
        time.sleep(0.2)
        found = marked(session)
    for pid in found:
        with contextlib.suppress(OSError):  # gone meanwhile
            os.kill(pid, signal.SIGKILL)
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or not os.path.isdir("/proc") or MARK not in os.environ:
        return
    left = left_behind(os.environ[MARK], session.config.getoption("exit_grace"))
    session.config.stash[_LEFT] = sorted(left.items())
    if left and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    left = config.stash.get(_LEFT, [])
    if left:
        terminalreporter.section("processes left running by the tests", sep="=", red=True, bold=True)
        for pid, command in left:
            terminalreporter.write_line(f"{pid}: {command[:300]} (killed)")
        terminalreporter.write_line(f"FAILED: {len(left)} process(es) the tests started outlived the session", red=True)
