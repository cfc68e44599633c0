"""One loaded model on one backend (`Transcriber`), and the per-process cache of them."""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from voicemail.transcription import confirmation, engines, reliability
from voicemail.transcription.audio import Vad, load_audio, recording_time, span_pieces, speech_runs, speech_span
from voicemail.transcription.decisions import (
    BLANK_AUDIO,
    MIN_MESSAGE_SPEECH_SECONDS,
    MIN_SPEECH_SECONDS,
    REVERSAL_MARGIN,
    assess,
    collapse_loops,
    compression_ratio,
    decide_message,
    entropy,
    failed,
    normalize_language,
    repetition_score,
    reversed_speech,
)
from voicemail.transcription.engines import ENGINES, Engine, RawResult
from voicemail.transcription.model_file import ConversionError, verify
from voicemail.transcription.results import (
    RecordingTooLong,
    Segment,
    Transcript,
    TranscriptionError,
    UnsupportedLanguage,
)
from voicemail.transcription.settings import (
    BACKENDS,
    DEFAULT_DECODING,
    OTHER_LANGUAGE_MIN,
    OTHER_LANGUAGE_ODDS,
    PROMPTS,
    SAMPLE_RATE,
    Decoding,
)
from voicemail.transcription.text import words

# Audio that fits whisper's one 30 s window: whisper_full encodes it once unless it moves
# on after its last timestamp (RawResult.encoder_runs), and detection's own pass encodes it
# whole.
WINDOW_SAMPLES = 30 * SAMPLE_RATE

logger = logging.getLogger("transcription")


class _Stages:
    """Seconds per stage of one transcription (`Transcript.stages`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - began, 4)


@dataclass
class _Decoded:
    """What `Transcriber._decode` found: whisper.cpp's result, the language chosen,
    whisper's probability of it, of all languages, and of all played backwards (entropy),
    and whether the time-reversal test found it speech played backwards."""

    raw: RawResult | None
    language: str | None
    probability: float | None = None
    probs: np.ndarray | None = None
    backward: float | None = None
    backward_share: float | None = None
    second_pass: bool = False
    second_opinion: str | None = None
    reversed: bool = False


class Transcriber:
    """One loaded model on one backend. Thread-safe (calls are serialised)."""

    def __init__(
        self, backend: str, model_path: str, threads: int, vad: bool = True, decoding: Decoding = DEFAULT_DECODING
    ) -> None:
        if backend not in ENGINES:
            raise ValueError(f"unknown transcription backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if not Path(model_path).is_file():
            raise TranscriptionError(f"whisper model not found: {model_path} (run: python manage.py model build)")
        # whisper.cpp hands back an unusable context for a bad file instead of failing, and
        # using it crashes the process: check the layout (and recorded checksum) first.
        try:
            _, problems = verify(model_path)
        except ConversionError as exc:
            raise TranscriptionError(f"{model_path} is not a whisper ggml model: {exc}") from exc
        if problems:
            raise TranscriptionError(f"{model_path} is not a usable whisper model: {'; '.join(problems[:3])}")
        self.backend = backend
        self.model_path = str(model_path)
        self.threads = threads
        self.vad = vad
        self.decoding = decoding
        self._lock = threading.Lock()
        self._engine: Engine = ENGINES[backend](self.model_path, threads)
        self._vad: Vad | None = Vad() if vad else None

    @property
    def multilingual(self) -> bool:
        return self._engine.multilingual

    @property
    def engine(self) -> Engine:
        return self._engine

    def resolve_languages(self, languages: str | Sequence[str] | None) -> list[str]:
        """Whisper language codes to choose among (`[]`: any language)."""
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

    def transcribe(
        self,
        path: str,
        languages: str | Sequence[str] | None = None,
        *,
        deadline: float | None = None,
        stop: Callable[[], bool] | None = None,
        decoding: Decoding | None = None,
        max_seconds: float | None = None,
        country: str | None = None,
        steer: Mapping[str, str] | None = None,
    ) -> Transcript:
        """Transcribe an mp3/wav file and decide (see module doc). `languages`: the one
        language, the clinic's languages to detect among, or None for any. `deadline`:
        a `time.monotonic()` value at which whisper.cpp is stopped; `stop`: asked at the
        same checkpoints, True stops it too (the worker stopping). `max_seconds`: a
        longer recording is not decoded; it is a message whose transcript failed
        (`too_long`), for the clinic to listen to. `country`: the clinic's, to read
        the callback number in (`Transcript.heard_number`; None: not read). `steer`: per
        language, a prompt for a second decoding of a message's speech, whose text is then
        the transcript (triage/steering.py; measured and left off, docs/transcription.md)."""
        started = time.perf_counter()
        codes = self.resolve_languages(languages)
        stage = _Stages()
        try:
            with stage("audio"):
                audio = load_audio(path, max_seconds=max_seconds)
        except RecordingTooLong as exc:
            # Hours of audio would not fit the worker's memory nor the job's time; whatever
            # it holds, a person listens to it.
            logger.warning("not transcribed: %s", exc)
            return replace(
                failed(0.0, None, "too_long"),
                recording_seconds=round(exc.seconds, 1),
                backend=self.backend,
                model=Path(self.model_path).name,
                elapsed=round(time.perf_counter() - started, 4),
            )
        return self.transcribe_audio(
            audio,
            codes,
            deadline=deadline,
            stop=stop,
            decoding=decoding,
            started=started,
            country=country,
            stages=stage,
            steer=steer,
        )

    def transcribe_audio(
        self,
        audio: np.ndarray,
        languages: Sequence[str],
        *,
        deadline: float | None = None,
        stop: Callable[[], bool] | None = None,
        decoding: Decoding | None = None,
        started: float | None = None,
        country: str | None = None,
        stages: _Stages | None = None,
        steer: Mapping[str, str] | None = None,
    ) -> Transcript:
        """Transcribe 16 kHz mono float32 samples; `languages` as from `resolve_languages`."""
        started = time.perf_counter() if started is None else started
        stage = stages or _Stages()
        decoding = decoding or self.decoding
        duration = audio.size / SAMPLE_RATE
        with self._lock:
            self._check_fork()
            if self._vad is not None:
                with stage("vad"):
                    runs = speech_runs(self._vad.probabilities(audio))
                    speech_seconds: float | None = round(sum(e - s for s, e in runs), 2)
                    span = speech_span(audio, runs)
            else:
                runs, speech_seconds, span = [], None, audio

            def abort() -> bool:
                return (deadline is not None and time.monotonic() >= deadline) or (stop is not None and stop())

            base = Transcript(
                text="",
                language=None,
                duration=round(duration, 3),
                speech_seconds=speech_seconds,
                backend=self.backend,
                model=Path(self.model_path).name,
                speech_start=round(runs[0][0], 2) if runs else None,
                decoded_seconds=round(span.size / SAMPLE_RATE, 2),
            )
            if span.size < SAMPLE_RATE // 2 or (speech_seconds is not None and speech_seconds < MIN_SPEECH_SECONDS):
                decoded = _Decoded(RawResult([], None), languages[0] if len(languages) == 1 else None)
            else:
                decoded = self._decode(span, speech_seconds, languages, decoding, abort, stage)
                base = replace(
                    base,
                    reversed_language_entropy=decoded.backward,
                    reversed_language_share=decoded.backward_share,
                    second_pass=decoded.second_pass,
                    second_opinion=decoded.second_opinion,
                )
        language, probability, all_probs = decoded.language, decoded.probability, decoded.probs
        raw = decoded.raw or RawResult([], language)
        if all_probs is not None:
            top = np.sort(all_probs)[::-1]
            base = replace(
                base,
                top_language_probability=round(float(top[0]), 4),
                top3_language_probability=round(float(top[:3].sum()), 4),
                language_entropy=round(entropy(all_probs), 3),
            )
        t = self._summarise(replace(base, stages=stage.seconds), raw, language, probability, started)
        prompt = (steer or {}).get(t.language or "")
        if prompt and t.message and t.text and not t.aborted:
            # Only speech the first pass took for a message: on silence, noise and babble a
            # prompt is what whisper writes (docs/transcription.md).
            with self._lock, stage("steer"):
                steered = self._engine.run(span, t.language, decoding, prompt, abort)
            if not steered.aborted and not steered.error:
                t = self._summarise(replace(base, stages=stage.seconds), steered, language, probability, started)
        if country and t.message and t.text and not t.aborted:
            with stage("callback_number"):
                heard = self._heard_number(t, country, span, runs, abort)
            t = replace(t, heard_number=heard, stages=stage.seconds, elapsed=round(time.perf_counter() - started, 4))
        return t

    def _decode(
        self,
        span: np.ndarray,
        speech_seconds: float | None,
        languages: Sequence[str],
        decoding: Decoding,
        abort: Callable[[], bool],
        stage: _Stages,
    ) -> _Decoded:
        """Decode the speech span: in which language, what whisper.cpp wrote, whether it is
        speech played backwards (then nothing is kept), and the second pass without the
        no-speech gate when a long stretch of speech came out with no words."""
        if languages and span.size <= WINDOW_SAMPLES and self._engine.multilingual:
            out = self._decode_then_detect(span, languages, decoding, abort, stage)
        else:  # any language, or more than one window: detection's own encoder pass first
            with stage("language"):
                probs = self._engine.language_probabilities(span) if self._engine.multilingual else None
            out = _Decoded(None, *self._choose(probs, languages), probs=probs)
            self._check_reversal(out, span, languages, stage)
        if out.reversed:
            out.raw = RawResult([], out.language)  # words played backwards: not a message, whatever was decoded
            return out
        if out.raw is None:
            with stage("decode"):
                out.raw = self._engine.run(span, out.language, decoding, self._prompt(out.language, decoding), abort)
        wordless = not words(" ".join(x.text for x in out.raw.segments))
        if (
            speech_seconds is not None
            and speech_seconds >= MIN_MESSAGE_SPEECH_SECONDS
            and wordless
            and not out.raw.aborted
            and not out.raw.error
        ):
            # A message with no words: whisper's no-speech gate dropped every window. Once
            # more without it, so the receptionist gets what it heard.
            with stage("second_pass"):
                out.raw = self._engine.run(
                    span,
                    out.language,
                    replace(decoding, no_speech_thold=1.0),
                    self._prompt(out.language, decoding),
                    abort,
                )
            out.second_pass, out.second_opinion = True, None
        return out

    def _decode_then_detect(
        self, span: np.ndarray, languages: Sequence[str], decoding: Decoding, abort: Callable[[], bool], stage: _Stages
    ) -> _Decoded:
        """The clinic's first language is decoded first, and the language is read from the
        encoder output that decoding left: one encoder pass for the callers of the clinic's
        first language instead of two (docs/transcription.md, "What the engine does"). A caller of another
        listed language is decoded once more, in it, unless the time-reversal test finds
        the speech played backwards: that decoding would be thrown away. Then, while that
        encoder output is still the span's, the label's second opinion when it asks for one;
        the time-reversal test encodes the reversed span, so it comes after it when no
        decoding follows."""
        with stage("decode"):
            raw = self._engine.run(span, languages[0], decoding, self._prompt(languages[0], decoding), abort)
        probs = None
        # Whether the encoder output the context holds is the whole span's: whisper_full moves
        # on to the rest of the audio after the last timestamp it decoded, and encodes that alone.
        whole = raw.encoder_runs == 1
        with stage("language"):
            if not raw.aborted and not raw.error:
                probs = self._engine.decoded_language_probabilities() if whole else None
                if probs is None:  # a binding that cannot, or a later stretch: an encoder pass of its own
                    probs = self._engine.language_probabilities(span)
                    whole = True
        out = _Decoded(raw, *self._choose(probs, languages), probs=probs)
        if out.language != languages[0]:
            self._check_reversal(out, span, languages, stage)
            if out.reversed:
                return out
            with stage("decode"):
                out.raw = self._engine.run(span, out.language, decoding, self._prompt(out.language, decoding), abort)
            whole = out.raw.encoder_runs == 1
        # The second opinion decodes that same encoder output: of the span, or not at all.
        decoded = out.raw
        assert decoded is not None
        if whole and reliability.asks("disagreement", out.language) and not decoded.aborted and not decoded.error:
            with stage("second_opinion"):
                n = sum(len(x.tokens) for x in decoded.segments)
                out.second_opinion = self._engine.greedy_text(out.language or "", 2 * n + 16, abort)
        if out.language == languages[0]:
            self._check_reversal(out, span, languages, stage)
        return out

    def _check_reversal(self, out: _Decoded, span: np.ndarray, languages: Sequence[str], stage: _Stages) -> None:
        """The time-reversal test on `out` (its `backward`, `backward_share`, `reversed`)."""
        with stage("reversal"):
            out.backward, out.backward_share = self._backward_detection(span, out.probs, languages)
        out.reversed = reversed_speech(round(entropy(out.probs), 3), out.backward, out.backward_share)

    def _heard_number(
        self, t: Transcript, country: str, span: np.ndarray, runs: list[tuple[float, float]], abort: Callable[[], bool]
    ) -> confirmation.HeardNumber | None:
        """The transcript's callback number, confirmed by a second look or not, its times
        in seconds of the recording."""

        def decode(piece: np.ndarray, language: str, decoding: Decoding, prompt: str | None) -> str:
            return " ".join(s.text for s in self._engine.run(piece, language, decoding, prompt, abort).segments)

        with self._lock:
            heard = confirmation.heard_number(t.segments, country, t.language, span, decode)
        if heard is None or heard.start is None or not runs:
            return heard
        pieces = span_pieces(runs)
        return replace(
            heard,
            start=round(recording_time(heard.start, pieces), 2),
            end=round(recording_time(heard.end or heard.start, pieces), 2),
        )

    @staticmethod
    def _prompt(language: str | None, decoding: Decoding) -> str | None:
        return PROMPTS.get(language or "") if decoding.prompt else None

    def _choose(self, probs: np.ndarray | None, languages: Sequence[str]) -> tuple[str | None, float | None]:
        """The call's language among `languages` (any when empty) from whisper's language
        probabilities (None: an English-only model, or nothing detected), and whisper's
        probability of it."""
        if not self._engine.multilingual:
            return "en", None
        if probs is None:
            return (languages[0] if languages else None), None
        if not languages:
            best = int(np.argmax(probs))
            return self._engine.lang_str(best), float(probs[best])
        ids = [self._engine.lang_id(c) for c in languages]
        best = max(ids, key=lambda i: probs[i])
        first = ids[0]
        # The clinic's first language unless detection is sure of another: on noisy or
        # unclear Czech, base often rates English above Czech at 0.1-0.2, up to 13 times
        # Czech (measured); an accented English caller can be under 0.5 English, but then
        # over a hundred times Czech.
        sure = (probs[best] >= OTHER_LANGUAGE_MIN and probs[best] >= 2 * probs[first]) or probs[
            best
        ] >= OTHER_LANGUAGE_ODDS * probs[first]
        if best != first and not sure:
            best = first
        return self._engine.lang_str(best), float(probs[best])

    def _backward_detection(
        self, span: np.ndarray, forward: np.ndarray | None, languages: Sequence[str]
    ) -> tuple[float | None, float | None]:
        """Language detection of the span played backwards, when the time-reversal test can
        still find it surer than forwards (an English-only model detects nothing; a forward
        entropy below the margin cannot be beaten by it): its entropy, and the probability
        of the clinic's languages (None when it lists none)."""
        if forward is None or entropy(forward) < REVERSAL_MARGIN:
            return None, None
        backward = self._engine.language_probabilities(np.ascontiguousarray(span[::-1]))
        share = round(float(sum(backward[self._engine.lang_id(code)] for code in languages)), 4) if languages else None
        return round(entropy(backward), 3), share

    def _check_fork(self) -> None:
        """Refuse to run in a child forked after the engine computed.

        whisper.cpp's thread pool does not survive fork(): a child that computes after its
        parent did hangs for ever (seen with both backends). A forking RQ worker may load the
        model in the parent (`get_transcriber`) but must not run it there (no
        `warm_up`); a non-forking worker (`rq.worker.SimpleWorker`) can do both.
        """
        global _ENGINE_RAN_IN_PID
        pid = os.getpid()
        if _ENGINE_RAN_IN_PID not in (None, pid):
            raise TranscriptionError(
                "whisper.cpp already ran in the parent process before fork(); it would hang here. "
                "Use a non-forking worker (rq SimpleWorker) or do not warm up before forking"
            )
        _ENGINE_RAN_IN_PID = pid

    def _summarise(
        self, base: Transcript, raw: RawResult, language: str | None, probability: float | None, started: float
    ) -> Transcript:
        eot = self._engine.eot
        segments: list[Segment] = []
        logprobs: list[float] = []
        probs: list[float] = []
        for s in raw.segments:
            text_tokens = [t for t in s.tokens if t.id < eot]
            lp = [t.plog for t in text_tokens]
            logprobs += lp
            probs += [t.p for t in text_tokens]
            segments.append(
                Segment(
                    s.t0,
                    s.t1,
                    BLANK_AUDIO.sub("", s.text).strip(),
                    float(np.mean(lp)) if lp else math.nan,
                    len(text_tokens),
                    tuple((t.p, t.t0, t.t1, t.piece) for t in text_tokens),
                )
            )
        raw_text = " ".join(s.text for s in segments if s.text).strip()
        text, looped = collapse_loops(raw_text)
        t = replace(
            base,
            text=text,
            language=language,
            mean_logprob=float(np.mean(logprobs)) if logprobs else math.nan,
            mean_token_prob=float(np.mean(probs)) if probs else math.nan,
            n_tokens=len(logprobs),
            repetition=repetition_score(raw_text),
            compression_ratio=compression_ratio(raw_text),
            segments=tuple(segments),
            language_probability=probability,
            aborted=raw.aborted,
            engine_error=raw.error,
        )
        message, reason = decide_message(t)
        if message:
            t = replace(t, label_signals=reliability.signals(t))
        status, issue = assess(t, looped) if message else (None, None)
        return replace(
            t,
            message=message,
            message_reason=reason,
            status=status,
            issue=issue,
            elapsed=round(time.perf_counter() - started, 4),
        )

    def warm_up(self) -> None:
        """Run a short clip through VAD and one decoding, so the first real call pays no
        first-run costs and the worker holds at its start the memory it computes in.

        One encoder pass, not a detection pass of its own besides: detection computes in
        the buffers decoding does (measured with base: the same resident memory after
        either, 361 MB; detection's own pass added 1.3 s to every worker start and nothing
        to the first call)."""
        tone = (0.1 * np.sin(np.arange(2 * SAMPLE_RATE) * 2 * np.pi * 440 / SAMPLE_RATE)).astype(np.float32)
        with self._lock:
            self._check_fork()
            if self._vad is not None:
                self._vad.probabilities(tone)
            self._engine.run(tone, "en", self.decoding, None, lambda: False)
            self._engine.decoded_language_probabilities()
        for language in reliability.DICTIONARY_NAMES:  # loaded here, not on the first call's clock
            reliability.dictionary(language)

    def close(self) -> None:
        with self._lock:
            self._engine.close()
            if self._vad is not None:
                self._vad.close()


# The process in which any whisper.cpp computation ran (its thread pool is process state).
_ENGINE_RAN_IN_PID: int | None = None
_CACHE: dict[tuple[str, str, int, bool], Transcriber] = {}
_CACHE_LOCK = threading.Lock()


def _shutdown() -> None:
    """Free cached models and detach the Python log callback before the interpreter finalizes.

    whisper.cpp logs while freeing; a Python callback reached during finalization aborts
    the process ("PyThreadState_Get: the GIL is released").
    """
    with _CACHE_LOCK:
        for transcriber in _CACHE.values():
            transcriber.close()
        _CACHE.clear()
    engines.detach_log()


def get_transcriber(backend: str, model_path: str, threads: int, vad: bool = True) -> Transcriber:
    """The process-wide `Transcriber` for these settings, loading the model on first use."""
    key = (backend, os.path.realpath(model_path), int(threads), bool(vad))
    with _CACHE_LOCK:
        transcriber = _CACHE.get(key)
        if transcriber is None:
            if not _CACHE:  # the process's first model: free them all before it exits
                atexit.register(_shutdown)
            transcriber = Transcriber(backend, model_path, threads, vad)
            _CACHE[key] = transcriber
        return transcriber


def warm_up(backend: str, model_path: str, threads: int, vad: bool = True) -> Transcriber:
    """Load the model and run a short clip: call once when a worker starts.

    Only in the process that will transcribe: after this, a fork()ed child cannot run
    whisper.cpp at all (see `Transcriber._check_fork`). With a forking worker, call
    `get_transcriber` in the parent instead (loads, does not run).
    """
    transcriber = get_transcriber(backend, model_path, threads, vad)
    transcriber.warm_up()
    return transcriber
