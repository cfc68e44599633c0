"""A clinic's words as a prompt for a second decoding of a message (measured, left off).

Whisper conditions its decoding on a prompt: text it takes for what was said just before.
Given the words a clinic's messages are read for (its request types' words and its urgency
words), a second decoding of speech the first pass already confirmed as a message might
write "recept" or "neschopenku" where the first wrote "rétat" or "neskotentu". Whether it
does, what it costs, and how often it writes a clinic word the caller never said is what
`bench/transcription_bench.py --variant 'steer={"steer": true}'` measures
(docs/transcription.md, "The clinic's words as a prompt"). The worker does not use it.
"""

from __future__ import annotations

from triage.reading import Vocabulary

# Whisper keeps at most half its 448-token text context for a prompt; a Czech word is
# three to five tokens.
MAX_WORDS = 40
# One word per stem: "neschopenka, neschopenku, eneschopenka" spends tokens on one word.
STEM = 5


def prompt(lines: list[str]) -> str | None:
    """The words of `lines` (a clinic's, in its order) as one prompt sentence: phrases
    kept whole, "a + b" lines left out (their parts are not said together), one per stem."""
    seen: set[str] = set()
    kept: list[str] = []
    for line in lines:
        if "+" in line:
            continue
        stem = line.split()[0][:STEM].casefold()
        if stem in seen:
            continue
        seen.add(stem)
        kept.append(line)
        if len(kept) == MAX_WORDS:
            break
    if not kept:
        return None
    text = ", ".join(kept)
    return text[0].upper() + text[1:] + "."


def prompts(vocabulary: Vocabulary, per_type: int = 6) -> dict[str, str]:
    """Per language: the first `per_type` lines of each request type, then the urgency
    words, as one prompt."""
    languages = {lang for words in vocabulary.types.values() for lang in words} | set(vocabulary.urgency)
    out: dict[str, str] = {}
    for lang in sorted(languages):
        lines = [w for words in vocabulary.types.values() for w in words.get(lang, [])[:per_type]]
        text = prompt(lines + vocabulary.urgency.get(lang, []))
        if text:
            out[lang] = text
    return out
