"""The labelled voicemail set (``tests/audio/voicemails``, made by ``tests/audio/make_voicemails.py``).

``load_labels()`` gives one dict per clip (see the generator's docstring for the fields),
``clip_path(label)`` its file, and ``long_voicemail(path, seconds)`` builds a long message
at run time from the committed clips, with numpy and soundfile only.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

FOLDER = Path(__file__).resolve().parent / "audio" / "voicemails"
LABELS_PATH = FOLDER / "labels.json"
RATE = 8000


INTENTS_PATH = FOLDER / "intents.json"


@lru_cache(maxsize=1)
def _labels() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(LABELS_PATH.read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def _intents() -> dict[tuple[str, str], dict[str, Any]]:
    return {(x["language"], x["text"]): x for x in json.loads(INTENTS_PATH.read_text(encoding="utf-8"))}


def load_labels() -> list[dict[str, Any]]:
    """Every clip's label, fresh copies (callers may change them). A message's clips also
    carry its ``key``, ``intent``, ``also`` and ``urgent`` (``intents.json``)."""
    out = []
    for x in _labels():
        meant = _intents().get((x["language"], x["text"])) if x["kind"] == "speech" else None
        out.append(dict(x, **{k: meant[k] for k in ("key", "intent", "also", "urgent")}) if meant else dict(x))
    return out


def clip_path(label: dict[str, Any]) -> Path:
    return FOLDER / label["file"]


def _line(n: int, rng: np.random.Generator) -> np.ndarray:
    """Quiet line hiss (about -60 dBFS) for the pauses."""
    return (rng.standard_normal(n) * 10 ** (-60 / 20)).astype(np.float32)


def long_voicemail(out_path: Path | str, seconds: float, language: str = "cs") -> dict[str, Any]:
    """One voicemail of exactly ``seconds`` s, 8 kHz mu-law WAV at ``out_path``: the set's
    messages in ``language`` (each text once per round, from its clip without background
    noise) one after another, whole, with 0.5-1.5 s pauses, then line until the end.
    The first message keeps its own start (line, beep, the caller right after it).
    Returns a label like the set's, ``text`` being the concatenated references."""
    clips: dict[str, dict[str, Any]] = {}
    for label in load_labels():
        if label["kind"] == "speech" and label["language"] == language and label["channel"] != "noisy_mp3_8k":
            clips.setdefault(label["text"], label)
    if not clips:
        raise ValueError(f"no speech clips in language {language!r}")
    total = round(seconds * RATE)
    rng = np.random.default_rng(20261123)
    pieces: list[np.ndarray] = []
    texts: list[str] = []
    used: list[str] = []
    onset: float | None = None
    size = 0
    decoded: dict[str, np.ndarray] = {}
    progress = True
    while progress:  # rounds over the texts until no whole message fits any more
        progress = False
        for label in clips.values():
            if label["file"] not in decoded:
                audio, rate = sf.read(clip_path(label), dtype="float32")
                if rate != RATE or audio.ndim != 1:
                    raise ValueError(f"{label['file']}: expected 8 kHz mono, got {rate} Hz {audio.shape}")
                decoded[label["file"]] = audio
            audio = decoded[label["file"]]
            start = 0 if onset is None else int(label["onset"] * RATE)
            speech = audio[start : int(label["speech_end"] * RATE) + int(0.2 * RATE)]
            pause = _line(int(rng.uniform(0.5, 1.5) * RATE), rng)
            if size + speech.size > total:
                continue
            if onset is None:
                onset = label["onset"]
            pieces += [speech, pause]
            size += speech.size + pause.size
            texts.append(label["text"])
            used.append(label["file"])
            progress = True
    audio = np.concatenate([*pieces, _line(max(0, total - size), rng)])[:total] if pieces else _line(total, rng)
    sf.write(str(out_path), audio, RATE, subtype="ULAW")
    return {
        "file": str(out_path),
        "kind": "speech" if texts else "empty",
        "message": bool(texts),
        "language": language if texts else None,
        "text": " ".join(texts) if texts else None,
        "callback": None,
        "voice": "mixed",
        "channel": "ulaw8k",
        "onset": onset,
        "duration": audio.size / RATE,
        "parts": used,
    }
