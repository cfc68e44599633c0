"""Callback numbers out of voicemail transcripts, and number-aware word error rate
(voicemail/number_words.py, spoken_numbers.py, word_error.py). Pure functions: no
database, no models.

Each table reads as a checklist; every row is one way a plausible implementation goes
wrong (a digit dropped, two groups run together, a date taken for a phone number)."""

from __future__ import annotations

import pytest

from voicemail.number_words import words_to_digits
from voicemail.spoken_numbers import callback_numbers, find_callback_number, numbers_said
from voicemail.word_error import normalize_for_wer, word_error_rate

WORDS_TO_DIGITS = [
    # Czech, digit by digit: each word its own group, the text between groups kept
    ("digit by digit", "sedm sedm sedm, jedna dva tři", "7 7 7, 1 2 3"),
    ("zeros stay separate digits", "nula nula", "0 0"),
    # hundreds, tens, units: one group
    ("hundreds tens units", "sedm set dvacet čtyři", "724"),
    ("dvě stě", "dvě stě padesát", "250"),
    ("tři sta", "tři sta", "300"),
    ("hundreds and a unit", "šest set dva", "602"),
    ("sto with tens and units", "sto dvacet tři", "123"),
    ("hundreds and a teen", "sto jedenáct", "111"),
    ("a teen alone", "jedenáct", "11"),
    ("tens and a unit", "dvacet jedna", "21"),
    ("Czech inverted tens", "pětadvacet", "25"),
    ("thousand", "tisíc", "1000"),
    ("a year", "dva tisíce dvacet šest", "2026"),
    # where one number ends and the next begins
    ("tens after tens+units start a group", "dvacet tři dvacet", "23 20"),
    ("sto after a complete number starts a group", "sedm set dvacet čtyři sto dvacet tři", "724 123"),
    ("a digit after tens+units starts a group", "dvacet jedna pět", "21 5"),
    ("tens after a lone digit start a group", "sedm dvacet pět", "7 25"),
    ("zero never joins tens", "nula devadesát", "0 90"),
    ("nor follows them", "dvacet nula", "20 0"),
    ("zero after hundreds is a digit of its own", "sto nula", "100 0"),
    # the country prefix
    ("plus before number words", "plus čtyři sta dvacet", "+420"),
    ("plus before digits", "plus 420 777", "+420 777"),
    ("plus between numbers is arithmetic", "tři plus dva", "3 plus 2"),
    # Slovak
    ("Slovak digits", "sedem sedem sedem, dve štyri päť", "7 7 7, 2 4 5"),
    ("Slovak one-word hundreds and tens+units", "sedemsto dvadsaťštyri", "724"),
    ("Slovak tens", "deväťdesiat šesť", "96"),
    # Whisper without diacritics, capitals
    ("no diacritics", "sedm set dvacet ctyri", "724"),
    ("capitals", "Šest Set Dva", "602"),
    # English, UK style
    ("and after hundred", "six hundred and two", "602"),
    ("twenty four", "twenty four", "24"),
    ("hyphenated", "twenty-four", "24"),
    ("double", "double seven", "77"),
    ("triple", "triple five", "555"),
    ("oh between digits", "seven oh four", "7 0 4"),
    ("double oh", "double oh seven", "00 7"),
    ("double before a digit Whisper wrote", "double 7", "77"),
    # words that are numbers only next to numbers, and text that is no number
    ("a message without numbers", "Dobrý den, tady Jana.", "Dobrý den, tady Jana."),
    ("Czech 'a' is a word", "a house a dům", "a house a dům"),
    ("Czech 'o' is a preposition", "prosím o zavolání", "prosím o zavolání"),
    ("Czech 'ten' is a pronoun", "ten recept", "ten recept"),
    ("English 'oh' before a comma", "Oh, seven", "Oh, 7"),
    ("a name that is päť without diacritics", "Pat Smith", "Pat Smith"),
]


@pytest.mark.parametrize("text,digits", [row[1:] for row in WORDS_TO_DIGITS], ids=[row[0] for row in WORDS_TO_DIGITS])
def test_words_to_digits(text: str, digits: str) -> None:
    assert words_to_digits(text) == digits


CALLBACK = [
    # Czech, the ways callers group a number
    ("digit by digit", "sedm sedm sedm, jedna dva tři, čtyři pět šest", "CZ", "+420777123456"),
    ("hundreds", "Moje číslo je sedm set dvacet čtyři, sto dvacet tři, čtyři sta padesát šest.", "CZ", "+420724123456"),
    ("pairs", "šest set tři, dvacet jedna, třicet čtyři, padesát šest", "CZ", "+420603213456"),
    ("a digit then pairs", "sedm dvacet pět, třicet šest, čtyřicet sedm, padesát osm", "CZ", "+420725364758"),
    ("zero and tens", "šest set osm, nula devadesát, sto dvacet", "CZ", "+420608090120"),
    (
        "the country prefix said",
        "plus čtyři sta dvacet, šest nula čtyři, pět pět pět, jedna dva jedna",
        "CZ",
        "+420604555121",
    ),
    (
        "groups joined by 'a'",
        "Volejte na šest set dva, tři sta třicet čtyři a pět set padesát osm.",
        "CZ",
        "+420602334558",
    ),
    ("no diacritics", "sedm set dvacet ctyri sto dvacet tri ctyri sta padesat sest", "CZ", "+420724123456"),
    # Slovak
    ("Slovak", "Volajte mi na sedem sedem sedem, jeden dva tri, štyri päť šesť.", "CZ", "+420777123456"),
    (
        "Slovak clinic, national zero",
        "zavolajte mi na nula deväťsto päť, sto dvadsaťtri, štyristo päťdesiatšesť",
        "SK",
        "+421905123456",
    ),
    # English
    ("English with oh", "Call me on six oh four, nine eight seven, six five four.", "CZ", "+420604987654"),
    ("English double", "double seven seven, one two three, four five six", "CZ", "+420777123456"),
    (
        "UK number in a UK clinic",
        "Call me on oh seven nine one one, one two three, four five six",
        "GB",
        "+447911123456",
    ),
    (
        "another country's prefix said",
        "call me on plus four four seven nine one one, one two three four five six",
        "CZ",
        "+447911123456",
    ),
    # Whisper's digits, any separators
    ("spaces", "Číslo je 777 123 456.", "CZ", "+420777123456"),
    ("+420 and hyphens", "na +420 777-123-456", "CZ", "+420777123456"),
    ("00420", "00420 602 334 558", "CZ", "+420602334558"),
    ("00 and another country", "00421 905 123 456", "CZ", "+421905123456"),
    ("a trunk zero after the country code", "Call me on +44 (0)7911 123456", "CZ", "+447911123456"),
    ("no separators", "777123456", "CZ", "+420777123456"),
    ("old slash format", "Zavolejte mi na 602/123456", "CZ", "+420602123456"),
    ("split oddly", "77 71 23 45 6", "CZ", "+420777123456"),
    ("words then digits", "sedm set dvacet čtyři 123 456", "CZ", "+420724123456"),
    # inside whole messages
    (
        "a whole message",
        "Dobrý den, tady Jana Nováková, potřebovala bych recept na léky na tlak, zavolejte mi prosím "
        "na sedm sedm sedm, jedna dva tři, čtyři pět šest. Děkuji, na shledanou.",
        "CZ",
        "+420777123456",
    ),
    ("a date right before the number", "Jana Nováková, 12. 5. 1985, 602 123 456.", "CZ", "+420602123456"),
    (
        "a dose right after the number",
        "Zavolejte na šest nula dva, jedna dva tři, čtyři pět šest, dvě tablety mi nezabírají.",
        "CZ",
        "+420602123456",
    ),
    # several numbers
    (
        "the one after 'zavolejte' beats the one after 'čísla'",
        "Tady Petr z čísla 222 333 444, ale zavolejte mi na mobil 602 123 456.",
        "CZ",
        "+420602123456",
    ),
    (
        "a call-back cue beats a later number",
        "Zavolejte mi na 602 123 456. Volám z čísla 222 333 444.",
        "CZ",
        "+420602123456",
    ),
    ("a number cue beats a later number", "Moje číslo je 777 123 456. Manželka má 602 123 456.", "CZ", "+420777123456"),
    ("without cues, the last", "777 123 456 nebo 602 123 456", "CZ", "+420602123456"),
]


@pytest.mark.parametrize("text,country,number", [row[1:] for row in CALLBACK], ids=[row[0] for row in CALLBACK])
def test_callback_number(text: str, country: str, number: str) -> None:
    assert find_callback_number(text, country) == number


NO_CALLBACK = [
    ("a date and a time", "Přijdu patnáctého března, to je 15. 3. 2026, v 10:30."),
    ("a spoken time", "Přijdu v deset třicet."),
    ("a birth number", "Moje rodné číslo je 850312/1234."),
    ("a pre-1954 birth number phonenumbers would take", "Rodné číslo 535312/123."),
    ("a birth number said digit by digit", "Moje rodné číslo je pět tři pět tři jedna dva jedna dva tři, děkuji."),
    ("a dose and an age", "Beru dvě tablety denně, je mi sedmdesát pět let."),
    ("a digit short", "sedm sedm sedm, jedna dva tři, čtyři pět"),
    ("two digits too many", "sedm sedm sedm, jedna dva tři, čtyři pět šest sedm osm"),
    ("one digit too many, with spaces", "Zavolejte mi na 777 123 456 7."),
    ("one digit too many, with commas", "Zavolejte mi na 777, 123, 456, 7."),
    ("nine digits that are no Czech number", "Zavolejte na 123 456 789."),
    (
        "a UK number without its prefix, in a Czech clinic",
        "Call me on oh seven nine one one, one two three, four five six",
    ),
    ("a cue and no number", "Dobrý den, zavolejte mi prosím zpět."),
    ("nothing", ""),
]


@pytest.mark.parametrize("text", [row[1] for row in NO_CALLBACK], ids=[row[0] for row in NO_CALLBACK])
def test_no_callback_number(text: str) -> None:
    assert find_callback_number(text, "CZ") is None


NORMALIZE = [
    ("number words", "Sedm set dvacet čtyři!", ["7", "2", "4"]),
    ("digits", "724", ["7", "2", "4"]),
    ("English number words", "five five five", ["5", "5", "5"]),
    ("digits with separators and a plus", "+420 777-12", ["4", "2", "0", "7", "7", "7", "1", "2"]),
    ("ten is a number for WER", "at ten", ["at", "1", "0"]),
    ("annotations", "Dr. Novák [BLANK_AUDIO] (music) *cough* (kašel) ♪", ["doctor", "novák"]),
    ("apostrophes", "I’m OK", ["i'm", "okay"]),
    ("Czech title", "MUDr. Nováková", ["mudr", "nováková"]),
    ("hyphenated words", "check-up", ["check", "up"]),
]


@pytest.mark.parametrize("text,words", [row[1:] for row in NORMALIZE], ids=[row[0] for row in NORMALIZE])
def test_normalize_for_wer(text: str, words: list[str]) -> None:
    assert normalize_for_wer(text) == words


WER = [
    ("numbers written either way", "call five five five, one two three", "Call 555-123.", (0, 7)),
    ("Czech hundreds against digits", "zavolejte na sedm set dvacet", "Zavolejte na 720.", (0, 5)),
    ("a time", "at ten thirty", "at 10:30", (0, 5)),
    ("an abbreviation and a dropped word", "see doctor Smith today", "See Dr. Smith", (1, 4)),
    ("a substitution and an insertion", "a b c", "a x c d", (2, 3)),
    ("a wrong digit costs one", "sedm sedm sedm", "778", (1, 3)),
    ("empty", "", "", (0, 0)),
]


@pytest.mark.parametrize("reference,hypothesis,result", [row[1:] for row in WER], ids=[row[0] for row in WER])
def test_word_error_rate(reference: str, hypothesis: str, result: tuple[int, int]) -> None:
    assert word_error_rate(reference, hypothesis) == result


def test_every_number_said_with_its_cue() -> None:
    said = "Volám z 602 111 222, zavolejte mi ale prosím na 777 123 456. Je mi 75 let."
    assert numbers_said(said, "CZ") == [(0, "+420602111222"), (2, "+420777123456")]
    assert find_callback_number(said, "CZ") == "+420777123456"


CALLBACKS = [
    # (name, heard, confirmed, CallFrom, (callbackNumber, unconfirmed))
    ("nothing heard", None, False, "+420601123456", (None, None)),
    ("confirmed digits are the callback number", "+420777123456", True, "+420601123456", ("+420777123456", None)),
    (
        "unconfirmed digits are kept apart, never the callback number",
        "+420700123456",
        False,
        "+420601123456",
        (None, "+420700123456"),
    ),
    (
        "one digit off the caller's own line: the line",
        "+420601123457",
        False,
        "+420 601 123 456",
        ("+420601123456", None),
    ),
    ("the caller's own line heard exactly", "+420601123456", False, "601123456", ("+420601123456", None)),
    (
        "two digits off the caller's line: not the line",
        "+420601123477",
        False,
        "+420601123456",
        (None, "+420601123477"),
    ),
    ("a withheld caller confirms nothing", "+420700123456", False, "anonymous", (None, "+420700123456")),
]


@pytest.mark.parametrize(
    "heard,confirmed,call_from,expected", [row[1:] for row in CALLBACKS], ids=[row[0] for row in CALLBACKS]
)
def test_callback_numbers(
    heard: str | None, confirmed: bool, call_from: str, expected: tuple[str | None, str | None]
) -> None:
    assert callback_numbers(heard, confirmed, call_from, "CZ") == expected
