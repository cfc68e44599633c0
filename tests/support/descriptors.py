"""Descriptors numbered past what `select` accepts (1024), as a busy process gets them."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def numbered_past_select_limit() -> Iterator[None]:
    """Within the block, every new descriptor of this process is numbered past 1100: the
    lower numbers are all taken (by /dev/null, closed again after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    filler: list[int] = []
    try:
        while not filler or filler[-1] < 1100:
            filler.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
