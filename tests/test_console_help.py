"""The console's help: the staff guides of docs/staff/, rendered from their Markdown in the
user's language (Czech first), linked from the header, their pictures served, and nothing
in the Markdown able to become markup of its own."""

from __future__ import annotations

import re

from console import help as guides
from console.rendering import LANGUAGES
from models import StaffUser
from plumbing.database import db
from tests.support.console import login


def test_every_guide_exists_in_czech_and_english():
    for name in guides.PAGES:
        for language in LANGUAGES:
            path = guides.GUIDES / f"{name}.{language}.md"
            assert path.is_file(), path
            assert path.read_text("utf-8").startswith("# ")


def test_the_header_links_to_help_and_a_czech_user_gets_the_czech_guide(staff, app):
    login(app, status=303)
    inbox = app.get("/console/")
    link = inbox.html.find("a", {"class": "help"})
    assert link is not None and link["href"] == "/console/help" and link.get_text() == "Nápověda"
    page = app.get(link["href"], status=200)
    assert '<html lang="cs">' in page.text and page.headers["Cache-Control"] == "no-store"
    article = page.html.find("article", {"class": "guide"})
    assert article.find("h1").get_text() == "Průvodce pro recepci"
    assert article.find("table") is not None, "the labels' table is rendered as a table"
    assert "Poslechnout číslo" in article.get_text() and "Listen to the number" not in article.get_text()
    # The guides link to each other as console pages; the nav lists both in Czech.
    assert article.find("a", href="/console/help/admin") is not None
    assert [a.get_text() for a in page.html.find("nav", {"class": "guides"}).find_all("a")] == [
        "Průvodce pro správce kliniky"
    ]
    admin = app.get("/console/help/admin", status=200).html.find("article").find("h1").get_text()
    assert admin == "Průvodce pro správce kliniky"


def test_an_english_user_gets_the_english_guide(staff, app):
    with db.connection_context():
        StaffUser.update(language="en").where(StaffUser.email == "anna@example.cz").execute()
    login(app, status=303)
    assert app.get("/console/").html.find("a", {"class": "help"}).get_text() == "Help"
    page = app.get("/console/help")
    assert '<html lang="en">' in page.text
    assert page.html.find("article").find("h1").get_text() == "Receptionist's guide"
    # The guide's words, however the markdown wrapped them (the page's script is a file now:
    # its comment no longer says them).
    guide = " ".join(page.html.find("article").get_text().split())
    assert "Listen to the number" in guide and "Poslechnout číslo" not in guide


def test_help_opens_before_login_in_the_login_pages_language(app):
    login_page = app.get("/console/login")
    assert login_page.html.find("a", {"class": "help"})["href"] == "/console/help"
    assert app.get("/console/help").html.find("h1").get_text() == "Průvodce pro recepci"
    assert app.get("/console/help?lang=en").html.find("h1").get_text() == "Receptionist's guide"
    app.get("/console/login?lang=en")  # the login page remembers the choice in its cookie
    assert app.get("/console/help").html.find("h1").get_text() == "Receptionist's guide"
    app.get("/console/help/nonsense", status=404)


def test_every_picture_a_guide_shows_is_served(app):
    for name in guides.PAGES:
        for language in LANGUAGES:
            page = app.get(f"/console/help/{name}?lang={language}")
            sources = [img["src"] for img in page.html.find("article").find_all("img")]
            assert sources, f"{name}.{language} shows the console"
            for src in sources:
                assert src.startswith("/console/help/img/"), src
                picture = app.get(src, status=200)
                assert picture.content_type == "image/png" and picture.body[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("../receptionist.cs.md", "nothing.png", "..%2Freceptionist.cs.md"):
        app.get(f"/console/help/img/{name}", status=404)


def test_markdown_cannot_bring_markup_of_its_own():
    html = str(
        guides.render(
            "# Hi <script>alert(1)</script>\n\n<div onclick=x>raw</div>\n\n"
            "[run](javascript:alert(1)) [file](../operations.md) [out](https://example.org/)\n\n"
            "| a |\n|---|\n| <b>cell</b> |\n\n![shot](img/inbox.cs.png)\n"
        )
    )
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<div" not in html and "&lt;div onclick=x&gt;" in html
    assert "<b>" not in html and "&lt;b&gt;cell&lt;/b&gt;" in html
    assert "javascript:" not in re.sub(r"\[run\]\(javascript:alert\(1\)\)", "", html), "no javascript: link"
    assert 'href="../operations.md"' not in html and "file" in html, "a file the console cannot serve keeps its text"
    assert '<a href="https://example.org/">out</a>' in html
    assert '<img src="/console/help/img/inbox.cs.png" alt="shot" />' in html


# --- the guides speak the console's words ----------------------------------------------------

#: Words the guides show in bold or quotes that are no catalogue entry: the language buttons
#: (each language named in itself, never translated) and example passwords.
NOT_CATALOGUE = {"English", "Čeština", "kůň-modrá-hora-7-sklenice", "horse-blue-mountain-7-glass", "–"}


def _catalogue(language: str) -> list[tuple[str, re.Pattern[str]]]:
    from babel.messages.pofile import read_po

    from tests.support.console import PO

    with PO.open("rb") as f:
        catalogue = read_po(f, locale="cs")
    texts = [m.string if language == "cs" else m.id for m in catalogue if m.id and isinstance(m.id, str)]
    # A number's plural forms: each of them (Czech) or both ids (English).
    texts += [
        text
        for m in catalogue
        if m.id and not isinstance(m.id, str)
        for text in (m.string if language == "cs" else m.id)
    ]
    # (An entry that is little but a value, "%(when)s:", would match anything.)
    return [
        (_plain(text), re.compile(re.sub(r"%\\\(\w+\\\)[sd]", ".+", re.escape(_plain(text))), re.I))
        for text in texts
        if len(re.sub(r"%\(\w+\)[sd]|\W", "", text)) >= 3
    ]


def _plain(text: str) -> str:
    return " ".join(text.split()).strip().rstrip(":.…").strip()


def _shown(term: str, catalogue: list[tuple[str, re.Pattern[str]]]) -> bool:
    """Whether `term` is what the console shows: (part of) a catalogue entry, an entry with
    its values filled in, a detail's label with its value, or a button with its hidden name."""
    term = _plain(term)

    def one(text: str) -> bool:
        return any(text.lower() in entry.lower() or pattern.fullmatch(text) for entry, pattern in catalogue)

    if one(term):
        return True
    if ": " in term:
        return one(term.split(": ", 1)[0])
    words = term.split()  # a control's words, then the thing it acts on ("Zneplatnit" "klíč Ústředna")
    named = [pattern for _, pattern in catalogue if ".+" in pattern.pattern]
    return any(
        one(" ".join(words[:cut])) and any(p.fullmatch(" ".join(words[cut:])) for p in named)
        for cut in range(1, len(words))
    )


def test_every_console_term_in_the_guides_is_the_consoles_own():
    """A guide's bold words name the console's controls and fields, its quotes what the console
    says: each is in the catalogue (Czech) or its msgids (English), so a renamed control
    fails here rather than misleading a reader."""
    for page in sorted(guides.GUIDES.glob("*.md")):
        if page.name == "README.md":
            continue
        language = page.name.split(".")[1]
        catalogue = _catalogue(language)
        text = page.read_text("utf-8")
        terms = [part for bold in re.findall(r"\*\*(.+?)\*\*", text, re.S) for part in bold.split("→")]
        terms += re.findall(r"„(.+?)“", text, re.S) if language == "cs" else re.findall(r'"([^"\n]+?)"', text)
        strange = [t for t in terms if _plain(t) not in NOT_CATALOGUE and not _shown(t, catalogue)]
        assert not strange, f"{page.name}: not the console's words: {strange}"
        assert len(terms) > 20, page.name
    assert not _shown("API klíče", _catalogue("cs")), "the check tells a term the console does not use"


#: Phrases a native reader flagged: copied from English, a name not declined, an adjective
#: without its noun, two terms for one thing.
NOT_CZECH = (
    "Jste přihlášeni někde, kde to nepoznáváte",
    "Odhlaste to",
    "Odpovědí jsou tyto intervaly",
    "říká slovy",
    "Neobvyklé v předání hovoru",
    "API klíč",
    "operátor (příkazová řádka)",
)


def test_the_flagged_phrases_are_gone_from_the_console_and_the_guides():
    from babel.messages.pofile import read_po

    from tests.support.console import PO

    with PO.open("rb") as f:
        catalogue = {m.id: m.string for m in read_po(f, locale="cs") if m.id}
    texts = [*catalogue.values(), *(p.read_text("utf-8") for p in guides.GUIDES.glob("*.cs.md"))]
    for phrase in NOT_CZECH:
        assert not any(phrase in text for text in texts), phrase
    # A name is put after a colon (Czech declines it; the console cannot), never after "pro".
    assert not [s for s in catalogue.values() if isinstance(s, str) and re.search(r"\bpro %\(\w+\)s", s)]
    assert catalogue["Two-factor"] == "Dvoufázové přihlášení", "an adjective with its noun"
    assert catalogue["API keys"] == "Klíče API" and catalogue["API key"] == "Klíč API", "one term per thing"
