"""What transcribing a voicemail gives: errors, segments and the `Transcript`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


class TranscriptionError(Exception):
    """The recording could not be transcribed (undecodable audio, engine failure)."""


class AudioDecodeError(TranscriptionError):
    pass


class RecordingTooLong(TranscriptionError):
    """The recording is longer than the limit it was loaded with (nothing of it is kept).
    `at_least`: its decoding was stopped at the limit, so it is at least `seconds` long."""

    def __init__(self, seconds: float, limit: float, *, at_least: bool = False) -> None:
        self.seconds = seconds
        self.limit = limit
        super().__init__(
            f"recording is longer than the limit of {limit:g} s (stopped after {seconds:.0f} s of it)"
            if at_least
            else f"recording is {seconds:.0f} s long, over the limit of {limit:g} s"
        )


class UnsupportedLanguage(TranscriptionError, ValueError):
    """The language is unknown to Whisper, or the model is English-only."""


@dataclass(frozen=True)
class Segment:
    start: float  # seconds in the decoded span
    end: float
    text: str
    mean_logprob: float  # over the segment's text tokens; nan when it has none
    n_tokens: int
    # The text tokens: (probability, start, end in seconds of the decoded span, bytes).
    tokens: tuple[tuple[float, float, float, bytes], ...] = ()


@dataclass(frozen=True)
class Transcript:
    """A voicemail's transcription, the signals behind it and the two decisions.

    `speech_seconds`: what Silero VAD found (`None` when VAD was off).
    `mean_logprob`/`mean_token_prob`: text tokens only. `repetition`: share of
    repeated word trigrams in the decoder's raw output (a loop is close to 1; `text` has
    loops collapsed). `language_probability`: whisper's probability of the chosen
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
    # With it, the probability of the clinic's languages played backwards (None: the clinic
    # lists none, or the test did not run).
    reversed_language_share: float | None = None
    aborted: bool = False  # stopped at the deadline
    engine_error: str | None = None
    # Decoded a second time with whisper's no-speech gate off: the first pass found no
    # words in what the VAD heard as a long stretch of speech.
    second_pass: bool = False
    message: bool = False
    message_reason: str = "no_speech"  # "speech" when a message, else why not
    status: str | None = None  # reliable | check | unreliable | failed; None when no message
    issue: str | None = None
    # The length of a recording refused as too long (issue `too_long`; nothing decoded,
    # so `duration` is 0).
    recording_seconds: float | None = None
    # The reliability label's signals (reliability.signals), and the callback number read
    # from the text with whether its digits were heard (confirmation.py; start and end in
    # seconds of the recording). Filled by transcribe() when it is given the country.
    label_signals: dict[str, Any] | None = None
    # The same audio decoded again greedily from the same encoder output (the label's
    # `disagreement`); the caller's words, so not among the stored signals.
    second_opinion: str | None = None
    heard_number: Any = None  # confirmation.HeardNumber
    # Seconds spent per stage (`audio`: file decoding and resampling, `vad`,
    # `language`: detection, `reversal`: the time-reversal test, `decode`: whisper.cpp,
    # encoder and decoder, `second_pass`): where a call's time went.
    stages: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (nan becomes None, token bytes text)."""

        def clean(v: Any) -> Any:
            if isinstance(v, float) and math.isnan(v):
                return None
            if isinstance(v, bytes):
                return v.decode("utf-8", errors="replace")
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        return clean(asdict(self))

    def signals(self) -> dict[str, Any]:
        """The decision inputs, for storing with the call (no text)."""
        return {k: v for k, v in self.to_dict().items() if k not in ("text", "segments", "second_opinion")}
