"""Recordings that are small files and long audio: what a switchboard, or
anyone who controls a `RecordingUrl`, can send within `RECORDING_MAX_BYTES`.

Each is a spoken clip of `tests/audio` encoded once and its encoded bytes repeated up to
the size, so making 25 MiB takes a second, not the minutes of encoding hours of audio.
Every maker returns the recording's true length in seconds.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.support import ROOT

#: Under the download cap (25 MiB), with room for the headers.
SIZE = 25 * 1024 * 1024 - 4096
RATE = 8000


def speech(seconds: float = 68.0) -> np.ndarray:
    """A telephone voicemail (8 kHz mono float32), repeated to ``seconds``."""
    clip, rate = sf.read(ROOT / "tests" / "audio" / "msg_appointment.mp3", dtype="float32")
    assert rate == RATE
    return np.tile(clip, int(np.ceil(seconds * RATE / clip.size)))[: int(seconds * RATE)]


def _riff(chunks: list[tuple[bytes, bytes]], riff_size: int | None = None) -> bytes:
    body = b"WAVE" + b"".join(name + struct.pack("<I", len(data)) + data for name, data in chunks)
    return b"RIFF" + struct.pack("<I", len(body) if riff_size is None else riff_size) + body


def pcm8_wav(path: Path, size: int = SIZE, *, streamed: bool = False) -> float:
    """8 kHz 8-bit PCM mono: 55 minutes in 25 MiB. ``streamed``: the RIFF and data sizes
    are 0xFFFFFFFF, as a recorder that streams writes them (the header knows no length)."""
    n = size - 44
    samples = np.tile(speech(), int(np.ceil(n / (68 * RATE))))[:n]
    data = np.clip(samples * 127 + 128, 0, 255).astype(np.uint8).tobytes()
    fmt = struct.pack("<HHIIHH", 1, 1, RATE, RATE, 1, 8)
    blob = _riff([(b"fmt ", fmt), (b"data", data)])
    if streamed:
        blob = b"RIFF\xff\xff\xff\xff" + blob[8:40] + b"\xff\xff\xff\xff" + blob[44:]
    path.write_bytes(blob)
    return n / RATE


def _chunks(wav: bytes) -> dict[bytes, bytes]:
    found, pos = {}, 12
    while pos + 8 <= len(wav):
        name, length = wav[pos : pos + 4], struct.unpack("<I", wav[pos + 4 : pos + 8])[0]
        found[name] = wav[pos + 8 : pos + 8 + length]
        pos += 8 + length + (length & 1)
    return found


def gsm_wav(path: Path, size: int = SIZE) -> float:
    """GSM 6.10 in WAV (WAV49, as telephone systems record): 4.5 hours in 25 MiB. The
    encoded blocks (65 bytes for 320 samples) are repeated; the fact chunk counts them."""
    encoded = io.BytesIO()
    sf.write(encoded, speech(), RATE, format="WAV", subtype="GSM610")
    chunks = _chunks(encoded.getvalue())
    block = chunks[b"data"]
    assert len(block) % 65 == 0
    data = block * ((size - 80) // len(block))
    samples = len(data) // 65 * 320
    path.write_bytes(_riff([(b"fmt ", chunks[b"fmt "]), (b"fact", struct.pack("<I", samples)), (b"data", data)]))
    return samples / RATE


def _mp3(samples: np.ndarray, **settings: object) -> bytes:
    encoded = io.BytesIO()
    with sf.SoundFile(
        encoded,
        "w",
        samplerate=RATE,
        channels=1,
        format="MP3",
        subtype="MPEG_LAYER_III",
        bitrate_mode="CONSTANT",
        **settings,
    ) as out:
        out.write(samples)
    return encoded.getvalue()


def _seconds(encoded: bytes) -> float:
    return sf.info(io.BytesIO(encoded)).duration


def mp3_8kbps(path: Path, size: int = SIZE) -> float:
    """8 kbps constant-bitrate MP3 (MPEG-2.5, 8 kHz) without a Xing/Info frame: 7.3 hours
    in 25 MiB, a length libsndfile can only estimate from the size."""
    clip = _mp3(speech(), compression_level=0.99)
    assert b"Xing" not in clip[:512] and b"Info" not in clip[:512]
    repeats = size // len(clip)
    path.write_bytes(clip * repeats)
    return repeats * _seconds(clip)


def mp3_lying_xing(path: Path, size: int = SIZE) -> float:
    """An MP3 whose Info frame counts the frames of 68 s, followed by hours of frames of
    the same stream (8 kHz): libsndfile believes the Info frame."""
    head = _mp3(speech())  # 24 kbps, with the encoder's Info frame
    assert b"Info" in head[:512] or b"Xing" in head[:512]
    tail = _mp3(speech(), compression_level=0.99)
    repeats = (size - len(head)) // len(tail)
    path.write_bytes(head + tail * repeats)
    return _seconds(head) + repeats * _seconds(tail)
