"""Wake-ups a thread can wait on with `poll`, each a pipe: a flag that a signal handler may
raise (`Flag`), and a wake-up that any thread may set again and again and its one waiter
clears (`WakeUp`).

A pipe, so that a waiter can watch it in one `poll` together with sockets (the relay
watches its LISTEN connection beside its wake-up). And a pipe, not a `threading.Event`,
for what a signal handler raises: a Python signal handler runs in the main thread,
between two bytecodes of whatever that thread was doing. `threading.Event.set` takes the
lock of the Event's condition, which the main thread itself holds for a few bytecodes
inside `Event.wait`: a stop signal landing there waits for a lock only its own thread can
release, and the process hangs for good.
`Flag` takes no lock: `set` flips a boolean and writes one byte to a pipe (a system call,
safe in a handler), and `wait` blocks in `poll` on that pipe, which a signal interrupts
and which returns as soon as the byte is there, in any thread.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from typing import Self


class _Pipe:
    """A pipe opened by its creator's process: `_poke` writes a byte (no lock taken, a
    no-op once closed or in a forked child, whose pipe is still the parent's: the parent's
    waiters would wake to nothing and poll again at once, for ever), `fileno` is the end to
    `poll`. Holds two descriptors: `close` it when done (or use `with`)."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def _poke(self) -> None:
        if self._write < 0 or os.getpid() != self._pid:
            return
        with contextlib.suppress(BlockingIOError):  # a full pipe: the waiters are woken already
            os.write(self._write, b"\0")

    def fileno(self) -> int:
        """The descriptor that turns readable once set (for `poll`, `select`)."""
        return self._read

    def close(self) -> None:
        # The write end is forgotten before it is closed: a handler that runs in between
        # must not write to a descriptor number the process may hand out again.
        write, self._write = self._write, -1
        read, self._read = self._read, -1
        for fd in (write, read):
            if fd >= 0:
                os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Flag(_Pipe):
    """Set once, never cleared."""

    def __init__(self) -> None:
        self._set = False
        super().__init__()

    def set(self) -> None:
        """Raise the flag: no lock taken, so a signal handler may call it at any instant."""
        self._set = True
        self._poke()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the flag is set, waiting up to `timeout` seconds (None: for ever)."""
        return wait_any([self], timeout) is not None


class WakeUp(_Pipe):
    """Set from any thread, any number of times; the one waiter `poll`s its `fileno` and
    `clear`s it once woken. A set while the waiter is busy stays pending: none is lost."""

    def set(self) -> None:
        self._poke()

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass


def wait_any(flags: list[Flag], timeout: float | None = None) -> Flag | None:
    """The first of `flags` found set, waiting up to `timeout` seconds (None: for ever);
    None when none was set in time. A signal handler that runs meanwhile in this thread
    (the main thread's own stop signal) sets its flag and the wait sees it at once."""
    end = None if timeout is None else time.monotonic() + timeout
    # poll, not select: a process with many files open may get a pipe numbered past
    # select's 1024.
    poller = select.poll()
    for flag in flags:
        poller.register(flag.fileno(), select.POLLIN)
    while True:
        for flag in flags:
            if flag.is_set():
                return flag
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            return None
        # poll resumes after a signal handler returns (PEP 475) with the time left; the
        # handler's byte makes the pipe readable, so it returns then.
        poller.poll(None if left is None else max(1, round(left * 1000)))
