"""The two whisper.cpp bindings behind one small interface (`Engine`), and
whisper.cpp's table of language codes (`whisper_languages`).

`pywhispercpp` (default; its `_pywhispercpp` binding is called directly, with the abort
callback inside whisper.cpp) and `whisper-cpp-python` (a 2023 whisper.cpp through ctypes;
the deadline is checked before each 30 s window)."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from voicemail.transcription.results import TranscriptionError
from voicemail.transcription.settings import SAMPLE_RATE, Decoding

logger = logging.getLogger("transcription")


@dataclass
class Token:
    id: int
    p: float
    plog: float
    # Where the token was said, in seconds of the decoded audio (whisper.cpp's token
    # timestamps), and its bytes (a Czech letter may be split over two tokens): what a
    # callback number's confirmation reads (voicemail/transcription/confirmation.py).
    t0: float = math.nan
    t1: float = math.nan
    piece: bytes = b""


@dataclass
class RawSegment:
    t0: float
    t1: float
    text: str
    tokens: list[Token] = field(default_factory=list)


@dataclass
class RawResult:
    segments: list[RawSegment]
    language: str | None
    aborted: bool = False
    error: str | None = None
    # Encoder passes whisper_full made (None: the binding does not say). More than one: it
    # moved on to a later stretch of the audio, so the encoder output it left is not the
    # whole span's, and language detection cannot be read from it.
    encoder_runs: int | None = None


class Engine(Protocol):
    multilingual: bool
    eot: int  # first special token id: text tokens are below it

    def run(
        self, audio: np.ndarray, language: str | None, decoding: Decoding, prompt: str | None, abort: Callable[[], bool]
    ) -> RawResult: ...

    def language_probabilities(self, audio: np.ndarray) -> np.ndarray: ...

    def decoded_language_probabilities(self) -> np.ndarray | None:
        """The language probabilities of the audio `run` encoded last, read from the
        encoder output it left (no encoder pass of their own), or None when the binding
        cannot read them."""
        ...

    def greedy_text(self, language: str, max_tokens: int, abort: Callable[[], bool]) -> str | None:
        """The audio `run` encoded last, decoded again greedily (no encoder pass), or None
        when the binding cannot (or `abort()` said stop)."""
        ...

    def lang_id(self, code: str) -> int: ...

    def lang_str(self, lang_id: int) -> str: ...

    def close(self) -> None: ...


_log_installed = False
_log_lock = threading.Lock()


def _whisper_log(level: int, text: str, *_: Any) -> None:
    """whisper.cpp log callback: to debug (also silences whisper.cpp's stderr chatter)."""
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("whisper.cpp: %s", text.rstrip())


def _result(lib: Any, ctx: Any, language: str | None, rc: int, aborted: bool) -> RawResult:
    """The segments and tokens whisper_full left in `ctx`; both bindings name the C API
    functions alike."""
    segments: list[RawSegment] = []
    for i in range(lib.whisper_full_n_segments(ctx)):
        raw = lib.whisper_full_get_segment_text(ctx, i)
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
        seg = RawSegment(
            lib.whisper_full_get_segment_t0(ctx, i) / 100.0, lib.whisper_full_get_segment_t1(ctx, i) / 100.0, text
        )
        for j in range(lib.whisper_full_n_tokens(ctx, i)):
            td = lib.whisper_full_get_token_data(ctx, i, j)
            # Bytes: a token may end inside a UTF-8 character ("č" split in two), and
            # pywhispercpp's str-returning getter raises on it.
            piece = (
                lib.whisper_token_to_bytes(ctx, td.id)
                if hasattr(lib, "whisper_token_to_bytes")
                else lib.whisper_full_get_token_text(ctx, i, j)
            )
            seg.tokens.append(
                Token(
                    int(td.id),
                    float(td.p),
                    float(td.plog),
                    td.t0 / 100.0,
                    td.t1 / 100.0,
                    piece if isinstance(piece, bytes) else str(piece).encode("utf-8"),
                )
            )
        segments.append(seg)
    error = None if rc == 0 or aborted else f"whisper_full failed with code {rc}"
    return RawResult(segments, language, aborted=aborted, error=error)


def detach_log() -> None:
    """Detach the Python log callback before the interpreter finalizes: whisper.cpp logs
    while freeing, and a Python callback reached during finalization aborts the process."""
    if _log_installed:
        import _pywhispercpp as pw

        pw.whisper_log_set(None)


@lru_cache(maxsize=1)
def whisper_languages() -> frozenset[str]:
    """The language codes whisper.cpp knows ("en", "cs", ..., "haw", "yue"). Read from
    the engine's own table (no model needed) rather than asking `whisper_lang_id` per
    code: that also accepts full names ("lao") and prints to stderr for unknown ones.
    Onboarding checks a clinic's languages against it (`onboarding/writer.py`)."""
    import _pywhispercpp as pw

    return frozenset(pw.whisper_lang_str(i) for i in range(pw.whisper_lang_max_id() + 1))


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
        self._decoder: Any = None  # libwhisper.Decoder, made on first use (False: unavailable)

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
                pw.whisper_sampling_strategy.WHISPER_SAMPLING_BEAM_SEARCH
                if beam
                else pw.whisper_sampling_strategy.WHISPER_SAMPLING_GREEDY
            )
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
        params.token_timestamps = True  # where a callback number was said (confirmation, console)
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

    def decoded_language_probabilities(self) -> np.ndarray | None:
        decoder = self._libwhisper_decoder()
        return decoder.language_probabilities() if decoder else None

    def greedy_text(self, language: str, max_tokens: int, abort: Callable[[], bool]) -> str | None:
        decoder = self._libwhisper_decoder()
        return decoder.greedy_text(self.lang_id(language), max_tokens, abort) if decoder else None

    def _libwhisper_decoder(self) -> Any:
        if self._decoder is None:
            from voicemail.transcription import libwhisper

            try:
                self._decoder = libwhisper.Decoder(self._ctx, self.threads) if self.multilingual else False
            except libwhisper.LibraryError as exc:
                logger.warning(
                    "language detection needs its own encoder pass, and the label has no second opinion: %s", exc
                )
                self._decoder = False
        return self._decoder

    def run(
        self, audio: np.ndarray, language: str | None, decoding: Decoding, prompt: str | None, abort: Callable[[], bool]
    ) -> RawResult:
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

        encoder_runs = [0]

        def encoder_begins(*_: Any) -> bool:
            # A checkpoint too: whisper.cpp asks the abort callback while it decodes, not
            # while it encodes, and each window's encoder pass takes seconds on a busy CPU.
            if stop():
                return False  # stops whisper.cpp before this window's encoder pass
            encoder_runs[0] += 1
            return True

        pw.assign_abort_callback(params, stop)
        pw.assign_encoder_begin_callback(params, encoder_begins)
        try:
            rc = pw.whisper_full(self._ctx, params, audio, audio.size)
        finally:
            pw.assign_abort_callback(params, None)
            pw.assign_encoder_begin_callback(params, None)
        return replace(_result(pw, self._ctx, language, rc, aborted[0]), encoder_runs=encoder_runs[0])

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
        self._ctx: ctypes.c_void_p | None = ctypes.c_void_p(ctx)
        self.threads = threads
        self.multilingual = bool(w.whisper_is_multilingual(self._ctx))
        self.eot = int(w.whisper_token_eot(self._ctx))
        self._keep: list[Any] = []  # bytes and callbacks C holds pointers to during a call

    def decoded_language_probabilities(self) -> np.ndarray | None:
        return None  # a 2023 whisper.cpp: detection keeps its own encoder pass

    def greedy_text(self, language: str, max_tokens: int, abort: Callable[[], bool]) -> str | None:
        return None

    def lang_id(self, code: str) -> int:
        return int(self._w.whisper_lang_id(code.encode("ascii")))

    def lang_str(self, lang_id: int) -> str:
        return str(self._w.whisper_lang_str(lang_id).decode())

    def language_probabilities(self, audio: np.ndarray) -> np.ndarray:
        w, ct = self._w, self._ct
        window = np.ascontiguousarray(audio[: 30 * SAMPLE_RATE], dtype=np.float32)
        if (
            w.whisper_pcm_to_mel(self._ctx, window.ctypes.data_as(ct.POINTER(ct.c_float)), window.size, self.threads)
            != 0
        ):
            raise TranscriptionError("whisper_pcm_to_mel failed")
        probs = np.zeros(w.whisper_lang_max_id() + 1, dtype=np.float32)
        if w.whisper_lang_auto_detect(self._ctx, 0, self.threads, probs.ctypes.data_as(ct.POINTER(ct.c_float))) < 0:
            raise TranscriptionError("whisper_lang_auto_detect failed")
        return probs

    def run(
        self, audio: np.ndarray, language: str | None, decoding: Decoding, prompt: str | None, abort: Callable[[], bool]
    ) -> RawResult:
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
        p.token_timestamps = True
        seconds = audio.size / SAMPLE_RATE
        p.max_tokens = _max_tokens(decoding, seconds)
        p.audio_ctx = _audio_ctx(decoding, seconds)
        lang_b = (language or "").encode("ascii")
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
        return _result(w, self._ctx, language, rc, aborted[0])

    def close(self) -> None:
        if self._ctx is not None:
            self._w.whisper_free(self._ctx)
            self._ctx = None


ENGINES: dict[str, Callable[[str, int], Engine]] = {
    "pywhispercpp": _PyWhisperCpp,
    "whisper-cpp-python": _WhisperCppPython,
}
