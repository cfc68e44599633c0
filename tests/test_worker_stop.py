"""The worker stops on SIGTERM whenever it comes, its start included.

`jobs.rq_worker.run` runs RQ's worker loop in this process, on the suite's Redis and a queue
of this test's own, as `python manage.py worker` runs it (without the scheduler, which
would fork this process). RQ installs its SIGTERM handler only after its start
(registering the worker, subscribing, starting the scheduler); a SIGTERM in between
was lost, and the worker ran until it was killed (bin/run's Ctrl-C right after the
worker registered waited out its 30 s stop timeout, then SIGKILLed it).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis
from rq import Queue, Worker

from jobs.rq_worker import ClinicWorker, run
from plumbing.descriptors import SELECT_LIMIT
from plumbing.wakeup import Flag, wait_any
from tests.conftest import REDIS_URL, ROOT
from tests.support import leftovers
from tests.support.descriptors import numbered_past_select_limit


class StoppedWhileStarting(ClinicWorker):
    """The SIGTERM arrives once the worker is registered (what `Worker.all` lists, and what
    bin/run's test waits for before its Ctrl-C) and before RQ's own handler is in place."""

    def bootstrap(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().bootstrap(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_sigterm_during_the_start_stops_the_worker_before_it_takes_a_job():
    connection = redis.Redis.from_url(REDIS_URL)
    queue = Queue(f"stop-test-{os.getpid()}", connection=connection)
    job = queue.enqueue("builtins.len", "not taken")  # a stopped worker takes no job
    finished = threading.Event()

    def second_sigterm() -> None:
        # A lost SIGTERM leaves the worker waiting on its queue; this one (RQ's handler is
        # in place by now) ends it, so the test ends either way, failing on the time.
        if not finished.wait(20):
            os.kill(os.getpid(), signal.SIGTERM)

    watchdog = threading.Thread(target=second_sigterm, daemon=True)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    watchdog.start()
    try:
        code = run(StoppedWhileStarting, [queue], with_scheduler=False, logging_level="INFO")
    finally:
        finished.set()
        watchdog.join(timeout=5)
        elapsed = time.monotonic() - started
        job.delete()
    assert code == 0
    assert elapsed < 10, f"the worker ran {elapsed:.1f} s after its SIGTERM"
    assert not [w for w in Worker.all(connection=connection) if w.pid == os.getpid()], "its death registered"
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers, "this process's handlers restored"


#: Set while the test below forks the scheduler: the fork's first moment, in the child.
AT_BIRTH = threading.Event()


def _sigterm_at_birth() -> None:
    if AT_BIRTH.is_set():  # in the fresh scheduler, before any of its own code has run
        os.kill(os.getpid(), signal.SIGTERM)


os.register_at_fork(after_in_child=_sigterm_at_birth)


class SchedulerSignalledAtBirth(ClinicWorker):
    """The scheduler gets a SIGTERM at the first moment of its life, still on the handlers
    the fork copied from the worker (a worker stopping, or dying, right after the fork:
    `stop_scheduler` or the parent-death signal). It must end on it; then the worker is
    told to stop too."""

    seen: dict[str, bool] = {}

    def _start_scheduler(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        AT_BIRTH.set()
        try:
            super()._start_scheduler(*args, **kwargs)
        finally:
            AT_BIRTH.clear()
        process = self.scheduler._process if self.scheduler is not None else None
        self.seen["forked"] = process is not None
        if process is not None:
            process.join(10)
            self.seen["ended on its own SIGTERM"] = not process.is_alive()
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_scheduler_told_to_stop_at_its_fork_stops():
    connection = redis.Redis.from_url(REDIS_URL)
    queue = Queue(f"stop-test-scheduler-{os.getpid()}", connection=connection)
    started = time.monotonic()
    code = run(SchedulerSignalledAtBirth, [queue], with_scheduler=True, logging_level="INFO")
    elapsed = time.monotonic() - started
    assert code == 0
    assert SchedulerSignalledAtBirth.seen == {"forked": True, "ended on its own SIGTERM": True}
    assert elapsed < 10, f"the worker and its scheduler stopped {elapsed:.1f} s after the SIGTERM"


class SignalledInAFinalizer(ClinicWorker):
    """Ctrl-C while the garbage collector runs a finalizer of the worker's start (redis-py's
    `ConnectionPool.__del__`, seen in bin/run's log): after RQ's handlers are in place,
    before the first wait for a job."""

    signalled = False

    def check_for_suspension(self, burst: bool) -> None:
        if not SignalledInAFinalizer.signalled:
            SignalledInAFinalizer.signalled = True

            class Finalized:
                def __del__(self) -> None:
                    os.kill(os.getpid(), signal.SIGINT)
                    sum(range(10_000))  # the handler runs in here, inside the finalizer

            Finalized()  # dropped at once: CPython finalizes it on this line
        super().check_for_suspension(burst)


def test_a_stop_signal_during_a_finalizer_stops_the_worker_and_prints_no_traceback(monkeypatch):
    # An exception raised inside a finalizer is "unraisable": Python prints it with a
    # traceback and drops it. RQ's handler raises its StopRequested wherever the worker is
    # when not busy; only the wait for a job may take it.
    unraisable: list[object] = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    connection = redis.Redis.from_url(REDIS_URL)
    queue = Queue(f"stop-test-finalizer-{os.getpid()}", connection=connection)
    job = queue.enqueue("builtins.len", "not taken")  # a stopped worker takes no job
    started = time.monotonic()
    try:
        code = run(SignalledInAFinalizer, [queue], with_scheduler=False, logging_level="INFO")
    finally:
        elapsed = time.monotonic() - started
        taken = job.get_status(refresh=True)
        job.delete()
    assert SignalledInAFinalizer.signalled
    assert [type(u.exc_value).__name__ for u in unraisable] == []  # type: ignore[attr-defined]
    assert code == 0 and taken == "queued"
    assert elapsed < 10, f"the worker ran {elapsed:.1f} s after its SIGINT"


#: A worker in a process of its own (a hang must not hang the suite), stopped by a SIGTERM
#: during its start; a second SIGTERM arrives while the first one's handler records the stop
#: (at its reading of the clock), on the same thread: a platform signalling every process of
#: the worker and the parent signalling its playback worker, a moment apart.
SIGNALLED_WHILE_RECORDING_A_STOP = """
import logging, os, signal, sys, time
import redis
from rq import Queue
from jobs import stopping
from jobs.rq_worker import ClinicWorker, run

class Clock:
    readings = 0
    def __getattr__(self, name):
        return getattr(time, name)
    def monotonic(self):
        Clock.readings += 1
        if Clock.readings == 1:
            signal.raise_signal(signal.SIGTERM)  # its handler runs before this returns
        return time.monotonic()

class Stopped(ClinicWorker):
    def bootstrap(self, *args, **kwargs):
        super().bootstrap(*args, **kwargs)
        stopping.time = Clock()
        os.kill(os.getpid(), signal.SIGTERM)

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
queue = Queue(sys.argv[2], connection=redis.Redis.from_url(sys.argv[1]))
code = run(Stopped, [queue], with_scheduler=False, logging_level="INFO", stop_seconds=60)
print("clock readings while stopping:", Clock.readings, flush=True)
sys.exit(code)
"""


def _script(source: str, *args: str, timeout: float, hung: str) -> subprocess.CompletedProcess[str]:
    """`source` run by a Python of its own in the repository (a worker's process: its
    signals, its handlers); a hang fails the test with what it printed so far."""
    try:
        return subprocess.run(
            [sys.executable, "-c", source, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as still:
        raise AssertionError(f"{hung}: still running after {timeout:.0f} s: {still.stdout!r}") from None


def test_a_second_stop_signal_while_the_first_is_recorded_still_stops_the_worker_at_once():
    """It hung for good: the second handler waited on a lock the interrupted first one held
    (a playback worker outlived its parent so, in the suite)."""
    queue = f"stop-test-twice-{os.getpid()}"
    job = Queue(queue, connection=redis.Redis.from_url(REDIS_URL)).enqueue("builtins.len", "not taken")
    started = time.monotonic()
    try:
        done = _script(SIGNALLED_WHILE_RECORDING_A_STOP, REDIS_URL, queue, timeout=30, hung="two SIGTERMs not taken")
    finally:
        taken = job.get_status(refresh=True)
        job.delete()
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clock readings while stopping: 1" in done.stdout, done.stdout  # the second signal came
    assert done.stdout.count("asked to stop") == 1, done.stdout  # recorded once, by the first
    assert taken == "queued"
    assert elapsed < 20, f"stopped {elapsed:.1f} s after its SIGTERMs"


def test_a_process_a_test_leaves_running_fails_the_session_and_is_killed(tmp_path):
    """The real plugin in a real pytest run: of two tests that start a process, the one
    that stops it passes quietly; the process the other leaves running is named, killed,
    and fails a session whose tests all passed."""
    pid_file = tmp_path / "left.pid"
    (tmp_path / "test_left.py").write_text(
        "import subprocess, sys\n"
        "def test_stops_what_it_starts():\n"
        "    proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "    proc.terminate(); proc.wait()\n"
        "def test_leaves_a_process_running():\n"
        "    proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(301)'])\n"
        f"    open({str(pid_file)!r}, 'w').write(str(proc.pid))\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "tests.support.leftovers", "-p", "no:cacheprovider"),
            *("--exit-grace", "1", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    left = int(pid_file.read_text())
    assert "2 passed" in run.stdout, run.stdout[-2000:]
    assert run.returncode == 1, run.stdout[-2000:]
    assert f"{left}: " in run.stdout and "time.sleep(301)" in run.stdout and "time.sleep(300)" not in run.stdout
    assert "1 process(es) the tests started outlived the session" in run.stdout
    assert not leftovers.running(left)


SIGNALLED_AT_EVERY_STEP_OF_THE_WAIT = r"""
import faulthandler, logging, os, signal, socket, sys, threading, time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq import Queue

from worker import wait_for_schema
from jobs.rq_worker import ClinicWorker, run
from plumbing.database import bind_database

logging.basicConfig(level=logging.WARNING)
# A port nothing listens on: every PING or connection fails at once, and the worker waits.
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
if sys.argv[1] == "redis":
    # No retries of its own: redis-py's backoff would spend seconds in each PING, not the stop.
    away = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))

    def waits_then_stops():
        return run(ClinicWorker, [Queue("never-reached", connection=away)], with_scheduler=False,
                   logging_level="WARNING", stop_seconds=30) == 0
else:  # the worker's wait for its database and schema, before it starts
    bind_database(f"postgresql://postgres@127.0.0.1:{port}/nowhere", pooled=False)

    def waits_then_stops():
        return wait_for_schema(logging.getLogger("worker"), every=1.0) is False

WATCHED = ("threading.py", os.path.join("plumbing", "wakeup.py"), os.path.join("jobs", "rq_worker.py"), "worker.py")


class At:
    # Counts the steps the main thread takes in the stop's own code (the waiting, the
    # handlers, the threads they start) once the wait has put its handler in place, and
    # sends SIGTERM to this process at step `k` (never, for k = 0).
    def __init__(self, k):
        self.k, self.steps = k, 0

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename.endswith(WATCHED) and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            self.steps += 1
            if self.steps == self.k:
                os.kill(os.getpid(), signal.SIGTERM)
        return self


def stop_at(tracer):
    faulthandler.dump_traceback_later(15, exit=True)  # a hang: every thread's stack, exit 1
    sys.settrace(tracer)
    try:
        stopped = waits_then_stops()
    finally:
        sys.settrace(None)
        faulthandler.cancel_dump_traceback_later()
    assert stopped


def when_blocked(tracer, blocked):
    # Calibration: the steps from the handler's installation until the main thread stops
    # stepping (it waits for Redis to come back), a whole round of the wait; then SIGTERM.
    last, still = -1, 0
    for _ in range(200):
        time.sleep(0.05)
        still = still + 1 if tracer.steps == last and last > 0 else 0  # started, then still
        last = tracer.steps
        if still == 4:
            break
    blocked.append(last)
    os.kill(os.getpid(), signal.SIGTERM)


signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the wait must put its own handler in place
calibration, blocked = At(0), []
threading.Thread(target=when_blocked, args=(calibration, blocked), daemon=True).start()
stop_at(calibration)
steps = blocked[0]
k = 1
while k <= steps:
    stop_at(At(k))
    print("stopped at step", k, flush=True)
    k += max(1, steps // 400)
print("steps swept:", steps, flush=True)
"""


@pytest.mark.parametrize("waiting_for", ["redis", "schema"])
def test_a_stop_signal_at_any_step_of_the_worker_waiting_for_redis_or_its_schema_stops_it(waiting_for: str):
    """A signal runs its handler between two steps of whatever the main thread does. The
    handler set a `threading.Event` whose lock the main thread holds inside `Event.wait`:
    landing there, the stop waited for ever. Swept here step by step over the wait's own
    code (threading's, the flag's, the worker's), each time in a fresh wait: `run()`'s for
    Redis, and the worker command's for its database and schema."""
    done = _script(SIGNALLED_AT_EVERY_STEP_OF_THE_WAIT, waiting_for, timeout=120, hung="a stop signal not taken")
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-4000:]
    swept = int(done.stdout.rsplit("steps swept:", 1)[1])
    assert swept >= 20, done.stdout[-500:]
    assert done.stdout.count("stopped at step") >= min(swept, 400)


def test_a_flag_raised_by_a_signal_handler_wakes_the_thread_waiting_on_it():
    """The main thread waits; the handler runs in it, between two of its steps."""
    with Flag() as flag:
        previous = signal.signal(signal.SIGUSR1, lambda *_: flag.set())
        try:
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            started = time.monotonic()
            assert flag.wait(30)
            assert time.monotonic() - started < 10
        finally:
            signal.signal(signal.SIGUSR1, previous)
        assert wait_any([flag], 0) is flag


def test_a_flag_not_raised_waits_out_its_timeout_and_a_closed_one_writes_nowhere(tmp_path):
    flag = Flag()
    numbers = {flag.fileno(), flag._write}
    assert not flag.wait(0.05) and wait_any([flag], 0) is None
    flag.close()
    # The lowest free numbers go first: these two take the pipe's (checked, not hoped).
    reused = [os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT) for name in ("a", "b")]
    try:
        flag.set()
    finally:
        for fd in reused:
            os.close(fd)
    assert set(reused) == numbers
    assert flag.is_set() and (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == b""


#: A worker whose job has no checkpoint (a sleep), SIGTERMed once the job runs, with a 3 s
#: grace: the keeper ends the process at the grace's end, whatever the main thread is in.
BUSY_PAST_ITS_GRACE = """
import logging, os, signal, sys, threading, time
import redis
from rq import Queue
from jobs.rq_worker import ClinicWorker, run

class Busy(ClinicWorker):
    def execute_job(self, job, queue):
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        print("job started", time.monotonic(), flush=True)
        return super().execute_job(job, queue)

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
queue = Queue(sys.argv[2], connection=redis.Redis.from_url(sys.argv[1]))
run(Busy, [queue], with_scheduler=False, logging_level="INFO", stop_seconds=3)
print("run returned", flush=True)
"""


def test_a_worker_still_busy_at_the_end_of_its_stop_grace_exits_there():
    queue = f"stop-test-grace-{os.getpid()}"
    job = Queue(queue, connection=redis.Redis.from_url(REDIS_URL)).enqueue("time.sleep", 60, job_timeout=120)
    try:
        done = _script(BUSY_PAST_ITS_GRACE, REDIS_URL, queue, timeout=50, hung="a worker outlived its grace")
    finally:
        job.delete()
    ended = time.monotonic()  # the same clock as the worker's, on Linux: the system's monotonic one
    lines = done.stdout.splitlines()
    started = float(next(x for x in lines if x.startswith("job started")).split()[-1])
    # SIGTERM 0.2 s into the job, the grace 3 s, the exit half a second before its end.
    assert 2.5 < ended - started < 6, (ended - started, done.stdout)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "still busy at the end of its 3 s stop grace: exiting now" in done.stdout, done.stdout
    assert "run returned" not in done.stdout and sum("asked to stop" in x for x in lines) == 1, done.stdout


def test_a_flag_raised_in_a_forked_child_does_not_wake_the_parent():
    """The child's copy is its own flag; a byte in the shared pipe would wake the parent's
    waiter to a flag not set, and its `poll` would return at once, again and again."""
    with Flag() as flag:
        child = os.fork()
        if child == 0:  # the child: raise its copy, then go
            flag.set()
            os._exit(0 if flag.is_set() else 1)
        assert os.waitpid(child, 0)[1] == 0
        assert not flag.wait(0.2) and not flag.is_set()
        readable, _, _ = select.select([flag], [], [], 0)
        assert readable == []


def test_a_flag_whose_pipe_is_numbered_past_selects_limit_still_wakes_its_waiter():
    """`select` refuses a descriptor from 1024 on; a worker with many files open gets one."""
    with numbered_past_select_limit(), Flag() as flag:
        assert flag.fileno() > SELECT_LIMIT
        threading.Timer(0.05, flag.set).start()
        assert flag.wait(30) and wait_any([flag], 0) is flag
