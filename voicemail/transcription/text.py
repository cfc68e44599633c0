"""A transcript's words, as every measure of it counts them (the decisions, the reliability
label, the word error of the benchmark)."""

from __future__ import annotations

import re

_ANNOTATION = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|♪+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-case words of a transcript, annotations such as `[BLANK_AUDIO]` removed."""
    return [w.lower() for w in _WORD.findall(_ANNOTATION.sub(" ", text))]
