"""What reached the disk, in order: `os.fsync` calls (by the path of the synced fd) and
`LocalStorage.delete` calls, recorded for the storage durability tests."""

from __future__ import annotations

import os

import pytest


def record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """From now on (until the test ends), every `os.fsync(fd)` appends ("fsync", the path of
    `fd`) and every `LocalStorage.delete(key)` appends ("delete", key) to the returned list."""
    from storage import LocalStorage

    events: list[tuple[str, str]] = []
    real_fsync, real_delete = os.fsync, LocalStorage.delete

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def delete(self: LocalStorage, key: str) -> None:
        events.append(("delete", key))
        real_delete(self, key)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(LocalStorage, "delete", delete)
    return events
