"""Number words as callers say them, turned into digits.

Whisper writes a spoken number as digits ("777 123 456"), as number words ("sedm sedm
sedm, jedna dva tři"), or as a mix ("sedm set dvacet čtyři 123 456"), in Czech, Slovak or
English, with or without diacritics. `words_to_digits` turns the number words into
digit groups the way people group phone numbers; `voicemail.spoken_numbers` reads the
callback number out of the result and `voicemail.word_error` compares transcripts by it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["fold", "words_to_digits"]


def fold(text: str) -> str:
    """Lower case without diacritics, one character for one, so that positions in the
    folded text are positions in the original (Whisper often drops Czech diacritics)."""
    return "".join((unicodedata.normalize("NFD", c)[:1] or c).lower()[:1] or c for c in text)


# ------------------------------------------------------------------ the lexicon


@dataclass(frozen=True)
class _Morph:
    """One number word, or one piece of a compound number word ("dvadsaťjeden")."""

    # unit, teen, tens, tens_unit ("pětadvacet"), hundreds ("sto", "dvesto"), hundred_suffix
    # ("set"/"sta"/"stě" after a unit), hundred, thousand; and the words that only glue
    # numbers: a ("a hundred"), and, repeat ("double"), plus
    kind: str
    value: int
    english: bool = False


# Czech and Slovak forms together: a transcript may hold either, or a mix.
_CS_UNITS = (
    "nula",
    "jedna jeden jedno jednu",
    "dva dvě dve",
    "tři tri",
    "čtyři štyri",
    "pět päť",
    "šest šesť",
    "sedm sedem sedum",
    "osm osem osum",
    "devět deväť",
)
_CS_TEENS = (
    "deset desať",
    "jedenáct jedenásť",
    "dvanáct dvanásť",
    "třináct trinásť",
    "čtrnáct štrnásť",
    "patnáct pätnásť",
    "šestnáct šestnásť",
    "sedmnáct sedemnásť",
    "osmnáct osemnásť",
    "devatenáct devätnásť",
)
_CS_TENS = (
    "dvacet dvadsať",
    "třicet tridsať",
    "čtyřicet štyridsať",
    "padesát päťdesiat",
    "šedesát šesťdesiat",
    "sedmdesát sedemdesiat",
    "osmdesát osemdesiat",
    "devadesát deväťdesiat",
)
# Whole hundreds as one word: Slovak writes them so ("dvesto"); Czech "dvě stě" is two
# words, but Whisper sometimes joins it.
_CS_HUNDREDS = (
    "sto",
    "dvěstě dvesto",
    "třista tristo",
    "čtyřista štyristo",
    "pětset päťsto",
    "šestset šesťsto",
    "sedmset sedemsto",
    "osmset osemsto",
    "devětset deväťsto",
)
# Czech inverted tens ("pětadvacet" = 25): unit stem + "a" + tens.
_CS_INVERTED_STEMS = ("jedna jeden", "dva", "tři", "čtyři", "pět", "šest", "sedm", "osm", "devět")
_EN_UNITS = ("zero nought oh o", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_EN_TEENS = (
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
)
_EN_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")

# Number words only when next to a number: "o"/"oh" (zero in "seven oh four", otherwise a
# Czech preposition or an interjection) and "ten" (also the Czech "that").
_WEAK = {"o": "both", "oh": "either", "ten": "english"}
# Forms whose diacritic-free spelling is an everyday word: matched only with diacritics.
_EXACT_ONLY = {"päť"}


def _lexicon() -> dict[str, _Morph]:
    words: dict[str, _Morph] = {}

    def add(forms: str, morph: _Morph) -> None:
        for form in forms.split():
            words[form] = morph
            if form not in _EXACT_ONLY:
                words.setdefault(fold(form), morph)

    for english, units, teens, tens in (
        (False, _CS_UNITS, _CS_TEENS, _CS_TENS),
        (True, _EN_UNITS, _EN_TEENS, _EN_TENS),
    ):
        for n, forms in enumerate(units):
            add(forms, _Morph("unit", n, english))
        for n, forms in enumerate(teens):
            add(forms, _Morph("teen", 10 + n, english))
        for n, forms in enumerate(tens):
            add(forms, _Morph("tens", 20 + 10 * n, english))
    for n, forms in enumerate(_CS_HUNDREDS):
        add(forms, _Morph("hundreds", 100 * (n + 1)))
    for n, stems in enumerate(_CS_INVERTED_STEMS):
        for t, tens_forms in enumerate(_CS_TENS):
            czech_tens = tens_forms.split()[0]
            add(" ".join(f"{stem}a{czech_tens}" for stem in stems.split()), _Morph("tens_unit", 21 + n + 10 * t))
    add("stě sta set", _Morph("hundred_suffix", 100))
    add("hundred", _Morph("hundred", 100, True))
    add("tisíc tisíce tisícu", _Morph("thousand", 1000))
    add("thousand", _Morph("thousand", 1000, True))
    add("a", _Morph("a", 1, True))
    add("and", _Morph("and", 0, True))
    add("double", _Morph("repeat", 2, True))
    add("triple", _Morph("repeat", 3, True))
    add("plus", _Morph("plus", 0))
    return words


_WORDS = _lexicon()
_NUMBER_KINDS = {"unit", "teen", "tens", "tens_unit", "hundreds", "hundred", "thousand"}
# Pieces a compound word may be made of ("dvadsaťjeden", "stodvadsaťtri", "dvetisíc").
_PIECES = {
    w: m for w, m in _WORDS.items() if m.kind in _NUMBER_KINDS | {"hundred_suffix"} and w not in _WEAK and w == fold(w)
}


@lru_cache(maxsize=8192)
def _lookup(word: str) -> tuple[_Morph, ...] | None:
    """The morphs of one word, or None when it is no number word."""
    lower = word.lower()
    morph = _WORDS.get(lower) or _WORDS.get(fold(lower))
    if morph is not None:
        return (morph,)
    return _compound(fold(lower))


def _compound(word: str) -> tuple[_Morph, ...] | None:
    """A word written as several number words run together, when they make exactly one
    number: Slovak "dvadsaťjeden", "stodvadsaťtri", Czech "sedmset", English "twentyfour"."""
    if len(word) < 5:
        return None
    # best[i]: the fewest pieces that spell word[i:]
    best: list[tuple[_Morph, ...] | None] = [None] * len(word) + [()]
    for i in range(len(word) - 1, -1, -1):
        for j in range(i + 2, len(word) + 1):
            piece, rest, shortest = _PIECES.get(word[i:j]), best[j], best[i]
            if piece is not None and rest is not None and (shortest is None or len(rest) + 1 < len(shortest)):
                best[i] = (piece, *rest)
    morphs = best[0]
    if morphs is None or len(morphs) < 2:
        return None
    groups = _parse(list(morphs))
    return morphs if [(g[0], g[1]) for g in groups] == [(0, len(morphs))] else None


# ------------------------------------------------------------------ the grammar


def _kind(ms: list[_Morph], i: int) -> str:
    return ms[i].kind if i < len(ms) else ""


def _starts_hundreds(ms: list[_Morph], i: int) -> bool:
    """Whether ms[i] begins "<unit> set/sta/stě" or "<unit> hundred"."""
    if _kind(ms, i) != "unit" or ms[i].value == 0:
        return False
    after = _kind(ms, i + 1)
    return after == "hundred" or (after == "hundred_suffix" and not ms[i].english)


def _tens(ms: list[_Morph], i: int, after_larger: bool) -> tuple[int | None, int]:
    """Tens and units from ms[i]: a teen, tens with an optional unit, or a unit alone
    (after hundreds, a unit is added only when it is not zero: "sto nula" is 100, 0)."""
    kind = _kind(ms, i)
    if kind in ("teen", "tens_unit"):
        return ms[i].value, i + 1
    if kind == "tens":
        if _kind(ms, i + 1) == "unit" and ms[i + 1].value > 0 and not _starts_hundreds(ms, i + 1):
            return ms[i].value + ms[i + 1].value, i + 2
        return ms[i].value, i + 1
    if kind == "unit" and not _starts_hundreds(ms, i) and (ms[i].value > 0 or not after_larger):
        return ms[i].value, i + 1
    return None, i


def _below_thousand(ms: list[_Morph], i: int, after_larger: bool) -> tuple[int | None, int]:
    """A number below 1000 from ms[i]: hundreds, then tens and units, each at most once and
    in that order. A word that cannot follow (a second unit, tens after units) ends it."""
    j, hundreds = i, None
    kind = _kind(ms, j)
    if kind == "a" and _kind(ms, j + 1) == "thousand":
        return 1, j + 1  # "a thousand": the caller multiplies
    if kind == "a" and _kind(ms, j + 1) == "hundred":
        hundreds, j = 100, j + 2
    elif kind == "hundreds":
        hundreds, j = ms[j].value, j + 1
    elif _starts_hundreds(ms, j):
        hundreds, j = ms[j].value * 100, j + 2
    elif kind == "hundred":
        hundreds, j = 100, j + 1
    larger = after_larger or hundreds is not None
    if larger and _kind(ms, j) == "and":  # "six hundred and two"
        rest, after = _tens(ms, j + 1, True)
        return ((hundreds or 0) + rest, after) if rest is not None else (hundreds, j)
    rest, j = _tens(ms, j, larger)
    if hundreds is None and rest is None:
        return None, i
    return (hundreds or 0) + (rest or 0), j


def _number(ms: list[_Morph], i: int) -> tuple[int | None, int]:
    """One number from ms[i], with an optional thousands part ("dva tisíce dvacet šest")."""
    value, j = _below_thousand(ms, i, False)
    if _kind(ms, j) != "thousand" or value == 0:
        return value, j
    total = (1 if value is None else value) * 1000
    rest, j = _below_thousand(ms, j + 1, True)
    return total + (rest or 0), j


def _parse(ms: list[_Morph]) -> list[tuple[int, int, str]]:
    """The digit groups in a run of number words: (first morph, end, digits). Morphs that
    belong to no number (a lone "and", "plus" after a number) are left out."""
    groups: list[tuple[int, int, str]] = []
    i = 0
    while i < len(ms):
        start = i
        # "plus" is a prefix only where a number starts, not in "tři plus dva".
        plus = ms[i].kind == "plus" and not (groups and groups[-1][1] == i)
        i += plus
        prefix = "+" if plus else ""
        if _kind(ms, i) == "repeat" and _kind(ms, i + 1) == "unit" and not _starts_hundreds(ms, i + 1):
            groups.append((start, i + 2, prefix + str(ms[i + 1].value) * ms[i].value))
            i += 2
            continue
        value, end = _number(ms, i)
        if value is None:
            i = start + 1
            continue
        groups.append((start, end, prefix + str(value)))
        i = end
    return groups


# ------------------------------------------------------------------ words to digits

_TOKEN = re.compile(r"[^\W\d_]+|\d+|\s+|.", re.DOTALL)
_GAP = re.compile(r"\s+|[-‐‑–]")  # between words of one run: "twenty-four", "sedm - sedm"


def words_to_digits(text: str, *, eager: bool = False) -> str:
    """Replace runs of number words by digit groups; all other text stays as it was.

    Digit by digit stays digit by digit, compounds become one group, and the text between
    groups is kept: "sedm sedm sedm, jedna dva tři" -> "7 7 7, 1 2 3", "sedm set dvacet
    čtyři sto dvacet tři" -> "724 123", "dvacet tři dvacet" -> "23 20", "plus čtyři sta
    dvacet" -> "+420", "double seven" -> "77", "six hundred and two" -> "602".
    `eager` takes "ten" as a number everywhere (for word error rate, where both sides
    are read alike and "at ten" must equal "at 10").
    """
    return _Transcript(text, eager).with_digits()


class _Transcript:
    """A text cut into tokens (words, digit strings, spaces, single other characters),
    with the number words found in it."""

    def __init__(self, text: str, eager: bool) -> None:
        self.tokens = _TOKEN.findall(unicodedata.normalize("NFC", text))
        self.morphs = {
            t: m for t, tok in enumerate(self.tokens) if tok[0].isalpha() and (m := _lookup(tok)) is not None
        }
        weak = {
            t: _WEAK[self.tokens[t].lower()]
            for t in self.morphs
            if self.tokens[t].lower() in _WEAK and not (eager and self.tokens[t].lower() == "ten")
        }
        self.numeric = {t for t, m in self.morphs.items() if t not in weak and m[0].kind in _NUMBER_KINDS}
        self.numeric |= {t for t, tok in enumerate(self.tokens) if tok.isdigit()}
        changed = True
        while changed:  # "seven oh oh four": one weak word may make the next one a number
            changed = False
            for t, rule in weak.items():
                if t not in self.numeric and self._weak_is_number(t, rule):
                    self.numeric.add(t)
                    changed = True
        self.usable = {t for t in self.morphs if t not in weak or t in self.numeric}

    def neighbour(self, t: int, step: int) -> int | None:
        """The nearest token before (step -1) or after (+1) across spaces and hyphens."""
        t += step
        while 0 <= t < len(self.tokens) and _GAP.fullmatch(self.tokens[t]):
            t += step
        return t if 0 <= t < len(self.tokens) else None

    def _is_number(self, t: int | None, english: bool = False) -> bool:
        if t is None or t not in self.numeric:
            return False
        return not english or (t in self.morphs and self.morphs[t][0].english)

    def _weak_is_number(self, t: int, rule: str) -> bool:
        before, after = self.neighbour(t, -1), self.neighbour(t, 1)
        if rule == "both":
            return self._is_number(before) and self._is_number(after)
        english = rule == "english"
        return self._is_number(before, english) or self._is_number(after, english)

    def with_digits(self) -> str:
        replacements: dict[int, tuple[int, str]] = {}  # first token -> (last token, text)
        t = 0
        while t < len(self.tokens):
            if t not in self.usable:
                t += 1
                continue
            run = [t]
            while (nxt := self.neighbour(run[-1], 1)) is not None and nxt in self.usable:
                run.append(nxt)
            replacements.update(self._replace_run(run))
            t = run[-1] + 1
        self._digit_prefixes(replacements)
        out: list[str] = []
        t = 0
        while t < len(self.tokens):
            if t in replacements:
                last, digits = replacements[t]
                out.append(digits)
                t = last + 1
            else:
                out.append(self.tokens[t])
                t += 1
        return "".join(out)

    def _replace_run(self, run: list[int]) -> dict[int, tuple[int, str]]:
        """Digit groups for one run of number words (token indices): first token -> (last
        token, digits). A compound word is never split between two groups; if the grammar
        would split one, that word is taken as text and the run parsed again."""
        flat = [(t, k) for t in run for k in range(len(self.morphs[t]))]
        groups = _parse([self.morphs[t][k] for t, k in flat])
        for start, end, _ in groups:
            (t0, k0), (t1, k1) = flat[start], flat[end - 1]
            if k0 != 0 or k1 != len(self.morphs[t1]) - 1:
                bad = run.index(t0 if k0 != 0 else t1)
                self.usable.discard(run[bad])
                out: dict[int, tuple[int, str]] = {}
                for part in (run[:bad], run[bad + 1 :]):
                    if part:
                        out.update(self._replace_run(part))
                return out
        return {flat[start][0]: (flat[end - 1][0], digits) for start, end, digits in groups}

    def _digit_prefixes(self, replacements: dict[int, tuple[int, str]]) -> None:
        """ "plus 420" -> "+420" and "double 7" -> "77", where Whisper wrote the digits."""
        covered = {i for first, (last, _) in replacements.items() for i in range(first, last + 1)}
        for t, m in self.morphs.items():
            after = self.neighbour(t, 1)
            if t in covered or after is None or after in covered or not self.tokens[after].isdigit():
                continue
            if m[0].kind == "plus" and not self._is_number(self.neighbour(t, -1)):
                replacements[t] = (after - 1, "+")
            elif m[0].kind == "repeat" and len(self.tokens[after]) == 1:
                replacements[t] = (after, self.tokens[after] * m[0].value)
