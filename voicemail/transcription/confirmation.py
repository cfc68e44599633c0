"""Was the callback number heard, or only written? A transcript is as sure of "700 1 2 3"
as of the words the caller said (base writes "sedm sedm sedm, jedna dva tři" so), so a
number read from it goes on a request only when the decoder's own signals say its digits
were heard (docs/transcription.md):

* a second look at the number's own seconds (decoded alone with beam search, with a
  prompt of digits in words so digits are written one by one) says the same digits in a
  row, or else a third, greedy look does;

or the second look reads another whole number there and the third says its digits too:
then that number, which the transcript's text may not show. Otherwise the
number is *unconfirmed*: the digits as heard, with where in the recording they were
said, for a person to listen to. (The caller's own line, `CallFrom`, within
one digit of what was heard, confirms it too: `jobs/calls.py`.)"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import phonenumbers

from voicemail import spoken_numbers
from voicemail.number_words import words_to_digits
from voicemail.transcription.results import Segment
from voicemail.transcription.settings import SAMPLE_RATE, Decoding

# The second look decodes the number's seconds with this much audio before and after
# (whisper's token times are late by up to a word: with 0.4 s the first digits of a
# number were cut off), with beam search and no sampled fallback (the same text each time).
SECOND_LOOK_BEFORE = 1.0
SECOND_LOOK_AFTER = 0.4
SECOND_LOOK = Decoding(beam_size=5, temperature_inc=0.0)
THIRD_LOOK = Decoding(beam_size=1, temperature_inc=0.0)
# Digits in words, in the call's language: whisper then writes a number word by word,
# one digit each, instead of grouping what it half heard into "700". Digits that are no
# phone number in any country, twice over (tests/test_transcription.py): a prompt with a
# number in it would be the number whisper writes on unclear audio.
SECOND_LOOK_PROMPTS = {
    "cs": "Nula, nula, jedna, jedna, dva, dva, tři, tři.",
    "sk": "Nula, nula, jedna, jedna, dva, dva, tri, tri.",
    "en": "Zero, zero, one, one, two, two, three, three.",
}


@dataclass(frozen=True)
class HeardNumber:
    """A callback number read from a transcript and whether its digits were heard."""

    # E.164 as the transcript has it, or as two looks agreed (confirmed so; the transcript
    # may hold no number there, only digits in a row: "7-2-0-1-1-2-2-2").
    number: str
    start: float | None  # seconds into the decoded span where its first token was said
    end: float | None
    min_p: float  # least probable of its tokens
    second_look: str | None = None  # what the second look read there
    third_look: str | None = None  # and the third, when the second did not confirm it
    confirmed: bool = False


Token = tuple[float, float, float, bytes]  # probability, start, end, bytes (results.Segment.tokens)


def _text(tokens: Sequence[Token]) -> str:
    return b"".join(t[3] for t in tokens).decode("utf-8", errors="ignore")


# "seven, double, seven": the look, prompted with digits between commas, puts one after
# "double" too.
_REPEAT_COMMA = re.compile(r"\b(double|triple)\s*,\s*", re.IGNORECASE)


def _digits(text: str) -> str:
    return "".join(re.findall(r"\d", words_to_digits(_REPEAT_COMMA.sub(r"\1 ", text))))


def _locate(tokens: Sequence[Token], says: Callable[[str], bool]) -> tuple[int, int] | None:
    """First and last index of the fewest tokens, last in the text, whose text `says`."""
    if not says(_text(tokens)):
        return None
    first = max(i for i in range(len(tokens)) if says(_text(tokens[i:])))
    last = min(j for j in range(first, len(tokens)) if says(_text(tokens[first : j + 1])))
    return first, last


def locate(tokens: Sequence[Token], number: str, country: str) -> tuple[int, int] | None:
    """First and last index of the tokens that say `number` (its last mention)."""
    return _locate(tokens, lambda text: any(n == number for _, n in spoken_numbers.numbers_said(text, country)))


# Digits in a row that are no number but may be one misheard ("7-2-0-1-1-2-2-2" for
# 720 111 222): the looks are asked what was said there.
MIN_RUN_DIGITS = 6
_DIGIT_RUN = re.compile(r"\d(?:[\s,.\-–/]*\d)+")


def _digit_run(text: str) -> str | None:
    runs = [_digits(m.group()) for m in _DIGIT_RUN.finditer(words_to_digits(text))]
    runs = [r for r in runs if len(r) >= MIN_RUN_DIGITS]
    return runs[-1] if runs else None


def heard_again(number: str, text: str) -> bool:
    """Whether `text` (the second look) says the digits of `number` one after another
    (its national digits: the look may or may not catch the country code, and catches
    the words around the number: "on six oh two ..." may come out "One six zero two")."""
    return str(phonenumbers.parse(number).national_number) in _digits(text)


def _spoken(token: Token) -> bool:
    return any(c.isalnum() for c in token[3].decode("utf-8", errors="ignore")) or not token[3].isascii()


def heard_number(
    segments: Sequence[Segment],
    country: str,
    language: str | None,
    span: np.ndarray | None,
    decode: Callable[[np.ndarray, str, Decoding, str | None], str] | None,
) -> HeardNumber | None:
    """The callback number of a transcript's segments, confirmed or not. `decode(audio,
    language, decoding, prompt)` gives the text of a piece of `span` (the second look);
    without it a number is confirmed by its tokens alone never."""
    text = " ".join(s.text for s in segments if s.text)
    number = spoken_numbers.find_callback_number(text, country)
    tokens = [t for s in segments for t in s.tokens]
    if number is None:
        run = _digit_run(text)
        where = _locate(tokens, lambda t: run in _digits(t)) if run else None
    else:
        where = locate(tokens, number, country)
    if where is None:  # no number; or loops collapsed away the tokens' order: cannot say where
        return HeardNumber(number, None, None, 0.0) if number else None
    said = [t for t in tokens[where[0] : where[1] + 1] if _spoken(t)]
    min_p = round(min((t[0] for t in said), default=0.0), 3)
    start, end = tokens[where[0]][1], tokens[where[1]][2]
    heard = HeardNumber(number or "", round(start, 2), round(end, 2), min_p)
    if decode is None or span is None or language is None:
        return heard if number else None
    piece = np.ascontiguousarray(
        span[max(0, int((start - SECOND_LOOK_BEFORE) * SAMPLE_RATE)) : int((end + SECOND_LOOK_AFTER) * SAMPLE_RATE)]
    )
    prompt = SECOND_LOOK_PROMPTS.get(language)
    again = decode(piece, language, SECOND_LOOK, prompt).strip()
    # No threshold on the tokens' probabilities: on the labelled set the right numbers' least
    # probable token was 0.40-0.76 and the wrong ones' 0.14-0.32, but a cut between them
    # would be fitted to a dozen numbers, 0.5 lost two right ones, and the looks alone
    # confirmed no wrong one (docs/transcription.md). min_p is kept with the number.
    if number and heard_again(number, again):
        return replace(heard, second_look=again[:120], confirmed=True)
    third = decode(piece, language, THIRD_LOOK, prompt).strip()
    heard = replace(heard, second_look=again[:120], third_look=third[:120])
    if number and heard_again(number, third):
        return replace(heard, confirmed=True)
    # The second look read another whole number there (base wrote "sedm sedm sedm" as
    # "700", the look, prompted with number words, "sedm sedm sedm"): it is the number
    # only when the third look says its digits too.
    other = [n for _, n in spoken_numbers.numbers_said(again, country)]
    if other and other[-1] != number and heard_again(other[-1], third):
        return replace(heard, number=other[-1], confirmed=True)
    return heard if number else None
