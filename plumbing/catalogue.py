"""Words in Czech and English: a gettext catalogue compiled in memory at start (Babel; no
.mo file to forget to regenerate), and a stored time written in a language's way. The
console and the e-mails each keep their own catalogue (`locale/cs/LC_MESSAGES/messages.po`
beside them, English msgids)."""

from __future__ import annotations

import gettext
import io
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from babel.dates import format_date, format_time
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from plumbing.clock import as_utc


def compiled(directory: Path, language: str) -> gettext.NullTranslations:
    """The catalogue of `language` under `directory` (`locale/`); none for English: the
    msgids themselves."""
    po = directory / language / "LC_MESSAGES" / "messages.po"
    if not po.exists():
        return gettext.NullTranslations()
    with po.open("rb") as f:
        catalog = read_po(f, locale=language)
    mo = io.BytesIO()
    write_mo(mo, catalog)
    mo.seek(0)
    return gettext.GNUTranslations(mo)


def local_time(value: datetime, timezone: str, language: str) -> str:
    """A stored (naive UTC) time in `timezone`, written the `language`'s way: the date in
    full, the time to the minute (babel's "medium" time shows seconds)."""
    local = as_utc(value).replace(tzinfo=ZoneInfo("UTC")).astimezone(ZoneInfo(timezone))
    return f"{format_date(local, 'medium', locale=language)} {format_time(local, 'short', locale=language)}"
