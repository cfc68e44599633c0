"""Finding a word list's lines in a transcript: inflections and misspellings included.

A transcript's word and a line's word are the same word when

* the dictionary knows the transcript's word and they share a form: the word as written or
  one of its Hunspell stems, compared without diacritics ("bolestí" and "bolest" share
  "bolest"; "krvácí" and "krvácet" share "krvácet"). A stem that Hunspell found by taking
  a prefix off is another word and is not used: Czech negation ("nebolí" → "bolet") never
  reads as pain, "refills" is not "fill";
* the dictionary does not know it (a transcript of rough audio is full of non-words such as
  "brychá" for "břicha"): by its letters, without diacritics, the last letter of the
  line's word set aside for the ending (Czech inflects at the end), within one edit on
  words of up to eight letters and two on longer ones; a match found this way counts half
  (`FUZZY`). Only for words long and specific enough: a line's word of fewer than
  `MIN_FUZZY` letters matches only as written (or by a stem), and a transcript's word as
  near to an everyday word (`vocabulary.EVERYDAY`: greetings, "please", numbers) as to the
  line's is that everyday word misheard, never the line's.

A language without a dictionary compares letters only.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from rapidfuzz.distance import Levenshtein

from triage.vocabulary import EVERYDAY, GAP
from voicemail.transcription.reliability import analyse

FUZZY = 0.5  # what a word matched by its letters counts, against 1 for a word matched by its forms
MIN_FUZZY = 6  # letters a word needs to be matched by its letters (the line's word and the transcript's)
LONG_FUZZY = 9  # letters from which a line's word may be two edits off
_TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


def fold(text: str) -> str:
    """Lower case without diacritics ("Břicho" → "bricho")."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c)).replace("’", "'")


@dataclass(frozen=True)
class Token:
    text: str  # as the transcript has it
    start: int  # character offsets in the transcript
    end: int
    forms: frozenset[str]  # folded: as written, and its stems unless negated
    known: bool  # the dictionary knows it (or the language has none: then False)

    @property
    def letters(self) -> str:
        return fold(self.text)


@lru_cache(maxsize=50_000)
def _forms(word: str, language: str | None) -> tuple[frozenset[str], bool]:
    written = fold(word)
    found = analyse(word.lower(), language)
    if found is None:
        return frozenset({written}), False
    known, stems = found
    # A stem that does not begin as the word does had a prefix taken off, and the prefix
    # made another word: negation ("nebolí" is not "bolet"), a superlative ("nejdřív"), a
    # repetition ("refills" is not "fill").
    folded = {f for f in (fold(s) for s in stems) if f[:3] == written[:3]}
    return frozenset({written, *folded}), known


def tokens(text: str, language: str | None) -> list[Token]:
    out = []
    for m in _TOKEN.finditer(text):
        forms, known = _forms(m.group(), language)
        out.append(Token(m.group(), m.start(), m.end(), forms, known))
    return out


@dataclass(frozen=True)
class Word:
    """One word of a line, with the forms it is found by."""

    text: str
    forms: frozenset[str]

    def strength(self, token: Token) -> float:
        """1 when the token is this word (a form in common), FUZZY when only its letters are
        near enough (a word the dictionary does not know), else 0."""
        if token.forms & self.forms:
            return 1.0
        if token.known:
            return 0.0
        letters = token.letters
        if len(letters) < MIN_FUZZY:
            return 0.0
        everyday = _everyday_distance(letters)
        for form in self.forms:
            if len(form) < MIN_FUZZY:
                continue
            # The line's word without its last letter (an ending), against as many letters of
            # the transcript's word, which may be longer by an ending of up to three letters
            # (or a letter shorter: a word cut short).
            root = form[:-1]
            if not -1 <= len(letters) - len(root) <= 3:
                continue
            if letters.startswith(root):
                return 1.0  # another ending: an inflection the dictionary lacks
            allowed = 1 if len(form) < LONG_FUZZY else 2
            distance = Levenshtein.distance(letters[: len(root)], root, score_cutoff=allowed)
            if distance <= allowed and distance < everyday:
                return FUZZY
        return 0.0


_EVERYDAY = tuple(sorted({fold(w) for words in EVERYDAY.values() for line in words for w in line.split()}))


@lru_cache(maxsize=50_000)
def _everyday_distance(letters: str) -> int:
    """Edits from the word to the nearest everyday word (of any language: a transcript's
    language may be wrong), at most 3."""
    return min((Levenshtein.distance(letters, w, score_cutoff=3) for w in _EVERYDAY), default=4)


@dataclass(frozen=True)
class Phrase:
    """Words in this order, at most GAP other words between two of them."""

    words: tuple[Word, ...]

    def find(self, toks: list[Token]) -> list[tuple[tuple[int, ...], float]]:
        """Every place the phrase is, not overlapping: the indexes of the tokens that are
        its words, and the sum of their strengths."""
        found = []
        i = 0
        while i < len(toks):
            hit = self._at(toks, i)
            if hit is None:
                i += 1
                continue
            found.append(hit)
            i = hit[0][-1] + 1
        return found

    def _at(self, toks: list[Token], i: int) -> tuple[tuple[int, ...], float] | None:
        first = self.words[0].strength(toks[i])
        if not first:
            return None
        total, at = first, [i]
        for word in self.words[1:]:
            for j in range(at[-1] + 1, min(len(toks), at[-1] + GAP + 2)):
                s = word.strength(toks[j])
                if s:
                    total += s
                    at.append(j)
                    break
            else:
                return None
        return tuple(at), total


@dataclass(frozen=True)
class Line:
    """A word list's line: one phrase, or parts (" + ") that must all be in the message."""

    text: str
    parts: tuple[Phrase, ...]
    key: str  # what the line stands for: a request type's id, "urgent" or "calm"


@dataclass(frozen=True)
class Match:
    line: Line
    indexes: tuple[int, ...]  # the transcript's tokens that are the line's words
    strength: float  # the sum of their strengths


def line(text: str, key: str, language: str | None) -> Line:
    parts = []
    for part in text.split("+"):
        words = tuple(Word(w, _forms(w, language)[0]) for w in _TOKEN.findall(part))
        if words:
            parts.append(Phrase(words))
    return Line(text, tuple(parts), key)


def find(lines: Iterable[Line], toks: list[Token]) -> list[Match]:
    """Every line found in the tokens, each place once; a line of parts once, where all are."""
    out = []
    for ln in lines:
        places = [p.find(toks) for p in ln.parts]
        if not places or not all(places):
            continue
        if len(ln.parts) == 1:
            out += [Match(ln, at, s) for at, s in places[0]]
        else:
            firsts = [p[0] for p in places]
            out.append(Match(ln, tuple(sorted({i for at, _ in firsts for i in at})), sum(s for _, s in firsts)))
    return out


def claim(matches: list[Match]) -> list[Match]:
    """Each transcript word counts for one line only: the line with the most words around
    it (then the strongest), so "zrušit termín" is a cancellation and not also an
    appointment's "termín", and "nothing urgent" is calm, not urgent."""
    taken: set[int] = set()
    kept = []
    for m in sorted(matches, key=lambda m: (-len(m.indexes), -m.strength, m.indexes)):
        if taken.intersection(m.indexes):
            continue
        taken.update(m.indexes)
        kept.append(m)
    return sorted(kept, key=lambda m: m.indexes)


_CLAUSE_STOP = re.compile(r"[.,;:!?…]|\s[-–—]\s")
_BUT = frozenset({"ale", "avsak", "jenze", "but", "though", "however"})


def clauses(text: str, toks: list[Token]) -> list[int]:
    """The clause of each token, numbered from 0: a stop, comma or dash between two tokens,
    or a "but" ("ale"), begins a new one."""
    out: list[int] = []
    n, last_end = 0, 0
    for tok in toks:
        if out and (_CLAUSE_STOP.search(text[last_end : tok.start]) or tok.letters in _BUT):
            n += 1
        out.append(n)
        last_end = tok.end
    return out


def spans(toks: list[Token], indexes: Iterable[int]) -> list[tuple[int, int]]:
    """Character ranges of the tokens, neighbours joined ("co nejdřív" as one)."""
    out: list[tuple[int, int]] = []
    last = -2
    for i in sorted(set(indexes)):
        if i == last + 1 and out:
            out[-1] = (out[-1][0], toks[i].end)
        else:
            out.append((toks[i].start, toks[i].end))
        last = i
    return out
