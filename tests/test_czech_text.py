"""Czech as a Czech clinic writes it, held by tests on everything the console and the
e-mails say in Czech (both catalogues, compiled as the service compiles them) and on the
Czech staff guides (as the console's help renders them):

- a number in a sentence takes its plural form: a catalogue string that shows a number
  other than as a label's value ("Smazané hovory: 3") is an `ngettext` entry with Czech's
  three forms (1; 2-4; 0, 5 and more), each showing the number;
- a one-letter preposition or conjunction (v, k, s, z, o, u, a, i) never ends a line: the
  space after it is a non-breaking one, put in by one filter (`plumbing.catalogue.typeset`);
- nor do a date's parts („25. 2. 2027“), a number and its unit („12 MB“, „30 s“, „15 %“) or a
  phone number's groups („+420 601 123 456“) part: the same filter binds them, in the
  catalogues, the guides and the values the console's pages show (times, numbers);
- one term per thing: the glossary (console/locale/cs/glossary.txt) names the console's
  terms and the words that must not stand for them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from bs4 import BeautifulSoup

from console import help as guides
from plumbing import catalogue
from tests.conftest import ROOT

CATALOGUES = {
    "console": ROOT / "console" / "locale",
    "e-mails": ROOT / "notices" / "locale",
}
GLOSSARY = ROOT / "console" / "locale" / "cs" / "glossary.txt"
#: A placeholder that holds a count, an amount of time or a size.
NUMBER = re.compile(r"%\((num|count|minutes|hours|days|seconds|n)\)[sd]")
#: A number as a label's value: after ": " at the end of the text (a closing "." or ")" aside).
LABEL_VALUE = re.compile(r": %\(\w+\)[sd][.)]?$")
ONE_LETTER_THEN_SPACE = re.compile(r"(?<![\w<)%])[vkszouaiVKSZOUAI][ \n]")
#: What must not part at a line's end either, with an ordinary space where it would.
LOOSE = {
    "a date's parts": re.compile(r"(?<![\w.])\d{1,2}\.[ \n]\d"),
    "a number and its unit": re.compile(
        r"(?:\d|%\(\w+\)[sd])[ \n](?:" + "|".join(re.escape(u) for u in catalogue.UNITS) + r")(?![\w%])"
    ),
    "a phone number": re.compile(r"\+\d{1,3}(?:\u00a0\d+)*[ \n]\d|(?<![\d.,])\d{3}[ \n]\d{3}[ \n]\d{3}(?![\d,]?\d)"),
}


def messages(locale: Path) -> list:
    with (locale / "cs" / "LC_MESSAGES" / "messages.po").open("rb") as f:
        return [m for m in read_po(f, locale="cs") if m.id]


# --- plural forms ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", CATALOGUES)
def test_a_number_in_a_sentence_has_its_three_czech_forms(name):
    plurals = 0
    for message in messages(CATALOGUES[name]):
        if isinstance(message.id, str):
            for number in NUMBER.finditer(message.id):
                assert LABEL_VALUE.search(message.id) and number.end() >= len(message.id) - 1, (
                    f"{name}: a number in a sentence without its plural forms (ngettext): {message.id!r}"
                )
            continue
        plurals += 1
        forms = message.string
        assert len(forms) == 3 and all(forms), f"{name}: Czech has three forms: {message.id[0]!r} {forms}"
        for form in forms:
            assert "%(num)s" in form, f"{name}: every form shows the number: {form!r}"
    assert plurals >= 3, name


def test_the_forms_follow_the_number_and_a_fraction_is_written_the_czech_way():
    tr = catalogue.compiled(CATALOGUES["console"], "cs")
    singular, plural = (
        "Too many requests. Try again in %(num)s minute.",
        "Too many requests. Try again in %(num)s minutes.",
    )

    def said(n: float) -> str:
        text, shown = catalogue.plural(tr, singular, plural, n, "cs")
        return (text % {"num": shown}).replace("\u00a0", " ")

    assert said(1).endswith(" za 1 minutu.") and said(3).endswith(" za 3 minuty."), (said(1), said(3))
    assert said(5).endswith(" za 5 minut.") and said(1.5).endswith(" za 1,5 minuty."), (said(5), said(1.5))
    english = catalogue.plural(catalogue.compiled(CATALOGUES["console"], "en"), singular, plural, 1, "en")
    assert english == (singular, "1")


# --- non-breaking spaces --------------------------------------------------------------------


def czech_texts() -> list[tuple[str, str]]:
    """(where, text) of every Czech text as shown: each catalogue's translations compiled as
    the service compiles them, each form of a plural, and the Czech guides as rendered."""
    out = []
    for name, locale in CATALOGUES.items():
        tr = catalogue.compiled(locale, "cs")
        for message in messages(locale):
            if isinstance(message.id, str):
                out.append((f"{name}: {message.id}", tr.gettext(message.id)))
            else:
                out += [(f"{name}: {message.id[0]}", tr.ngettext(*message.id, n)) for n in (1, 2, 5)]
    for (name, language), guide in guides.Guides().guides.items():
        if language == "cs":
            out.append((f"guide {name}", BeautifulSoup(str(guide.html), "html.parser").get_text()))
    return out


def test_no_one_letter_word_ends_a_line_in_czech():
    texts = czech_texts()
    assert len(texts) > 300
    loose = [(where, match.group()) for where, text in texts for match in ONE_LETTER_THEN_SPACE.finditer(text)]
    assert not loose, f"a one-letter word before an ordinary space: {loose[:10]}"


def loose_numbers(texts: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    return [(what, where, m.group()) for where, text in texts for what, p in LOOSE.items() for m in p.finditer(text)]


def test_no_date_unit_or_phone_number_is_split_in_czech():
    loose = loose_numbers(czech_texts())
    assert not loose, f"an ordinary space inside: {loose[:10]}"


def test_the_pages_bind_the_dates_and_phone_numbers_they_show(staff, app):
    """The values a page fills in (a request's time, the caller's and the callback number,
    an audit event's time) are set as the catalogue is: rendered in Czech, none has an
    ordinary space where it would part."""
    from tests.support.console import login, make

    voice = make(
        "clinic-a",
        "voice_message",
        name=("Jana", "Dvořáková"),
        transcript="Prosím o recept.",
        status="reliable",
        callback_number="+420777888999",
    )
    make("clinic-a", "missed_call", phone="+420602000000", minutes=1)
    login(app, status=303)
    pages = {
        "inbox": app.get("/console/"),
        "request": app.get(f"/console/requests/{voice.id}"),
        "help": app.get("/console/help"),
    }
    texts = [(name, page.html.select_one("main").get_text()) for name, page in pages.items()]
    assert any("\u00a0" in text and "+420" in text for _, text in texts), "the numbers were shown"
    assert any(re.search(r"18\.\u00a011\.\u00a02026", text) for _, text in texts), "a time was shown"
    loose = loose_numbers(texts)
    assert not loose, f"an ordinary space inside: {loose[:10]}"


def test_the_check_would_catch_one_and_the_filter_binds_them():
    """The sources keep ordinary spaces (the filter puts the non-breaking ones in), so the
    check above is not empty; the filter leaves HTML tags and English alone."""
    raw = " ".join(m.string for m in messages(CATALOGUES["console"]) if isinstance(m.string, str))
    assert len(ONE_LETTER_THEN_SPACE.findall(raw)) > 20
    assert catalogue.typeset("Zpráva v přepisu a s číslem", "cs") == "Zpráva v\u00a0přepisu a\u00a0s\u00a0číslem"
    assert catalogue.typeset('<a href="/x">k nahrávce</a>', "cs") == '<a href="/x">k\u00a0nahrávce</a>'
    assert catalogue.typeset("a message in a box", "en") == "a message in a box"
    nb = "\u00a0"
    assert (
        catalogue.typeset("Od 25. 2. 2027 do 3. 3. 2027 8:00", "cs") == f"Od 25.{nb}2.{nb}2027 do 3.{nb}3.{nb}2027 8:00"
    )
    assert catalogue.typeset("soubor 12 MB, 30 s, 15 %, %(size)s kB", "cs") == (
        f"soubor 12{nb}MB, 30{nb}s, 15{nb}%, %(size)s{nb}kB"
    )
    assert catalogue.typeset("Volejte +420 601 123 456 nebo 601 123 456.", "cs") == (
        f"Volejte +420{nb}601{nb}123{nb}456 nebo 601{nb}123{nb}456."
    )
    assert catalogue.typeset("Call +420 601 123 456 on 25. 2. 2027", "en") == "Call +420 601 123 456 on 25. 2. 2027"
    # And the check sees each with an ordinary space.
    assert [bool(p.search(t)) for p, t in zip(LOOSE.values(), ("25. 2. 2027", "12 MB", "+420 601 123 456"))] == [
        True
    ] * 3


# --- one term per thing ---------------------------------------------------------------------


def glossary() -> list[tuple[str, list[str]]]:
    """(term, the words' beginnings that must not stand for it)."""
    out = []
    for line in GLOSSARY.read_text("utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            term, _meaning, refused = (part.strip() for part in line.split("|"))
            out.append((term, [w.strip() for w in refused.removeprefix("not:").split(",") if w.strip()]))
    return out


def used_words(text: str) -> str:
    """The text without what it quotes („ordinace“ is a mention, not a use)."""
    return re.sub(r"„[^“]*“", "", text).replace("\u00a0", " ")


def test_the_glossary_is_the_consoles_terms_and_no_other_word_stands_for_them():
    terms = glossary()
    assert len(terms) >= 10
    texts = [(where, used_words(text)) for where, text in czech_texts()]
    everything = " ".join(text for _, text in texts).lower()
    for term, refused in terms:
        assert term.lower() in everything, f"the glossary's {term!r} is not a term the console uses"
        for word in refused:
            pattern = re.compile(rf"(?<!\w){re.escape(word)}", re.I)
            found = [where for where, text in texts if pattern.search(text)]
            assert not found, f"{word!r} stands for {term!r} in: {found}"
