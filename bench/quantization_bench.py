"""Quantized whisper.cpp models against the f16 one: speed, accuracy, memory.

    .venv/bin/python bench/quantization_bench.py [--name base] [--types q8_0,q5_0] [--repeat 2] [--threads 2]

Builds ``var/models/ggml-<name>.bin`` and its quantized variants if missing (timing
each build), then runs every model in its own child process over the English clips of
``tests/audio`` (labels.json; language None or "en"), through
``transcription.get_transcriber("pywhispercpp", model, threads).transcribe(clip, "en")``,
the call a worker makes. For each clip the best of ``--repeat`` runs counts (the
machine is shared). Prints, per model and against f16 measured in the same run:

* total transcription seconds over the clips and the real-time factor
  (processing seconds / audio seconds);
* word error rate over the speech clips: summed word edits / summed reference words
  (``voicemail.word_error.word_error_rate``), and
  the same with each clip's edits capped at its word count ("capped"), since one
  hallucinated loop can add hundreds of edits;
* load seconds and peak RSS of the child (VmHWM: ru_maxrss would carry the parent's
  over the exec).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools import whisper_convert as wc  # noqa: E402

AUDIO = ROOT / "tests" / "audio"


def _peak_rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s*(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


def child(model: str, threads: int, repeat: int) -> dict[str, Any]:
    from voicemail import transcription as tx
    from voicemail.word_error import word_error_rate as wer

    started = time.perf_counter()
    t = tx.get_transcriber("pywhispercpp", model, threads)
    load_s = time.perf_counter() - started
    clips = [x for x in json.loads((AUDIO / "labels.json").read_text()) if x["language"] in (None, "en")]
    rows = []
    for label in clips:
        seconds, text, duration = [], "", 0.0
        for _ in range(repeat):
            began = time.perf_counter()
            result = t.transcribe(str(AUDIO / label["file"]), "en")
            seconds.append(time.perf_counter() - began)
            text, duration = result.text, result.duration
        errors, words = wer(label["text"], text) if label["kind"] == "speech" else (0, 0)
        rows.append(
            {
                "file": label["file"],
                "duration": duration,
                "seconds": min(seconds),
                "errors": errors,
                "words": words,
                "text": text,
            }
        )
    return {
        "model": Path(model).name,
        "size_mb": Path(model).stat().st_size / 1e6,
        "load_s": load_s,
        "rss_mb": _peak_rss_mb(),
        "rows": rows,
    }


def report(results: list[dict[str, Any]], builds: dict[str, float]) -> None:
    print(
        f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; best of repeats per clip; "
        f"{len(results[0]['rows'])} English clips, {sum(x['duration'] for x in results[0]['rows']):.1f} s of audio\n"
    )
    head = (
        f"{'model':22s} {'size MB':>8s} {'build s':>8s} {'load s':>7s} {'transcribe s':>13s} {'vs f16':>7s} "
        f"{'RTF':>7s} {'WER':>7s} {'edits/words':>12s} {'capped':>7s} {'peak RSS MB':>12s} {'vs f16':>7s}"
    )
    print(head)
    print("-" * len(head))
    ref = results[0]
    ref_s = sum(x["seconds"] for x in ref["rows"])
    for r in results:
        total = sum(x["seconds"] for x in r["rows"])
        audio = sum(x["duration"] for x in r["rows"])
        errors, words = sum(x["errors"] for x in r["rows"]), sum(x["words"] for x in r["rows"])
        capped = sum(min(x["errors"], x["words"]) for x in r["rows"])
        build = builds.get(r["model"])
        print(
            f"{r['model']:22s} {r['size_mb']:8.1f} {'-' if build is None else f'{build:.1f}':>8s} {r['load_s']:7.2f} "
            f"{total:13.2f} {total / ref_s:7.3f} {total / audio:7.3f} {errors / words:7.3f} "
            f"{f'{errors}/{words}':>12s} {capped / words:7.3f} {r['rss_mb']:12.0f} {r['rss_mb'] - ref['rss_mb']:+7.0f}"
        )
    print("\nper clip: word edits (speech clips) and best seconds, " + " / ".join(r["model"] for r in results))
    for i, row in enumerate(ref["rows"]):
        edits = " / ".join(f"{r['rows'][i]['errors']:3d}" for r in results)
        seconds = " / ".join(f"{r['rows'][i]['seconds']:5.2f}" for r in results)
        print(f"  {row['file']:26s} {row['words']:3d} words  edits {edits}  s {seconds}")
    for r in results[1:]:
        changed = [(a["file"], b["text"]) for a, b in zip(ref["rows"], r["rows"]) if a["text"] != b["text"]]
        print(f"\n{r['model']}: {len(changed)} of {len(r['rows'])} transcripts differ from f16")
        for name, text in changed:
            print(f"  {name}: {text[:100]!r}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="base", choices=sorted(wc.SOURCES))
    parser.add_argument("--types", default="q8_0,q5_0", help="comma-separated quantizations")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.threads, args.repeat)))
        return 0
    builds: dict[str, float] = {}
    models = []
    for qtype in [None, *args.types.split(",")]:
        out = wc.default_output(args.name, wc.DEFAULT_OUT_DIR, qtype)
        if not wc.is_built(out):
            began = time.perf_counter()
            wc.build_model(args.name, wc.DEFAULT_OUT_DIR, qtype)
            builds[out.name] = time.perf_counter() - began
        models.append(str(ROOT / out))
    results = []
    for model in models:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", model, "--threads", str(args.threads), "--repeat", str(args.repeat)],
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    report(results, builds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
