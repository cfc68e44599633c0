"""Every string the console shows, and every e-mail's, is in its Czech catalogue: extracted
from the templates (Jinja2's i18n calls) and from the Python that renders them (`gettext`,
`_`, `N_`), as Babel's extractors read them. A string added in English only fails here, not
in a receptionist's browser or mailbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from tests.conftest import ROOT
from tests.support.console import PO

KEYWORDS = {"gettext": None, "_": None, "N_": None, "ngettext": (1, 2), "Nn_": (1, 2), "n_": (1, 2), "plural": (2, 3)}
JINJA = {"extensions": "jinja2.ext.i18n"}
#: Each catalogue and where its strings are.
CATALOGUES = {
    "console": (
        PO,
        [
            (ROOT / "console" / "templates", [("**.html", "jinja2")]),
            (ROOT / "console", [("**.py", "python")]),
            (ROOT / "resources", [("**.py", "python")]),
        ],
    ),
    "e-mails": (
        ROOT / "notices" / "locale" / "cs" / "LC_MESSAGES" / "messages.po",
        [
            (ROOT / "notices" / "templates", [("**.html", "jinja2"), ("**.txt", "jinja2")]),
            (ROOT / "notices", [("**.py", "python")]),
        ],
    ),
}


def extracted(sources: list) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for directory, method_map in sources:
        for filename, _line, message, _comments, _context in extract_from_dir(
            str(directory), method_map, keywords=KEYWORDS, options_map={"**.html": JINJA, "**.txt": JINJA}
        ):
            for text in message if isinstance(message, tuple) else (message,):
                if text:
                    found.setdefault(text, set()).add(str(Path(directory.name) / filename))
    return found


@pytest.mark.parametrize("name", CATALOGUES)
def test_every_string_has_a_czech_translation(name):
    po, sources = CATALOGUES[name]
    with po.open("rb") as f:
        catalog = read_po(f, locale="cs")
    translated = {text: m.string for m in catalog if m.id for text in ((m.id,) if isinstance(m.id, str) else m.id)}
    strings = extracted(sources)
    assert len(strings) > 20, f"the extractor found the {name}' strings"
    missing = {
        text: sorted(where)
        for text, where in strings.items()
        if not (translated.get(text) if isinstance(translated.get(text), str) else any(translated.get(text) or ()))
    }
    assert not missing, f"no Czech translation in {po.relative_to(ROOT)}: {missing}"


@pytest.mark.parametrize("name", CATALOGUES)
def test_the_catalogue_has_no_duplicate_entries(name):
    po, _ = CATALOGUES[name]
    ids = [line for line in po.read_text(encoding="utf-8").splitlines() if line.startswith("msgid ")]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, duplicates
