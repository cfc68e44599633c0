"""Transcription benchmark: real-time factor and peak memory per backend, wrapper vs raw engine.

    .venv/bin/python bench/transcription_bench.py [--model var/models/ggml-tiny.en.bin]
        [--backends pywhispercpp,whisper-cpp-python] [--repeat 3] [--threads 2]

Each backend runs in its own child process (so its peak RSS is its own) over the
English clips of ``tests/audio``. For every clip, in the same run and interleaved:

* wrapper: ``Transcriber.transcribe(path, "en")``, i.e. decoding the file, VAD, the
  engine and the confidence summary, what a worker pays;
* raw: the backend's bare ``whisper_full`` call on already decoded samples with the
  same parameters (for pywhispercpp: ``_pywhispercpp.whisper_full`` with whisper.cpp's
  VAD on, exactly the engine's own work; for whisper-cpp-python: its ctypes
  ``whisper_full`` without VAD, since that engine has none).

The best of ``--repeat`` runs is kept for each (the machine may be shared). RTF =
processing seconds / audio seconds; ratio = wrapper / raw (target for the default
backend: <= 1.10), over all clips, over the clips both sides decode ("speech"; the
wrapper skips clips without speech where the bare whisper-cpp-python engine does not),
and as the median of per-clip ratios, which a busy neighbour process disturbs least. Also prints the intelligibility confusion matrix and the telephone
word error rate of each backend.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import transcription as tx  # noqa: E402

AUDIO = ROOT / "tests" / "audio"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _raw_runner(t: tx.Transcriber) -> Any:
    """A zero-argument-per-call function running the bare engine on samples."""
    engine = t.engine
    if t.backend == "pywhispercpp":
        import _pywhispercpp as pw

        params = engine.params  # type: ignore[attr-defined]

        def run_pw(audio: Any) -> None:
            params.language = "en"
            params.vad = t.vad
            pw.whisper_full(engine.ctx, params, audio, audio.size)  # type: ignore[attr-defined]
        return run_pw

    w = engine._w  # type: ignore[attr-defined]

    def run_wcp(audio: Any) -> None:
        engine._params.language = b"en"  # type: ignore[attr-defined]
        w.whisper_full(engine._ctx, engine._params,  # type: ignore[attr-defined]
                       audio.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), audio.size)
    return run_wcp


def child(backend: str, model: str, threads: int, repeat: int) -> dict[str, Any]:
    rss_start = _peak_rss_mb()
    started = time.perf_counter()
    t = tx.get_transcriber(backend, model, threads)
    t.warm_up()
    load_s = time.perf_counter() - started
    rss_loaded = _peak_rss_mb()
    raw = _raw_runner(t)
    labels = [x for x in json.loads((AUDIO / "labels.json").read_text()) if x["language"] in (None, "en")]
    rows = []
    for label in labels:
        path = str(AUDIO / label["file"])
        audio = tx.load_audio(path)
        wrapper_s, raw_s = [], []
        transcript = None
        for _ in range(repeat):
            s = time.perf_counter()
            transcript = t.transcribe(path, "en")
            wrapper_s.append(time.perf_counter() - s)
            s = time.perf_counter()
            raw(audio)
            raw_s.append(time.perf_counter() - s)
        assert transcript is not None
        ok, reason = tx.is_intelligible(transcript)
        errors, words = tx.word_error_rate(label["text"], transcript.text) if label["intelligible"] else (0, 0)
        rows.append({
            "file": label["file"], "duration": transcript.duration, "wrapper": min(wrapper_s), "raw": min(raw_s),
            "label": label["intelligible"], "got": ok, "reason": reason, "format": label["format"],
            "errors": errors, "words": words, "text": transcript.text,
        })
    return {"backend": backend, "model": Path(model).name, "threads": threads, "load_s": load_s,
            "rss_start_mb": rss_start, "rss_loaded_mb": rss_loaded, "rss_peak_mb": _peak_rss_mb(), "rows": rows}


def report(results: list[dict[str, Any]]) -> None:
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; best of repeats per clip\n")
    head = f"{'backend':20s} {'model':18s} {'load s':>7s} {'RTF wrapper':>12s} {'RTF raw':>8s} {'ratio':>6s} " \
           f"{'ratio speech':>13s} {'median clip ratio':>18s} {'peak RSS MB':>12s} {'RSS after load':>15s}"
    print(head)
    print("-" * len(head))
    for r in results:
        audio = sum(x["duration"] for x in r["rows"])
        wrapper = sum(x["wrapper"] for x in r["rows"])
        raw = sum(x["raw"] for x in r["rows"])
        # speech clips only: where both sides decode (the wrapper skips clips without speech)
        speech = [x for x in r["rows"] if x["label"] or x["reason"] != "no_speech"]
        ratio_speech = sum(x["wrapper"] for x in speech) / sum(x["raw"] for x in speech)
        # per-clip ratios' median: robust to another process stealing the CPU during one clip
        median = statistics.median(x["wrapper"] / x["raw"] for x in speech)
        print(f"{r['backend']:20s} {r['model']:18s} {r['load_s']:7.2f} {wrapper / audio:12.4f} {raw / audio:8.4f} "
              f"{wrapper / raw:6.3f} {ratio_speech:13.3f} {median:18.3f} {r['rss_peak_mb']:12.0f} "
              f"{r['rss_loaded_mb']:15.0f}")
    for r in results:
        rows = r["rows"]
        matrix = {(a, b): sum(1 for x in rows if x["label"] == a and x["got"] == b) for a in (True, False)
                  for b in (True, False)}
        tel = [x for x in rows if x["label"] and x["format"] != "wav16"]
        errors, words = sum(x["errors"] for x in tel), sum(x["words"] for x in tel)
        print(f"\n{r['backend']} / {r['model']}: intelligibility on {len(rows)} English clips")
        print("                 predicted yes  predicted no")
        print(f"  message        {matrix[(True, True)]:13d}  {matrix[(True, False)]:12d}")
        print(f"  not a message  {matrix[(False, True)]:13d}  {matrix[(False, False)]:12d}")
        print(f"  telephone WER (8 kHz clips, {len(tel)} messages): {errors}/{words} = {errors / max(words, 1):.3f}")
        for x in rows:
            if x["label"] != x["got"]:
                print(f"  wrong: {x['file']} -> {x['reason']}: {x['text'][:90]!r}")
        print("  per clip (s): " + ", ".join(f"{x['file'].split('.')[0]} {x['wrapper']:.2f}/{x['raw']:.2f}"
                                            for x in rows))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(ROOT / "var" / "models" / "ggml-tiny.en.bin"))
    parser.add_argument("--backends", default=",".join(tx.BACKENDS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.model, args.threads, args.repeat)))
        return 0
    if not Path(args.model).is_file():
        import whisper_model

        whisper_model.build_model(Path(args.model).name.removeprefix("ggml-").removesuffix(".bin"),
                                  Path(args.model).parent)
    results = []
    for backend in args.backends.split(","):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", backend, "--model", args.model, "--threads", str(args.threads),
             "--repeat", str(args.repeat)],
            check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
