"""What a transcript suggests: a request type of the clinic's, and whether it may be urgent.

A type is suggested when its words count at least `SURE` in the transcript (one word
matched by its forms, or two by their letters) and at least `LEAD` times as much as any
other type's: an unsure message is left "other", since no suggestion is better than a wrong
one. A request said not to be needed or already settled ("recept už mám") does not count:
a type's words in a clause with one of the `SETTLED` phrases are set aside. A type that
outranks another (a cancellation outranks the appointment it names: `Vocabulary.outranks`)
takes that type's words as its own once any of its own words is found. A message may be
urgent when the words that may mean urgency count at least `SURE`, calm phrases ("nothing
urgent") set aside. The words found are kept as character ranges of
the transcript, so the console can mark them and the API can name them.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

from triage import matching
from triage.vocabulary import CALM, SETTLED

SURE = 1.0
LEAD = 2.0
URGENT = "urgent"
_CALM = "calm"
_SETTLED = "settled"


@dataclass(frozen=True)
class Vocabulary:
    """A clinic's words: per request type (its id) and per language, and the urgency words
    per language."""

    types: dict[str, dict[str, list[str]]]
    urgency: dict[str, list[str]]
    # type id -> the type ids whose words it takes over when any of its own is found
    outranks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        text = json.dumps([self.types, self.urgency, self.outranks], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Reading:
    """What one transcript says: the suggested type (None: "other") with the ranges of its
    words, and whether it may be urgent with the ranges of the words that say so."""

    type_id: str | None
    type_spans: list[tuple[int, int]] = field(default_factory=list)
    urgent: bool = False
    urgent_spans: list[tuple[int, int]] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)


def _languages(words: dict[str, list[str]], language: str | None) -> list[str]:
    """The transcript's language when the list has it, else every language of the list."""
    return [language] if language in words else sorted(words)


@lru_cache(maxsize=64)
def _compiled(vocabulary_json: str, language: str | None) -> tuple[matching.Line, ...]:
    types, urgency = json.loads(vocabulary_json)
    lines = []
    for type_id, words in sorted(types.items()):
        for lang in _languages(words, language):
            lines += [matching.line(text, type_id, lang) for text in words[lang]]
    for lang in _languages(urgency, language):
        lines += [matching.line(text, URGENT, lang) for text in urgency[lang]]
    for lang in _languages(CALM, language):
        lines += [matching.line(text, _CALM, lang) for text in CALM[lang]]
    for lang in _languages(SETTLED, language):
        lines += [matching.line(text, _SETTLED, lang) for text in SETTLED[lang]]
    return tuple(lines)


def read(text: str, language: str | None, vocabulary: Vocabulary) -> Reading:
    payload = json.dumps([vocabulary.types, vocabulary.urgency], sort_keys=True, ensure_ascii=False)
    lines = _compiled(payload, language)
    toks = matching.tokens(text, language)
    found = matching.find(lines, toks)
    # Clauses holding a settled request (its words as written or by their forms, never
    # by letters: a misheard word must not take a request away).
    clause = matching.clauses(text, toks)
    settled = {clause[i] for m in found if m.line.key == _SETTLED and m.strength >= len(m.indexes) for i in m.indexes}
    typed = matching.claim(
        [
            m
            for m in found
            if m.line.key not in (URGENT, _CALM, _SETTLED) and not all(clause[i] in settled for i in m.indexes)
        ]
    )
    scores: dict[str, float] = defaultdict(float)
    for m in typed:
        scores[m.line.key] += m.strength
    taken_over: dict[str, str] = {}
    for higher, lower in sorted(vocabulary.outranks.items()):
        if scores.get(higher, 0.0) > 0:
            for other in lower:
                if other != higher and other in scores and other not in taken_over:
                    scores[higher] += scores.pop(other)
                    taken_over[other] = higher
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    type_id = None
    if ranked and ranked[0][1] >= SURE and (len(ranked) == 1 or ranked[0][1] >= LEAD * ranked[1][1]):
        type_id = ranked[0][0]
    type_spans = matching.spans(
        toks, (i for m in typed if type_id in (m.line.key, taken_over.get(m.line.key)) for i in m.indexes)
    )
    alarm = [m for m in matching.claim([m for m in found if m.line.key in (URGENT, _CALM)]) if m.line.key == URGENT]
    urgent = sum(m.strength for m in alarm) >= SURE
    return Reading(
        type_id=type_id,
        type_spans=type_spans if type_id else [],
        urgent=urgent,
        urgent_spans=matching.spans(toks, (i for m in alarm for i in m.indexes)) if urgent else [],
        scores={k: v for k, v in scores.items() if v},
    )
