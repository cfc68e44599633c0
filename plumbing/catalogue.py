"""Words in Czech and English: a gettext catalogue compiled in memory at start (Babel; no
.mo file to forget to regenerate), and a stored time written in a language's way. The
console and the e-mails each keep their own catalogue (`locale/cs/LC_MESSAGES/messages.po`
beside them, English msgids)."""

from __future__ import annotations

import gettext
import io
import re
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from babel.dates import format_date, format_time
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal

from plumbing.clock import as_utc

#: Czech typography: a one-letter preposition or conjunction (v, k, s, z, o, u, a, i) does
#: not end a line; the space after it is a non-breaking one. Not inside an HTML tag (`<a href`)
#: nor a placeholder (`%(name)s`).
_ONE_LETTER_WORD = re.compile(r"(?<![\w<)%])([vkszouaiVKSZOUAI]) ")
#: A text that ends in a one-letter word (the space after it is the next text's, or a line break).
ENDS_IN_ONE_LETTER_WORD = re.compile(r"(?<![\w<)%])[vkszouaiVKSZOUAI]$")
NBSP = "\u00a0"
#: A date's parts („25. 2. 2027“): a day's or a month's number and its dot, then the next part.
_DATE_PART = re.compile(r"(?<![\w.])(\d{1,2}\.) (?=\d)")
#: A number (or a placeholder standing for one) and its unit („12 MB“, „30 s“, „15 %“).
UNITS = ("B", "kB", "MB", "GB", "TB", "ms", "s", "min", "h", "%", "Kč")
_NUMBER_AND_UNIT = re.compile(r"(\d|%\(\w+\)[sd]) (" + "|".join(re.escape(u) for u in UNITS) + r")(?![\w%])")
#: A phone number as the pages write it: „+420 601 123 456“ (any country's grouping), or a
#: Czech number's three groups of three („601 123 456“).
_PHONE = re.compile(r"\+\d{1,3}(?: \d{1,5}){1,5}(?!\d)|(?<![\d.,])\d{3} \d{3} \d{3}(?![\d,]?\d)")


def typeset(text: str, language: str) -> str:
    """`text` as the language sets it. In Czech a non-breaking space after each one-letter
    word, between a date's parts, between a number and its unit and inside a phone number:
    none of them is split at a line's end. The catalogues' translations, the Czech guides,
    the times (`local_time`) and the phone numbers the console shows go through here."""
    if language != "cs":
        return text
    text = _ONE_LETTER_WORD.sub(lambda m: m.group(1) + NBSP, text)
    text = _DATE_PART.sub(lambda m: m.group(1) + NBSP, text)
    text = _NUMBER_AND_UNIT.sub(lambda m: m.group(1) + NBSP + m.group(2), text)
    return _PHONE.sub(lambda m: m.group().replace(" ", NBSP), text)


def compiled(directory: Path, language: str) -> gettext.NullTranslations:
    """The catalogue of `language` under `directory` (`locale/`), each translation typeset
    (`typeset`); none for English: the msgids themselves."""
    po = directory / language / "LC_MESSAGES" / "messages.po"
    if not po.exists():
        return gettext.NullTranslations()
    with po.open("rb") as f:
        catalog = read_po(f, locale=language)
    for message in catalog:
        if message.id and isinstance(message.string, str):
            message.string = typeset(message.string, language)
        elif message.id and message.string:
            message.string = tuple(typeset(form, language) for form in message.string)
    mo = io.BytesIO()
    write_mo(mo, catalog)
    mo.seek(0)
    return gettext.GNUTranslations(mo)


def plural(tr: gettext.NullTranslations, singular: str, plural_form: str, num: float, language: str) -> tuple[str, str]:
    """The form of a message a number takes (`ngettext`: Czech has three, by the rule in the
    catalogue's header) and the number as the language writes it ("1,5" in Czech). A number
    with a fraction takes the form of 2 (Czech: "1,5 hodiny", "0,5 minuty"; English: "1.5
    hours"): gettext's forms know only whole numbers."""
    whole = float(num).is_integer()
    count = int(num) if whole else 2
    shown = format_decimal(int(num) if whole else num, locale=language)
    return tr.ngettext(singular, plural_form, count), shown


def local_time(value: datetime, timezone: str, language: str) -> str:
    """A stored (naive UTC) time in `timezone`, written the `language`'s way: the date in
    full, the time to the minute (babel's "medium" time shows seconds)."""
    local = as_utc(value).replace(tzinfo=ZoneInfo("UTC")).astimezone(ZoneInfo(timezone))
    date = typeset(format_date(local, "medium", locale=language), language)
    return f"{date} {format_time(local, 'short', locale=language)}"
