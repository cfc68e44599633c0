"""Each pytest-xdist process's own databases and Redis numbers (tests/support/isolation.py):
the names stay `clinic_test*`, the defaults of one process are the suite's defaults, and no
two processes, nor the fuzz and relay tests' databases, share a Redis number."""

from __future__ import annotations

import pytest

from tests.support import isolation


@pytest.fixture
def defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TEST_REDIS_URL", "TEST_FUZZ_REDIS_URL", "TEST_RELAY_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)


def test_without_xdist_the_urls_are_used_as_given():
    assert isolation.database_url(isolation.DEFAULT_DATABASE_URL, None) == isolation.DEFAULT_DATABASE_URL
    assert isolation.redis_url(isolation.DEFAULT_REDIS_URL, None, 2) == isolation.DEFAULT_REDIS_URL


def test_each_process_has_its_own_database_and_redis_numbers(defaults):
    base = isolation.base_urls()
    assert base == {
        "suite": "redis://127.0.0.1:6379/15",
        "fuzz": "redis://127.0.0.1:6379/14",
        "relay": "redis://127.0.0.1:6379/7",
    }
    names = [isolation.database_url(isolation.DEFAULT_DATABASE_URL, n).rsplit("/", 1)[1] for n in range(3)]
    assert names == ["clinic_test_gw0", "clinic_test_gw1", "clinic_test_gw2"]
    numbers = {
        kind: [isolation.redis_number(isolation.redis_url(url, n, isolation.STRIDES[kind])) for n in range(4)]
        for kind, url in base.items()
    }
    assert numbers == {"suite": [15, 13, 11, 9], "fuzz": [14, 12, 10, 8], "relay": [7, 6, 5, 4]}
    isolation.check_numbers(4)


def test_a_run_whose_processes_would_share_a_redis_database_is_refused(defaults, monkeypatch):
    with pytest.raises(ValueError, match="gw4's suite database 7 is also gw0's relay database"):
        isolation.check_numbers(5)
    monkeypatch.setenv("TEST_REDIS_URL", "redis://127.0.0.1:6379/2")
    with pytest.raises(ValueError, match="below 0"):
        isolation.check_numbers(2)
