"""The audit trail's values in words (console/audit_words.py): `Words`, one page's language,
clinic and the names its events refer to; `Kind`, a kind of detail value, said in words
(yes/no, a time in the clinic's zone, a count, a role, ...) with the names of rows it needs
read first (`Ref`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from gettext import NullTranslations
from typing import Any

from babel.dates import format_date
from babel.numbers import format_decimal

from console.inbox import language_name, local_time
from console.rendering import N_
from models import Clinic
from plumbing import catalogue


@dataclass(frozen=True)
class Named:
    """Something the page names: its words, a link to it (if it has a page) and a tooltip."""

    text: str
    url: str | None = None
    title: str | None = None


class Words:
    """One page's language, clinic and the names its events refer to (read once)."""

    def __init__(self, tr: NullTranslations, clinic: Clinic, language: str) -> None:
        self.tr = tr
        self.clinic = clinic
        self.language = language
        self.names: dict[tuple[str, str], Named] = {}

    def _(self, message: str, **values: Any) -> str:
        text = self.tr.gettext(message)
        return text % values if values else text

    def n_(self, singular: str, plural: str, num: float) -> str:
        """A number in words: the form it takes (Czech has three), `num` filled in."""
        text, shown = catalogue.plural(self.tr, singular, plural, num, self.language)
        return text % {"num": shown}

    def name(self, kind: str, key: Any) -> Named | None:
        return self.names.get((kind, str(key)))


Ref = tuple[str, str]  # (a kind of `LOADERS`, the key it is read by)


@dataclass(frozen=True)
class Kind:
    """A kind of detail value: how it is said, and which names it needs read first."""

    show: Callable[[Any, Words], Named]
    refs: Callable[[Any], Iterable[Ref]] = lambda value: ()
    says_none: bool = False  # whether None means something (else it is shown as "–")


def _text(value: Any, w: Words) -> Named:
    return Named(str(value))


def _yes_no(value: Any, w: Words) -> Named:
    return Named(w._("yes") if value else w._("no"))


def _on_off(value: Any, w: Words) -> Named:
    return Named(w._("on") if value else w._("off"))


def _moment(value: Any, w: Words) -> Named:
    """An ISO date ("2026-12-24": a whole day) or instant, in the clinic's time zone."""
    if value in (None, "never"):
        return Named(w._("never"))
    text = str(value)
    try:
        if len(text) == 10:
            return Named(
                catalogue.typeset(
                    format_date(datetime.fromisoformat(text).date(), "medium", locale=w.language), w.language
                )
            )
        return Named(local_time(datetime.fromisoformat(text), w.clinic, w.language))
    except ValueError:
        return Named(text)


def _count(value: Any, w: Words) -> Named:
    return Named(format_decimal(value, locale=w.language) if isinstance(value, int) else str(value))


def _days(value: Any, w: Words) -> Named:
    return Named(w._("kept") if value is None else str(value))


def _bytes(value: Any, w: Words) -> Named:
    if not isinstance(value, int):
        return Named(str(value))
    return Named(w.n_("%(num)s byte", "%(num)s bytes", value))


def _one_of(words: dict[str, str]) -> Kind:
    """A value from a fixed set (a code), said with its words."""
    return Kind(lambda value, w: Named(w._(words[value]) if value in words else str(value)))


def _list_of(kind: Kind) -> Kind:
    """A list (or a space-separated text) of values of one kind, said as one line."""

    def items(value: Any) -> list[Any]:
        return value.split() if isinstance(value, str) else list(value or [])

    return Kind(
        lambda value, w: Named(", ".join(kind.show(item, w).text for item in items(value))),
        lambda value: [ref for item in items(value) for ref in kind.refs(item)],
    )


def _ref(kind: str, unknown_as_is: bool = False) -> Kind:
    """The key of a row, said as its name (with a link when it has a page); one not found
    is "no longer exists", or the key itself when it is words already (a clinic's slug)."""

    def show(value: Any, w: Words) -> Named:
        return w.name(kind, value) or Named(str(value) if unknown_as_is else w._("(no longer exists)"))

    return Kind(show, lambda value: [(kind, str(value))] if value else [])


def _word_counts(value: Any, w: Words) -> Named:
    """Words per language ({"cs": 40, "en": 31}): "čeština 40, angličtina 31"."""
    if not isinstance(value, dict):
        return Named(str(value))
    return Named(", ".join(f"{language_name(k, w.language) or k} {_count(v, w).text}" for k, v in value.items()))


def _type_or_other(value: Any, w: Words) -> Named:
    """A request type by its name; None is "other" (no type)."""
    if not value:
        return Named(w._("other"))
    return w.name("request_type", value) or Named(w._("(no longer exists)"))


def _languages(value: Any, w: Words) -> Named:
    if not value:
        return Named(w._("any language"))
    return Named(", ".join(language_name(code, w.language) or code for code in value))


TEXT = Kind(_text)
YES_NO = Kind(_yes_no)
ON_OFF = Kind(_on_off)
MOMENT = Kind(_moment)
COUNT = Kind(_count)
DAYS = Kind(_days, says_none=True)  # None: kept
BYTES = Kind(_bytes)
LANGUAGES = Kind(_languages, says_none=True)  # None: any language
CLINICS = _list_of(_ref("clinic", unknown_as_is=True))
SCOPES = _list_of(_one_of({"read": N_("read"), "write": N_("write")}))
ROLE = _one_of({"admin": N_("administrator"), "staff": N_("staff member")})
WEEKDAY = _one_of(
    {
        "mon": N_("Monday"),
        "tue": N_("Tuesday"),
        "wed": N_("Wednesday"),
        "thu": N_("Thursday"),
        "fri": N_("Friday"),
        "sat": N_("Saturday"),
        "sun": N_("Sunday"),
    }
)
WEEKS = _one_of({"every": N_("every week"), "odd": N_("odd weeks"), "even": N_("even weeks")})
KEY = _ref("api_token")
REQUEST = _ref("patient_request")
REQUEST_TYPE = _ref("request_type")
PATIENT = _ref("patient")
TYPE_OR_OTHER = Kind(_type_or_other, lambda value: [("request_type", str(value))] if value else [], says_none=True)
WORD_COUNTS = Kind(_word_counts)
