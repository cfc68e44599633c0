"""The PostgreSQL databases and Redis databases of this test process, when pytest-xdist
runs the suite in several processes at once (`bin/test -n 2`): each process gets its own.

Run without xdist, the suite uses the URLs it is given (TEST_DATABASE_URL and friends, or
their defaults) as they are. xdist's process N (`PYTEST_XDIST_WORKER=gwN`) uses
- the database named with `_gwN` appended (`clinic_test` -> `clinic_test_gw0`; the
  siblings some tests create append to that name, so they are its own too);
- the Redis database numbered `2*N` below the suite's (`/15` -> 15, 13, 11, ...), and so
  below the fuzz test's (by default the suite's number minus one: 14, 12, 10, ...);
- the relay test's Redis database numbered `N` below its own (`/7` -> 7, 6, 5, ...).
`check_numbers` refuses a run whose processes would share or run out of Redis databases.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse, urlunparse

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/clinic_test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
DEFAULT_RELAY_REDIS_URL = "redis://127.0.0.1:6379/7"
#: Redis databases a process steps down per xdist process: the suite's and the fuzz test's
#: interleave (2), the relay test's has its own range (1).
STRIDES = {"suite": 2, "fuzz": 2, "relay": 1}
REDIS_DATABASES = 16  # redis-server's default `databases`


def worker_index() -> int | None:
    """N of this xdist process (`gwN`), None when xdist does not run the suite."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def engine_threads() -> int:
    """Threads per whisper.cpp engine in this test process and the workers it starts: the
    service's default (2) run alone; one under xdist, where the processes are the
    parallelism. Two threads each in three processes on two cores spin and wait at
    whisper.cpp's barriers for a partner that is not scheduled (measured in the suite: a
    3 s transcription took 44 s of CPU beside the others). One thread or two compute the
    same transcript (tests/test_transcription.py checks it)."""
    return 1 if worker_index() is not None else 2


def database_url(url: str, index: int | None) -> str:
    if index is None:
        return url
    parts = urlparse(url)
    return urlunparse(parts._replace(path=f"{parts.path.rstrip('/')}_gw{index}"))


def redis_number(url: str) -> int:
    return int(urlparse(url).path.lstrip("/") or 0)


def redis_url(url: str, index: int | None, stride: int) -> str:
    if index is None:
        return url
    parts = urlparse(url)
    return urlunparse(parts._replace(path=f"/{redis_number(url) - stride * index}"))


def sibling_redis(url: str) -> str:
    """The Redis database numbered one below `url`'s (wrapping at 0)."""
    parts = urlparse(url)
    return urlunparse(parts._replace(path=f"/{(redis_number(url) - 1) % REDIS_DATABASES}"))


def base_urls() -> dict[str, str]:
    """The Redis URLs the run was given (or their defaults), before any per-process step."""
    suite = os.environ.get("TEST_REDIS_URL", DEFAULT_REDIS_URL)
    return {
        "suite": suite,
        "fuzz": os.environ.get("TEST_FUZZ_REDIS_URL") or sibling_redis(suite),
        "relay": os.environ.get("TEST_RELAY_REDIS_URL", DEFAULT_RELAY_REDIS_URL),
    }


def check_numbers(processes: int) -> None:
    """Refuse (ValueError, saying why) a run of `processes` xdist processes whose Redis
    databases would collide or fall below 0."""
    used: dict[tuple[str, int], str] = {}
    for index in range(processes):
        for kind, url in base_urls().items():
            derived = redis_url(url, index, STRIDES[kind])
            parts = urlparse(derived)
            number = redis_number(derived)
            where = (f"{parts.hostname}:{parts.port or 6379}", number)
            if number < 0 or where in used:
                raise ValueError(
                    f"{processes} test processes need more Redis databases than TEST_REDIS_URL, "
                    f"TEST_FUZZ_REDIS_URL and TEST_RELAY_REDIS_URL leave apart (gw{index}'s {kind} database "
                    f"{number} {'is below 0' if number < 0 else 'is also ' + used[where]}): run fewer "
                    "processes (-n) or move those URLs' numbers apart"
                )
            used[where] = f"gw{index}'s {kind} database"
