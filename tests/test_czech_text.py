"""Czech as a Czech clinic writes it, held by tests on everything the console and the
e-mails say in Czech (both catalogues, compiled as the service compiles them) and on the
Czech staff guides (as the console's help renders them):

- a number in a sentence takes its plural form: a catalogue string that shows a number
  other than as a label's value ("Smazané hovory: 3") is an `ngettext` entry with Czech's
  three forms (1; 2-4; 0, 5 and more), each showing the number;
- a one-letter preposition or conjunction (v, k, s, z, o, u, a, i) never ends a line: the
  space after it is a non-breaking one, put in by one filter (`plumbing.catalogue.typeset`);
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


def test_the_check_would_catch_one_and_the_filter_binds_them():
    """The sources keep ordinary spaces (the filter puts the non-breaking ones in), so the
    check above is not empty; the filter leaves HTML tags and English alone."""
    raw = " ".join(m.string for m in messages(CATALOGUES["console"]) if isinstance(m.string, str))
    assert len(ONE_LETTER_THEN_SPACE.findall(raw)) > 20
    assert catalogue.typeset("Zpráva v přepisu a s číslem", "cs") == "Zpráva v\u00a0přepisu a\u00a0s\u00a0číslem"
    assert catalogue.typeset('<a href="/x">k nahrávce</a>', "cs") == '<a href="/x">k\u00a0nahrávce</a>'
    assert catalogue.typeset("a message in a box", "en") == "a message in a box"


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
