"""`bin/run`, the README's first command: taken ports, a process dying during the start,
and Ctrl-C.

Each run gets free ports and a `VAR_DIR` of its own (database, storage, logs, sample CA),
so the developer's `var/` and a `bin/run` they have running are left alone.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import redis
from rq import Worker

from tests.support import ROOT
from tests.support.log_audit import remember, watch
from tests.support.ports import free_port, listening
from tests.support.servers import wait_until

# A run that starts the service (gunicorn, the worker with its model) is `alone`: the Ctrl-C
# tests time the stop. A taken port stops bin/run before anything starts: those runs wait for
# no other process's work.
pytestmark = pytest.mark.gunicorn

BANNER = "Ctrl-C stops it."
LOGS = ("web.log", "worker.log", "redis.log", "sample.log", "mail.log")


def with_default_sigint(command: list[str]) -> list[str]:
    """`command`, run with SIGINT at its default disposition whatever this process has. A
    CI runner may start the suite with SIGINT ignored (as a shell does a background job),
    and an ignored signal stays ignored across fork and exec: bin/run would inherit it, and
    bash cannot trap a signal ignored on entry, so a terminal's Ctrl-C would not stop it.
    A terminal's bin/run has it at its default: so does the test's."""
    reset = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", reset, *command]


class Run:
    """`bin/run` in a process group of its own (as a terminal runs it: Ctrl-C is a SIGINT
    to that group), its output collected line by line from a thread. With `tee`, the
    group is the shell pipeline `bin/run ARGS 2>&1 | tee TEE`, Ctrl-C ending tee too."""

    def __init__(self, var_dir: Path, ports: dict[str, int], *args: str, tee: Path | None = None, **env: str) -> None:
        self.var_dir, self.ports = var_dir, ports
        environment = {
            **os.environ,
            **{name: str(port) for name, port in ports.items()},
            "VAR_DIR": str(var_dir),
            **env,
        }
        own = ("DATABASE_URL", "REDIS_URL", "PUBLIC_BASE_URL", "STORAGE_DIR", "SECRET_KEY", "SMTP_URL", "MAIL_FROM")
        for name in own:
            environment.pop(name, None)  # bin/run's own defaults, under VAR_DIR
        command = [str(ROOT / "bin" / "run"), *args]
        if tee is not None:
            command = ["bash", "-c", 'bin/run "$@" 2>&1 | tee "$TEE"', "bash", *args]
            environment["TEE"] = str(tee)
        self.proc = subprocess.Popen(
            with_default_sigint(command),
            cwd=ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def finish(self, timeout: float) -> int:
        """Its exit code; AssertionError (with its output) if it runs longer than `timeout`."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"bin/run still running after {timeout} s:\n{self.output}") from None
        self._reader.join(timeout=5)
        return code

    def stop(self) -> None:
        """Whatever happened: bin/run stops its children on SIGTERM; anything left over
        (bin/run itself killed) is found by its VAR_DIR and killed."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for pid in started_with(f"VAR_DIR={self.var_dir}"):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def started_with(variable: str) -> list[int]:
    """Pids of this user's processes whose environment holds `variable` (NAME=value)."""
    found = []
    wanted = variable.encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if wanted in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile, or another user's
                pass
    return found


@pytest.fixture
def ports() -> dict[str, int]:
    chosen: dict[str, int] = {}
    for name in ("PORT", "REDIS_PORT", "SAMPLE_PORT", "SMTP_PORT"):
        port = free_port()
        while port in chosen.values():
            port = free_port()
        chosen[name] = port
    return chosen


@contextmanager
def run(tmp_path: Path, ports: dict[str, int], *args: str, tee: Path | None = None, **env: str) -> Iterator[Run]:
    started = Run(tmp_path / "var", ports, *args, tee=tee, **env)
    try:
        yield started
    finally:
        started.stop()


def serving(started: Run) -> None:
    """Wait until the run serves: the banner printed, and the worker at work (model loaded,
    taking jobs, talking to Redis), as when a developer stops it; the web process, the
    sample server and Redis serve by then. Its logs and demo token join the log audit."""
    assert wait_until(lambda: BANNER in started.output or started.proc.poll() is not None, timeout=120, interval=0.1), (
        started.output
    )
    assert started.proc.poll() is None, started.output
    token = next(line for line in started.lines if line.startswith("Demo token")).split(": ", 1)[1].strip()
    remember(token, "bin/run's demo token")
    for log in LOGS:
        watch(started.var_dir / log)
    connection = redis.Redis(port=started.ports["REDIS_PORT"])
    assert wait_until(
        lambda: any("calls" in w.queue_names() for w in Worker.all(connection=connection)), timeout=120, interval=0.2
    ), (started.var_dir / "worker.log").read_text()[-3000:]
    connection.close()
    assert all(listening(port) for port in started.ports.values())


@pytest.mark.parametrize(
    "taken, args", [("PORT", ()), ("REDIS_PORT", ()), ("SMTP_PORT", ()), ("SAMPLE_PORT", ("--try-handoff",))]
)
def test_a_taken_port_is_named_with_its_variable_before_anything_starts(tmp_path, ports, taken, args):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[taken]))
        holder.listen()
        with run(tmp_path, ports, *args) as started:
            code = started.finish(timeout=20)  # checked before bin/setup: well under a second
    assert code != 0
    first = started.lines[0]
    assert f"port {ports[taken]} on 127.0.0.1 is taken" in first, started.output
    assert f"choose another port with {taken}" in started.output, started.output
    assert [line for line in started.lines if "is taken" in line] == [first], started.output  # only that one
    assert not any((tmp_path / "var" / log).exists() for log in LOGS), "nothing was started"


@pytest.mark.rq_worker
@pytest.mark.alone
def test_a_process_that_ends_during_the_start_is_named_with_its_log(tmp_path, ports):
    # gunicorn refuses its options: the web process exits at once, as on a port taken
    # between bin/run's check and its start.
    with run(tmp_path, ports, GUNICORN_CMD_ARGS="--workers=none") as started:
        code = started.finish(timeout=60)
    assert code == 1
    assert f"the web process (gunicorn on 127.0.0.1:{ports['PORT']}) exited (code" in started.output, started.output
    assert "before the service was ready" in started.output
    assert "--workers" in started.output.split("Last lines of", 1)[1], "the tail of web.log is shown"
    assert BANNER not in started.output
    assert not any(listening(port) for port in ports.values()), "the others were stopped"
    # Its own SECRET_KEY, made before anything started, for the owner's eyes only.
    key_file = tmp_path / "var" / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(key_file.read_text().strip()) >= 64


def test_the_ctrl_c_tests_give_bin_run_a_default_sigint_whatever_the_suite_was_started_with():
    """Started by a runner that ignores SIGINT, a shell still traps Ctrl-C as a terminal's
    bin/run does (without `with_default_sigint` it never sees it, and the tests below hang)."""
    trapping = ["bash", "-c", "trap 'exit 7' INT; kill -INT $$; sleep 1; exit 1"]
    runner = (
        "import signal, subprocess, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "sys.exit(subprocess.run(sys.argv[1:]).returncode)"
    )
    assert subprocess.run([sys.executable, "-c", runner, *with_default_sigint(trapping)], timeout=30).returncode == 7
    assert subprocess.run([sys.executable, "-c", runner, *trapping], timeout=30).returncode == 1, (
        "the ignored SIGINT is inherited: what the helper undoes"
    )


@pytest.mark.rq_worker
@pytest.mark.alone
def test_ctrl_c_stops_every_process_and_leaves_clean_logs(tmp_path, ports):
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    (var_dir / "worker.log").write_text("the previous run's log\n")
    key = "the-key-an-earlier-start-made-" + "k" * 34
    (var_dir / "secret_key").write_text(key + "\n")  # kept from a previous start: used, not replaced
    with run(tmp_path, ports, "--try-handoff") as started:
        serving(started)
        assert started_with(f"SECRET_KEY={key}"), "the web process and the worker run on the kept key"
        # The demo key expires in 7 days: its notice goes to the demo admin, through the
        # local SMTP server, which keeps it in var/mail/.
        assert "var/mail" in started.output or str(var_dir / "mail") in started.output, started.output
        assert wait_until(lambda: list((var_dir / "mail").glob("*.eml")), timeout=60, interval=0.2), (
            var_dir / "worker.log"
        ).read_text()[-3000:]
        kept = (var_dir / "mail").glob("*.eml").__next__().read_text()
        assert "demo-switchboard" in kept and "To: admin@" in kept, kept[:2000]

        os.killpg(started.proc.pid, signal.SIGINT)  # the terminal's Ctrl-C
        code = started.finish(timeout=45)
    assert code in (-signal.SIGINT, 128 + signal.SIGINT), started.output
    assert "Stopped." in started.output, started.output
    assert not any(listening(port) for port in ports.values())
    assert started_with(f"VAR_DIR={var_dir}") == [], "no process of the run is left"
    for log in ("web.log", "worker.log", "redis.log", "sample.log"):
        text = (var_dir / log).read_text()
        assert "Traceback" not in text, f"{log}:\n{text[-3000:]}"
    worker_log = (var_dir / "worker.log").read_text()
    assert "unreachable" not in worker_log and "waiting for Redis" not in worker_log, worker_log[-3000:]
    assert (var_dir / "worker.log.1").read_text() == "the previous run's log\n"
    assert (var_dir / "secret_key").read_text() == key + "\n"


@pytest.mark.rq_worker
@pytest.mark.alone
def test_ctrl_c_during_the_start_stops_what_was_started(tmp_path, ports):
    # gunicorn told to stop while its workers still import the app waits out its graceful
    # timeout (30 s); bin/run gives a web process that never answered 5 s.
    web_log = tmp_path / "var" / "web.log"
    with run(tmp_path, ports, "--try-handoff") as started:
        assert wait_until(
            lambda: (web_log.exists() and "Booting worker" in web_log.read_text()) or started.proc.poll() is not None,
            timeout=120,
            interval=0.05,
        ), started.output
        os.killpg(started.proc.pid, signal.SIGINT)
        code = started.finish(timeout=20)
    assert code in (-signal.SIGINT, 128 + signal.SIGINT), started.output
    assert BANNER not in started.output
    assert not any(listening(port) for port in ports.values())
    assert started_with(f"VAR_DIR={tmp_path / 'var'}") == [], "no process of the run is left"


@pytest.mark.rq_worker
@pytest.mark.alone
def test_ctrl_c_stops_every_process_when_the_output_goes_through_tee(tmp_path, ports):
    # `bin/run 2>&1 | tee run.log`: the terminal's SIGINT reaches tee too, which ends at
    # once; bin/run then stops its children with nowhere left to write "Stopping".
    var_dir, tee_log = tmp_path / "var", tmp_path / "run.log"
    with run(tmp_path, ports, "--try-handoff", tee=tee_log) as started:
        serving(started)  # (run.log, the terminal's copy, shows the demo token by design: not audited)

        os.killpg(started.proc.pid, signal.SIGINT)  # the terminal's Ctrl-C, to bin/run and tee
        code = started.finish(timeout=45)  # the pipeline's end: bin/run's too
    assert code in (-signal.SIGINT, 128 + signal.SIGINT), started.output
    assert BANNER in tee_log.read_text()
    assert not any(listening(port) for port in ports.values())
    assert started_with(f"VAR_DIR={var_dir}") == [], "no process of the run is left"
    for log in LOGS:
        text = (var_dir / log).read_text()
        assert "Traceback" not in text, f"{log}:\n{text[-3000:]}"
