"""The two decisions on a transcript, kept apart: is there a message (language-independent
signals), and can its text be trusted. Also the text signals they read."""

from __future__ import annotations

import math
import re
import zlib

import numpy as np

from voicemail import number_words
from voicemail.transcription import reliability
from voicemail.transcription.results import Transcript
from voicemail.transcription.text import words

BLANK_AUDIO = re.compile(r"\[BLANK_AUDIO\]")  # whisper.cpp's marker for a silent window, not text


def normalize_language(language: str | None) -> str | None:
    """`"de-DE"`/`"DE"`/`"de_AT"` -> `"de"`; empty or `"auto"` -> None."""
    if language is None:
        return None
    code = language.strip().replace("_", "-").split("-")[0].lower()
    return None if code in ("", "auto") else code


def repetition_score(text: str) -> float:
    """Share of word trigrams that repeat an earlier one (0 when fewer than 6 words)."""
    ws = words(text)
    if len(ws) < 6:
        return 0.0
    grams = [tuple(ws[i : i + 3]) for i in range(len(ws) - 2)]
    return round(1.0 - len(set(grams)) / len(grams), 3)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return round(len(data) / len(zlib.compress(data)), 3) if data else 0.0


_TOKEN = re.compile(r"\S+")
_NUMERIC = re.compile(r"^[+(]?\d[\d\-/.,)]*$")


def collapse_loops(text: str, max_copies: int = 2) -> tuple[str, bool]:
    """Remove runs of a phrase (1-8 words) repeated more than `max_copies` times in a
    row, keeping `max_copies` of them; numbers are never collapsed ("sedm sedm sedm"
    is a phone number, not a loop). Returns the text and whether anything was removed."""
    tokens = _TOKEN.findall(text)
    keys = [re.sub(r"[^\w]", "", t.lower()) for t in tokens]
    numeric = [
        bool(_NUMERIC.match(t)) or number_words.words_to_digits(k).strip().isdigit() for t, k in zip(tokens, keys)
    ]
    out_tokens: list[str] = []
    out_keys: list[str] = []
    out_numeric: list[bool] = []
    changed = False
    i = 0
    while i < len(tokens):
        collapsed = False
        for n in range(1, 9):
            gram = keys[i : i + n]
            if len(gram) < n or not any(gram) or all(numeric[i : i + n]):
                continue
            copies = 1
            while keys[i + copies * n : i + (copies + 1) * n] == gram:
                copies += 1
            if copies > max_copies:
                keep = tokens[i : i + n * max_copies]
                out_tokens += keep
                out_keys += keys[i : i + n * max_copies]
                out_numeric += numeric[i : i + n * max_copies]
                i += copies * n
                changed = collapsed = True
                break
        if not collapsed:
            out_tokens.append(tokens[i])
            out_keys.append(keys[i])
            out_numeric.append(numeric[i])
            i += 1
    return " ".join(out_tokens), changed


# ---------------------------------------------------------------- the decisions

# Is there a message? Language-independent signals only (docs/transcription.md has the
# measurements on the labelled set). At least MIN_MESSAGE_SPEECH_SECONDS of speech by
# the VAD is a message whatever the decoder makes of it: a name and a reason take that
# long to say, and a real message filed as a missed call is the worse error (measured: a
# Czech caller's 10.5 s of speech decoded to nothing, base's no-speech gate). Between
# MIN_SPEECH_SECONDS and that, the decoder must find at least MIN_WORDS words that are
# not a stock hallucination (distinct words: a one-word loop on babble is not two).
# Below: silence, noise, tones, a bare "Hello?".
MIN_SPEECH_SECONDS = 1.0
MIN_MESSAGE_SPEECH_SECONDS = 5.0
MIN_WORDS = 2

# Time-reversed speech sounds like speech to a VAD, and whisper writes words for it. Played
# backwards, a real message loses its language (whisper's language detection grows less
# sure), while reversed speech regains one: the language it was said in, one of the
# clinic's. So when the recording played backwards is detected with at least
# REVERSAL_MARGIN less entropy (nats over all languages) than played forwards, and at least
# REVERSED_LANGUAGE_SHARE of the backward detection is the clinic's languages, it carries
# no words. Measured on the labelled set (144 messages, 22 voices; docs/transcription.md): real messages
# 0.40 nat surer backwards at most but one, a noisy Czech message 1.48 nat surer backwards
# as Romanian (0.85; Czech and English 0.01); the reversed recordings caught, 1.21-2.94 nat
# surer, Czech or English at 0.67-0.99 backwards. A clinic that lists no language: the
# margin alone.
REVERSAL_MARGIN = 1.0
REVERSED_LANGUAGE_SHARE = 0.5

# Mean log-probability of the text tokens below which a transcript is unreliable whatever
# the reliability label's other signals say (reliability.py has the label).
RELIABLE_MEAN_LOGPROB = -0.8

# Whole-transcript texts Whisper is known to invent on silence and noise.
_HALLUCINATIONS = {
    "thank you",
    "thanks for watching",
    "thank you for watching",
    "thank you so much for watching",
    "you",
    "bye",
    "bye bye",
    "subtitles by the amara org community",
    "please subscribe",
    "titulky vytvořil johnyx",
    "děkuji za pozornost",
    "děkuji",
    "díky",
}


def decide_message(t: Transcript) -> tuple[bool, str]:
    """(is a message, reason): `speech`, or `no_speech`, `too_little_speech`,
    `reversed_speech`, `no_words`, `too_short`, `hallucination`."""
    if t.speech_seconds is not None and t.speech_seconds == 0:
        return False, "no_speech"
    if t.speech_seconds is not None and t.speech_seconds < MIN_SPEECH_SECONDS:
        return False, "too_little_speech"
    if reversed_speech(t.language_entropy, t.reversed_language_entropy, t.reversed_language_share):
        return False, "reversed_speech"
    if t.engine_error or (t.aborted and not t.text):
        return True, "speech"  # speech heard, decoding failed: the clinic must listen
    if t.speech_seconds is not None and t.speech_seconds >= MIN_MESSAGE_SPEECH_SECONDS:
        return True, "speech"
    ws = words(t.text)
    if not ws:
        return False, "no_words"
    if len(set(ws)) < MIN_WORDS:  # "Haló, haló", or a loop of one word on babble
        return False, "too_short"
    if _hallucination(ws):
        return False, "hallucination"
    return True, "speech"


def entropy(probs: np.ndarray | None) -> float:
    """Entropy (nats) of a language-probability vector."""
    if probs is None:
        return math.nan
    p = probs[probs > 0]
    return float(-(p * np.log(p)).sum())


def reversed_speech(
    forward_entropy: float | None, backward_entropy: float | None, backward_share: float | None = None
) -> bool:
    """Whether language detection is surer of the recording played backwards (see
    REVERSAL_MARGIN), in the clinic's languages (`backward_share`: their probability
    played backwards; None when the clinic lists none). False when either entropy is
    unknown."""
    if forward_entropy is None or backward_entropy is None:
        return False
    if backward_share is not None and backward_share < REVERSED_LANGUAGE_SHARE:
        return False  # surer of a language nobody calls this clinic in: not its callers' words reversed
    return backward_entropy <= forward_entropy - REVERSAL_MARGIN


def _hallucination(ws: list[str]) -> bool:
    return " ".join(ws) in _HALLUCINATIONS


def assess(t: Transcript, looped: bool) -> tuple[str, str | None]:
    """(status, issue) of a message's transcript: `failed` (no usable text), or the
    reliability label (`reliable`, `check`, `unreliable`; reliability.py) from
    `t.label_signals`, `unreliable` outright for an incomplete, doubtful or looping
    decode or a very unsure one."""

    if t.engine_error:
        return "failed", "engine_error"
    if t.aborted and not t.text:
        return "failed", "timeout"
    if t.aborted:
        return "unreliable", "incomplete"
    ws = words(t.text)
    if not ws or _hallucination(ws):
        return "failed", "no_words"  # speech the decoder could not write down: listen
    if t.second_pass:
        return "unreliable", "doubtful_speech"
    if looped:
        return "unreliable", "loop"
    if not math.isnan(t.mean_logprob) and t.mean_logprob < RELIABLE_MEAN_LOGPROB:
        return "unreliable", "low_confidence"
    level = reliability.label(t.label_signals or {}, t.language)
    return level, None if level == "reliable" else "low_confidence"


def failed(duration: float, speech_seconds: float | None, issue: str) -> Transcript:
    """A message whose transcription failed outright (the call's attempts ran out, the
    recording is too long to decode)."""
    return Transcript(
        text="",
        language=None,
        duration=duration,
        speech_seconds=speech_seconds,
        message=True,
        message_reason="speech",
        status="failed",
        issue=issue,
    )
