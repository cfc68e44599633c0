"""The reliability label of a transcript: `reliable`, `check` or `unreliable`, predicted
from signals that were measured to go with its word error on the labelled set (docs/transcription.md,
"Transcription"; fitted by `bench/transcription_bench.py --fit-label`), not from one
log-probability threshold, which labelled 32 of 40 Czech transcripts reliable at a word
error of 0.7.

Signals (`signals`), all six in the model: the share of the words a Hunspell
dictionary of the language knows (Debian's `hunspell-cs` / `hunspell-en-us`, read by
libhunspell through `pyhunspell`: a garbled Czech transcript is full of non-words such as
"profím spět"), the
share of text tokens the decoder gave less than `LOW_P`, the mean token
log-probability, words per second of speech, the compression ratio and language
detection's probability of the language. The label is a
logistic score per language of the word error being at most 0.35 (`MODEL`), cut
at two thresholds. A language without a fitted model or a dictionary is never
`reliable`: nothing says it is."""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any

from voicemail.transcription.results import Transcript
from voicemail.transcription.text import words
from voicemail.word_error import word_error_rate

logger = logging.getLogger("transcription")

DICTIONARIES = Path("/usr/share/hunspell")  # Debian's hunspell-cs, hunspell-en-us
DICTIONARY_NAMES = {"cs": "cs_CZ", "en": "en_US"}
LOW_P = 0.4  # a text token below this probability is a doubtful one

# Per language, fitted on every message of the labelled set (bench/transcription_bench.py
# --fit-label, on the whole extended set of 144 messages; docs/transcription.md): the
# weights of the standardised signals, their means and scales, and
# the two cuts on the score: reliable at or above the first, unreliable below the second.
# The cuts are set on scores each transcript got from a model fitted without its message,
# as an unseen message gets them: the model's own scores of its fitting messages are too
# kind to them. Where fewer than five transcripts have a word error of 0.35 or less (Czech
# with base: 2 of 78), the score is of "at most CHECKABLE_WER" and the first cut is above
# 1: never reliable.
MODEL: dict[str, dict[str, Any]] = {
    "cs": {
        "signals": [
            "known_share",
            "low_share",
            "mean_logprob",
            "language_probability",
            "words_per_second",
            "compression_ratio",
        ],
        "mean": [0.5512, 0.2296, -0.5663, 0.3494, 2.3177, 1.7781],
        "scale": [0.1469, 0.1402, 0.2483, 0.3571, 0.6167, 1.4604],
        "weights": [1.5487, 0.0691, 0.0982, 1.3704, -1.0112, -0.9013],
        "bias": -2.4524,
        "cuts": [1.01, 0.3068],
    },
    "en": {
        "signals": [
            "known_share",
            "low_share",
            "mean_logprob",
            "language_probability",
            "words_per_second",
            "compression_ratio",
        ],
        "mean": [0.9852, 0.153, -0.4426, 0.8321, 2.892, 1.2196],
        "scale": [0.0291, 0.1068, 0.2013, 0.1856, 0.6047, 0.0915],
        "weights": [-0.0864, -0.3573, 0.2968, 0.949, -0.0675, -0.9662],
        "bias": 0.7044,
        "cuts": [0.7188, 0.0004],
    },
}


_dictionaries: dict[str, Any] = {}
_lock = threading.Lock()


def dictionary(language: str | None) -> Any | None:
    """The Hunspell dictionary of a language (loaded once per process), or None when the
    language has none installed.

    libhunspell itself, not the pure-Python `spylls` the label was first fitted with:
    the same answers on every word of the labelled set and garbled variants of them, for
    36 MB and 0.1 s to load the two dictionaries rather than 284 MB and 4 s, which kept a
    worker over its memory budget."""
    name = DICTIONARY_NAMES.get(language or "")
    if name is None:
        return None
    with _lock:
        if (language or "") not in _dictionaries:
            try:
                import hunspell

                path = DICTIONARIES / name
                if not path.with_suffix(".dic").is_file():  # libhunspell would load an empty one
                    raise OSError(f"{path}.dic not found")
                _dictionaries[language or ""] = hunspell.HunSpell(
                    str(path.with_suffix(".dic")), str(path.with_suffix(".aff"))
                )
            except (OSError, ImportError) as exc:
                logger.warning("no %s dictionary (%s): transcripts in it are never labelled reliable", name, exc)
                _dictionaries[language or ""] = None
        return _dictionaries[language or ""]


def known_share(text: str, language: str | None) -> float | None:
    """Share of the transcript's words (numbers left out) the language's dictionary knows,
    as written or capitalised (names); None without a dictionary or words."""
    d = dictionary(language)
    ws = [w for w in words(text) if not w.isdigit()]
    if d is None or not ws:
        return None
    with _lock:  # a Hunspell handle is not safe to share between threads
        known = sum(1 for w in ws if d.spell(w) or d.spell(w.capitalize()))
    return round(known / len(ws), 3)


def analyse(word: str, language: str | None) -> tuple[bool, list[str]] | None:
    """Whether the language's dictionary knows `word` (as written or capitalised) and its
    stems (Hunspell's); None without a dictionary. The transcript's reading for the inbox
    (triage/) takes words by their stems from the same dictionary the label reads."""
    d = dictionary(language)
    if d is None:
        return None
    with _lock:  # a Hunspell handle is not safe to share between threads
        known = bool(d.spell(word) or d.spell(word.capitalize()))
        stems = [s.decode("utf-8", "replace") if isinstance(s, bytes) else s for s in d.stem(word)]
    return known, stems


def asks(signal: str, language: str | None) -> bool:
    """Whether the label of a transcript in `language` reads `signal` (one that costs
    something to measure, such as the second opinion's decoder steps)."""
    return signal in MODEL.get(language or "", {}).get("signals", ())


def disagreement(text: str, second_opinion: str | None) -> float | None:
    """Word edits from the transcript to the second opinion (the same encoder output decoded
    greedily) over the transcript's words, at most 2: decodings that agree heard the same
    thing; where base is guessing, beam search and greedy decoding guess differently (on the
    labelled set the best single predictor of English word error, r = 0.56)."""
    if second_opinion is None:
        return None
    edits, n = word_error_rate(text, second_opinion)
    return round(min(2.0, edits / max(n, 1)), 3)


def signals(t: Transcript) -> dict[str, float | None]:
    probs = [tok[0] for s in t.segments for tok in s.tokens]
    n_words = len(words(t.text))
    return {
        "disagreement": disagreement(t.text, t.second_opinion),
        "known_share": known_share(t.text, t.language),
        "low_share": round(sum(p < LOW_P for p in probs) / len(probs), 3) if probs else None,
        "min_p": round(min(probs), 3) if probs else None,
        "mean_logprob": None if math.isnan(t.mean_logprob) else round(t.mean_logprob, 3),
        "words_per_second": round(n_words / t.speech_seconds, 2) if t.speech_seconds else None,
        "compression_ratio": t.compression_ratio,
        "language_probability": t.language_probability,
    }


def probability(values: dict[str, float | None], model: dict[str, Any]) -> float | None:
    """A language model's score of the transcript's signals; None when a signal it needs is
    missing."""
    x = [values.get(name) for name in model["signals"]]
    if any(v is None for v in x):
        return None
    z = model["bias"] + sum(w * (v - m) / s for w, v, m, s in zip(model["weights"], x, model["mean"], model["scale"]))
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


def label(
    values: dict[str, float | None], language: str | None, models: dict[str, dict[str, Any]] | None = None
) -> str:
    """`reliable`, `check` or `unreliable` for a transcript's signals."""
    model = (MODEL if models is None else models).get(language or "")
    p = None if model is None else probability(values, model)
    if model is None or p is None:
        return "check"
    reliable_at, unreliable_below = model["cuts"]
    return "reliable" if p >= reliable_at else "unreliable" if p < unreliable_below else "check"
