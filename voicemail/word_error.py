"""Word error rate of transcripts in Czech, Slovak or English, with numbers compared as
digits whichever way they were written (`voicemail.number_words`): the measure of the
docs/transcription.md's figures, the tests and the benchmarks."""

from __future__ import annotations

import re
import unicodedata

from voicemail.number_words import words_to_digits

__all__ = ["normalize_for_wer", "word_error_rate"]


_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "ʼ": "'", "`": "'", "´": "'"})
# "[BLANK_AUDIO]", "(music)", "(kašel)", "*cough*", "♪"; brackets holding digits are text ("(777) 123").
_ANNOTATION = re.compile(r"\[[^\]\d]*\]|\([^)\d]*\)|\*[^*\d]*\*|<\|[^|]*\|>|[♪♫]+")
_WER_WORD = re.compile(r"\d|[^\W\d_]+(?:'[^\W\d_]+)*")
_ABBREVIATIONS = {"dr": "doctor", "mr": "mister", "mrs": "missus", "ok": "okay"}


def normalize_for_wer(text: str) -> list[str]:
    """The words of `text` for word error rate, in any of the languages: lower case,
    without punctuation and annotations, abbreviations written out, and every number
    one digit per word, so "sedm set dvacet čtyři", "724" and "7 2 4" all give
    ["7", "2", "4"]."""
    text = _ANNOTATION.sub(" ", unicodedata.normalize("NFC", text).translate(_APOSTROPHES))
    words = _WER_WORD.findall(words_to_digits(text, eager=True).lower())
    return [_ABBREVIATIONS.get(word, word) for word in words]


def word_error_rate(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word edits, reference words) between the two after `normalize_for_wer`;
    the rate is edits / words."""
    ref, hyp = normalize_for_wer(reference), normalize_for_wer(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1], len(ref)
