"""pytest plugin: what each test needs beyond PostgreSQL and Redis, and the fast tier.

The slow parts, each a marker: `gunicorn` (the web process as the Procfile runs it, or
bin/run), `rq_worker` (a worker process, `python manage.py worker`, or bin/run), `engine`
(whisper.cpp with a model loaded), `browser` (headless Chromium driven by Playwright),
`seaweedfs` (a SeaweedFS server, the S3 backend), `packet_loss` (iptables dropping a
port's packets, which takes root). A fixture that starts one says so where
it is defined:

    @pytest.fixture(scope="module")
    @needs("gunicorn")
    def service(...): ...

and every test using it, directly or through other fixtures, gets that part's marker and
`slow`; a test that starts a part in its own body carries the marker itself
(`pytestmark = pytest.mark.gunicorn`, or `pytest.param(..., marks=...)`).

`bin/test --fast` (pytest `--fast`) runs the tests that need none of them (`-m "not slow"`)
and, so that a test the markers missed cannot slip in, refuses to start any of those parts
(the test fails, naming the part and how to mark it).

xdist: each test is handed out alone, in the order below, and a module-scoped fixture
starts its part once in each process that runs one of the module's tests. Grouping a
module's tests in one process (`xdist_group` with pytest 9.1; pytest 9.2's node ids keep
pytest-xdist 3.8 from grouping, pytest-dev/pytest-xdist#1386) was measured slower on two
cores, 21 min 25 s against 18 min 22 s and 18 min 39 s for `.ci/run`: the fault module and
bin/run's runs then queued in one process each for the engine's lock, the cores idle a
sixth of the run, and the parts started once saved no CPU. A test
marked `alone` (it bounds the time CPU-heavy work takes: a transcription stopped at its
deadline, bin/run stopping) runs while no test of another process needs the engine or a
worker (a lock file shared by the processes: such tests take it shared, an `alone` one
exclusive, waiting its turn fairly); they are handed out after the other slow tests.
"""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from tests.support import isolation

#: marker -> what it stands for (pytest --markers); a test with any of them is `slow`.
PARTS = {
    "gunicorn": "the web process as the Procfile runs it (gunicorn), or bin/run",
    "rq_worker": "an RQ worker process (python manage.py worker), or bin/run",
    "engine": "the transcription engine (whisper.cpp) with a model loaded",
    "browser": "a headless Chromium driven by Playwright",
    "seaweedfs": "a SeaweedFS server (the S3 backend)",
    "packet_loss": "packets dropped with iptables (root)",
}

F = TypeVar("F", bound=Callable[..., Any])


def needs(*parts: str) -> Callable[[F], F]:
    """Declare, on a fixture's function, the slow parts it starts (below `@pytest.fixture`)."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; known: {sorted(PARTS)}")

    def mark(function: F) -> F:
        function.__needs__ = frozenset(getattr(function, "__needs__", ())) | set(parts)  # type: ignore[attr-defined]
        return function

    return mark


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="only the tests that need no gunicorn, worker process, transcription engine, browser or "
        "SeaweedFS (and refuse to start any of them)",
    )


#: Whether this run is `--fast` (set at configure, before the test modules are imported):
#: property tests draw fewer examples there (the full suite draws them all).
FAST = False


def pytest_configure(config: pytest.Config) -> None:
    global FAST
    FAST = bool(config.getoption("fast"))
    config.addinivalue_line("markers", "slow: needs one of the parts below (derived; --fast leaves it out)")
    config.addinivalue_line(
        "markers",
        "alone: bounds the time of CPU-heavy work: in parallel, runs while no "
        "other process runs a test needing the engine or a worker",
    )
    config.addinivalue_line(
        "markers",
        "long: a long time in a test of its own (minutes of the labelled set through the "
        "engine, a two-minute outage, TCP's guards waited out): in parallel, handed out "
        "before the other slow tests",
    )
    for name, what in PARTS.items():
        config.addinivalue_line("markers", f"{name}: needs {what}")


def _parts_of(item: pytest.Item) -> set[str]:
    """The parts `item` needs: its own markers' and its fixtures'."""
    parts = {mark.name for mark in item.iter_markers() if mark.name in PARTS}
    info = getattr(item, "_fixtureinfo", None)
    for name in info.names_closure if info else ():
        for fixturedef in info.name2fixturedefs.get(name, ())[-1:]:
            parts |= getattr(fixturedef.func, "__needs__", frozenset())
    return parts


@pytest.hookimpl(tryfirst=True)  # before -m selects on the markers added here
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = _parts_of(item)
        for name in sorted(parts):
            item.add_marker(name)
        if parts:
            item.add_marker("slow")
    if isolation.worker_index() is not None:
        # In parallel, handed out in this order (bin/test turns xdist's own reordering off):
        # the `long` tests first (minutes each: started late, one of them was the run's tail,
        # the other processes idle); then the other slow tests; then the `alone` ones; the
        # quick ones last, filling the processes as the slow ones end. An `alone` test waits
        # for every test in flight that holds the engine lock, and meanwhile keeps the others
        # from taking it: handed out first, it waited behind a long test that had just begun
        # (139 s and 147 s, two processes idle). Handed out last but the quick tests, it
        # waits for the slow tests in flight, and the other processes go on with quick tests,
        # which take no lock.
        slow = {item.module.__name__ for item in items if any(item.iter_markers("slow"))}

        def rank(item: pytest.Item) -> int:
            if item.get_closest_marker("long"):
                return 0
            if item.get_closest_marker("alone"):
                return 2
            return 1 if item.module.__name__ in slow else 3

        items.sort(key=rank)
    if config.getoption("fast"):
        kept = [item for item in items if not any(item.iter_markers("slow"))]
        deselected = [item for item in items if any(item.iter_markers("slow"))]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        items[:] = kept


# --fast: the parts refuse to start.

#: Words of a command line that start one of the parts.
_COMMANDS: tuple[tuple[str, Callable[[list[str]], bool]], ...] = (
    ("gunicorn", lambda words: any(w.endswith("gunicorn") or w == "wsgi:app" or w.endswith("bin/run") for w in words)),
    ("rq_worker", lambda words: any(w.endswith("manage.py") for w in words) and "worker" in words),
    ("browser", lambda words: any("playwright" in w or w.endswith("chromium") for w in words)),
    ("seaweedfs", lambda words: any(w.endswith("/weed") or w == "weed" for w in words)),
    ("packet_loss", lambda words: any(w.endswith("iptables") for w in words)),
)


class NotInFastTier(Exception):
    def __init__(self, part: str) -> None:
        super().__init__(
            f"this test starts {PARTS[part]}, which the fast tier (--fast) does without: mark the fixture that "
            f"starts it (@needs({part!r}), tests/support/tiers.py) or the test (@pytest.mark.{part})"
        )


def _refuse_slow_parts() -> None:
    base = subprocess.Popen

    class Guarded(base):  # type: ignore[valid-type, misc]
        def __init__(self, args, *rest, **kwargs):  # type: ignore[no-untyped-def]
            words = [str(a) for a in ([args] if isinstance(args, (str, bytes)) else args)]
            for part, starts in _COMMANDS:
                if starts(words):
                    raise NotInFastTier(part)
            super().__init__(args, *rest, **kwargs)

    subprocess.Popen = Guarded  # type: ignore[misc]

    from voicemail.transcription import engines

    def refused(*_: object, **__: object) -> None:
        raise NotInFastTier("engine")

    for engine in engines.ENGINES.values():
        engine.__init__ = refused  # type: ignore[method-assign]


def pytest_sessionstart(session: pytest.Session) -> None:
    if session.config.getoption("fast"):
        _refuse_slow_parts()


# In parallel: `alone` tests against the engine's and the workers' CPU.

#: Parts whose tests load the CPU (whisper.cpp transcribing, in the test or in a worker).
HEAVY = ("engine", "rq_worker")


@pytest.fixture(autouse=True)
def _turns(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    alone = request.node.get_closest_marker("alone") is not None
    heavy = any(request.node.get_closest_marker(part) for part in HEAVY)
    if isolation.worker_index() is None or not (alone or heavy):
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent  # every xdist process's basetemp is beside this one's
    with open(shared / "turnstile.lock", "a") as turnstile, open(shared / "heavy.lock", "a") as lock:
        # The turnstile: an `alone` test holds it while it waits and runs, so heavy tests
        # arriving meanwhile queue behind it instead of keeping the shared lock taken.
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
