"""Peak memory of real processes: VmHWM (the resident set's high-water mark) from procfs."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set so far, in MB (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_watched(argv: list[str], *, limit_mb: float, timeout: float, **popen: object) -> tuple[int, str, float]:
    """Run ``argv`` to its end, polling its peak RSS; killed once over ``limit_mb`` or past
    ``timeout`` seconds (so a run that would take gigabytes stops at the limit). Returns
    (exit code, its stdout, the highest peak RSS seen, MB). The child should print its own
    VmHWM last: a peak reached between the last poll and its exit is missed here."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **popen)  # type: ignore[call-overload]
    peak, deadline = 0.0, time.monotonic() + timeout
    while proc.poll() is None:
        peak = max(peak, peak_rss_mb(proc.pid))
        if peak > limit_mb or time.monotonic() > deadline:
            proc.kill()
            break
        time.sleep(0.02)
    out, _ = proc.communicate(timeout=30)
    return proc.wait(), out, peak
