"""The callback number out of a voicemail transcript.

Whisper writes a spoken phone number as digits ("777 123 456", "+420 777-123-456"), as
number words ("sedm sedm sedm, jedna dva tři"), or as a mix ("sedm set dvacet čtyři
123 456"), in Czech, Slovak or English, with or without diacritics.
`voicemail.number_words.words_to_digits` turns number words into digit groups;
`find_callback_number` joins adjacent digit groups and lets `phonenumbers` decide
what is a valid number in the clinic's country (`plumbing.phones.to_e164`, as said).
"""

from __future__ import annotations

import re

from plumbing.phones import to_e164
from voicemail.number_words import fold, words_to_digits

__all__ = ["callback_numbers", "find_callback_number", "numbers_said"]


# Digit groups that one caller's number may be made of: digits with spaces, commas,
# periods, hyphens, slashes or brackets between them ("+420 777-123-456", "7 7 7, 1 2 3").
_RUN = re.compile(r"\+?\d+(?:[\s,.;/()\-–]+\+?\d+)*")
_GROUP = re.compile(r"\+?\d+")
_AND = re.compile(r",?\s+(?:a|and)\s+")
_CUE_WORD = re.compile(r"[^\W\d_]+")

_MONTHS = [
    "ledna",
    "unora",
    "brezna",
    "dubna",
    "kvetna",
    "cervna",
    "cervence",
    "srpna",
    "zari",
    "rijna",
    "listopadu",
    "prosince",
    "leden",
    "unor",
    "brezen",
    "duben",
    "kveten",
    "cerven",
    "cervenec",
    "srpen",
    "rijen",
    "listopad",
    "prosinec",
    "januara",
    "februara",
    "marca",
    "aprila",
    "maja",
    "juna",
    "jula",
    "augusta",
    "septembra",
    "oktobra",
    "novembra",
    "decembra",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH = "(?:" + "|".join(_MONTHS) + r")\b"
# Amounts: doses, ages, durations, temperatures, money. "let" is Czech "years", not "let me".
_AMOUNT_UNITS = (
    r"tablet\w*|tabliet\w*|pilul\w*|prask\w*|kapsl\w*|kapk\w*|davk\w*|mg|mcg|ml|kg|kil\w*|gram\w*|"
    r"let(?!\s+(?:me|us|you)\b)|lety|leta|rok\w*|mesic\w*|mesiac\w*|tyd\w*|tyzd\w*|den|dny|dni|dnu|"
    r"hod\w*|h|min|minut\w*|sekund\w*|stup\w*|procent\w*|percent|kc|korun\w*|eur\w*|krat|x|kus\w*|"
    r"patr\w*|cm|mm|years?|months?|weeks?|days?|hours?|minutes?|seconds?|tablets?|pills?|"
    r"capsules?|doses?|drops?|times|degrees?|am|pm|o'?clock"
)
_NOT_PHONE = [
    # dates: 15. 3. 2026, 15.3., 15/3/2026 (checked to be a day and month below)
    (re.compile(r"(?<![\d+])(\d{1,2})\s?\.\s?(\d{1,2})\s?\.(?:\s?\d{4}(?!\d)|\s?\d{2}(?!\d))?"), "date"),
    (re.compile(r"(?<![\d/+])(\d{1,2})/(\d{1,2})(?:/\d{2,4})?(?![\d/])"), "date"),
    # 15. března (2026), 15th of March, March 15
    (re.compile(r"(?<!\d)\d{1,2}\s?\.?\s*(?:th\s+|st\s+|nd\s+|rd\s+)?(?:of\s+)?" + _MONTH + r"(?:\s*\d{4})?"), ""),
    (re.compile(_MONTH + r"\s+\d{1,2}(?:st|nd|rd|th)?\b(?:,?\s*\d{4})?"), ""),
    (re.compile(r"(?<!\d)\d{1,2}(?:st|nd|rd|th)\b"), ""),
    # times: 10:30, 10.30 (checked to be a time of day below)
    (re.compile(r"(?<![\d.,:/+])(\d{1,2})(?::\s?|\.)(\d{2})(?!\d)(?![.,:/]\d)"), "time"),
    # birth numbers (rodné číslo): YYMMDD/XXX(X), "lomeno" as Whisper writes the slash spoken
    (re.compile(r"(?<!\d)((?:\d\s?){5}\d)\s*(?:/|lomeno|lomitko|slash)\s*(?:\d\s?){2,3}\d(?!\d)"), "birth"),
    (re.compile(r"(?<![\d,.])\d+(?:[.,]\d+)?\s*(?:%|(?:" + _AMOUNT_UNITS + r")(?!\w))"), ""),
]
# Numbers that are not the caller's phone even when they look like one.
_NOT_PHONE_CUE = re.compile(
    r"\b(?:rodn\w*\s+cisl\w*|rc|cisl\w*\s+pojist\w*|pojistenc\w*|birth\s+number|"
    r"date\s+of\s+birth|insurance\s+number|nhs\s+number)\b"
)
_STRONG_CUES = (
    "zavol",
    "volej",
    "volaj",
    "volat",
    "zpet",
    "zpatk",
    "spat",
    "ozvet",
    "ozvi",
    "kontaktuj",
    "call",
    "ring",
    "reach",
    "contact",
    "text",
)
_WEAK_CUES = ("cisl", "cisel", "telefon", "mobil", "link", "number", "phone", "mobile")
_WEAK_CUE_WORDS = {"at", "tel"}
_CUE_WINDOW = 6  # words before a number that may hold its cue


def _plausible(kind: str, match: re.Match[str]) -> bool:
    """Whether a date, time or birth number pattern holds one (else it may be a phone
    number's groups)."""
    if kind == "date":
        return 1 <= int(match.group(1)) <= 31 and 1 <= int(match.group(2)) <= 12
    if kind == "time":
        return int(match.group(1)) <= 24 and int(match.group(2)) <= 59
    if kind == "birth":  # YYMMDD; women's months +50, since 2004 also +20
        digits = re.sub(r"\D", "", match.group(1))
        month, day = int(digits[2:4]) % 50, int(digits[4:6])
        return (1 <= month <= 12 or 21 <= month <= 32) and 1 <= day <= 31
    return True


def _mask(folded: str) -> str:
    """The folded transcript with dates, times, birth numbers, amounts and numbers after
    "rodné číslo" overwritten by '#' (same length), so they neither are nor join a
    phone number."""
    chars = list(folded)

    def blank(start: int, end: int) -> None:
        chars[start:end] = "#" * (end - start)

    for pattern, kind in _NOT_PHONE:
        for match in pattern.finditer(folded):
            if _plausible(kind, match):
                blank(match.start(), match.end())
    masked = "".join(chars)
    for cue in _NOT_PHONE_CUE.finditer(masked):
        run = _RUN.search(masked, cue.end())
        if run and run.start() - cue.end() <= 30:
            blank(run.start(), run.end())
    return "".join(chars)


def _numbers_in_run(masked: str, start: int, end: int, country: str) -> list[tuple[int, int, str]]:
    """The phone numbers the digit groups in `masked[start:end]` are made of: (start,
    end, E.164) each.

    All the groups must be used: they are cut into valid numbers, as few as possible, or
    they give none. Digits left over mean a digit missed or one too many, and guessing
    which nine were meant would call a stranger."""
    groups = [(m.start(), m.end(), m.group()) for m in _GROUP.finditer(masked, start, end)]
    n = len(groups)
    best: list[list[tuple[int, int, str]] | None] = [None] * n + [[]]
    for i in range(n - 1, -1, -1):
        said = ""
        for j in range(i, n):
            if j > i and groups[j][2].startswith("+"):
                break
            said += groups[j][2]
            if len(said.lstrip("+")) > 17:
                break
            rest, current = best[j + 1], best[i]
            if rest is None or (current is not None and len(rest) + 1 >= len(current)):
                continue
            number = to_e164(said, country, any_00=False, valid=True, as_said=True)
            if number:
                best[i] = [(groups[i][0], groups[j][1], number), *rest]
    return best[0] or []


def _runs(masked: str, country: str) -> list[tuple[int, int, str]]:
    """Every phone number in the masked transcript: (start, end, E.164), in order.

    Runs of digit groups joined by "a"/"and" ("... sto dvacet tři a čtyři sta padesát
    šest") are read as one where none of them makes a number alone, so "je mi 75 a
    777 123 456" keeps its two parts apart."""
    runs = list(_RUN.finditer(masked))
    chains: list[list[re.Match[str]]] = []
    for run in runs:
        if chains and _AND.fullmatch(masked, chains[-1][-1].end(), run.start()):
            chains[-1].append(run)
        else:
            chains.append([run])
    found: list[tuple[int, int, str]] = []
    for chain in chains:
        alone = [_numbers_in_run(masked, r.start(), r.end(), country) for r in chain]
        i = 0
        while i < len(chain):
            j = i
            while not alone[i] and j + 1 < len(chain) and not alone[j + 1]:
                j += 1
            found += _numbers_in_run(masked, chain[i].start(), chain[j].end(), country) if j > i else alone[i]
            i = j + 1
    return found


def _cue(words: list[str]) -> int:
    """2 if these words (before a number) ask to be called back, 1 if they name a phone
    number, else 0."""
    if any(w.startswith(_STRONG_CUES) for w in words):
        return 2
    if any(w.startswith(_WEAK_CUES) or w in _WEAK_CUE_WORDS for w in words):
        return 1
    return 0


def numbers_said(text: str, country: str = "CZ") -> list[tuple[int, str]]:
    """Every phone number in the transcript, in order, as (cue, E.164): cue 2 after a
    call-back cue ("zavolejte", "call me"), 1 after a number cue ("číslo", "telefon",
    "number"), else 0. Dates, times, birth numbers and amounts are not numbers."""
    masked = _mask(fold(words_to_digits(text)))
    found: list[tuple[int, str]] = []
    since = 0
    for start, end, number in _runs(masked, country):
        found.append((_cue(_CUE_WORD.findall(masked, since, start)[-_CUE_WINDOW:]), number))
        since = end
    return found


def find_callback_number(text: str, country: str = "CZ") -> str | None:
    """The phone number the caller asks to be called back on, in E.164, or None.

    Number words become digits; dates, times, birth numbers and amounts are set aside;
    each run of adjacent digit groups must make whole valid numbers in `country` (or
    in another country when said with its prefix). Of several numbers, the last one
    after a call-back cue ("zavolejte", "call me") wins, then the last one after a
    number cue ("číslo", "telefon", "number"), then the last one.
    """
    found = [(cue, i, number) for i, (cue, number) in enumerate(numbers_said(text, country))]
    return max(found)[2] if found else None


def callback_numbers(heard: str | None, confirmed: bool, call_from: str, country: str) -> tuple[str | None, str | None]:
    """(callback number, unconfirmed number) of a call from the number read in its
    transcript. The caller's own line within one digit of it is what was said (base
    mishears a digit more often than a caller gives a number one digit off their own):
    the callback number is then `call_from` in E.164. Otherwise the number is the
    callback number only when its digits were `confirmed` as heard
    (`voicemail.transcription.confirmation`), else it is kept apart, unconfirmed."""
    if heard is None:
        return None, None
    caller = to_e164(call_from, country)
    if caller and len(caller) == len(heard) and sum(a != b for a, b in zip(caller, heard)) <= 1:
        return caller, None
    return (heard, None) if confirmed else (None, heard)
