"""Peak RSS of decoding the hostile 25 MiB recordings, one child process each.

    .venv/bin/python bench/recording_length_bench.py [--limit 1200] [--no-whole]

The recordings are made as the tests make them (`tests/support/hostile_audio.py`). For
each, in a fresh child (VmHWM; ru_maxrss would carry the parent's over the exec):

* `whole`: `load_audio(path)`, no limit: what the worker did before decoding was bounded (decoded
  whole, resampled once) and, in a tree with the change, the block decoder's cost of the
  whole file;
* `limited`: `load_audio(path, max_seconds=limit)`, what the worker does now (skipped in
  a tree without the parameter: run this script in a checkout of the base commit for the
  "before" figures).

Prints seconds, peak RSS (MB) and the outcome per file and mode.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import hostile_audio  # noqa: E402

CHILD = """
import inspect, json, sys, time
from voicemail import transcription
kwargs = {}
if sys.argv[2] == "limited":
    if "max_seconds" not in inspect.signature(transcription.load_audio).parameters:
        print(json.dumps({"outcome": "not in this tree"})); sys.exit(0)
    kwargs["max_seconds"] = float(sys.argv[3])
started = time.perf_counter()
try:
    outcome = f"decoded {transcription.load_audio(sys.argv[1], **kwargs).size / 16000:.0f} s"
except transcription.TranscriptionError as exc:
    outcome = f"{type(exc).__name__}: {exc}"
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - started, "peak_mb": int(hwm) / 1024}))
"""

MAKERS = {
    "8 kHz 8-bit WAV": ("pcm8.wav", hostile_audio.pcm8_wav),
    "GSM 6.10 WAV": ("gsm.wav", hostile_audio.gsm_wav),
    "8 kbps MP3": ("8kbps.mp3", hostile_audio.mp3_8kbps),
    "MP3, lying Info frame": ("xing.mp3", hostile_audio.mp3_lying_xing),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=float, default=1200.0, help="RECORDING_MAX_SECONDS (default 1200)")
    parser.add_argument("--no-whole", action="store_true", help="skip decoding whole (minutes, gigabytes)")
    args = parser.parse_args()
    modes = ["limited"] + ([] if args.no_whole else ["whole"])
    with tempfile.TemporaryDirectory(prefix="hostile-") as folder:
        print(f"{'recording':24} {'length':>9} {'mode':8} {'time':>7} {'peak RSS':>9}  outcome")
        for label, (name, make) in MAKERS.items():
            path = Path(folder) / name
            seconds = make(path)
            for mode in modes:
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, str(path), mode, str(args.limit)],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                if done.returncode:
                    print(f"{label:24} {seconds:8.0f}s {mode:8} failed: {done.stderr.strip()[-300:]}")
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                if "peak_mb" not in r:
                    print(f"{label:24} {seconds:8.0f}s {mode:8} {'':>7} {'':>9}  {r['outcome']}")
                    continue
                print(
                    f"{label:24} {seconds:8.0f}s {mode:8} {r['seconds']:6.2f}s {r['peak_mb']:6.0f} MB  {r['outcome']}"
                )


if __name__ == "__main__":
    main()
