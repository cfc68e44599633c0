"""The console's help: the staff guides of docs/staff/, rendered from their Markdown in the
user's language (Czech first), linked from the header, their pictures served, and nothing
in the Markdown able to become markup of its own."""
from __future__ import annotations

import re

from console import help as guides
from console.rendering import LANGUAGES
from models import StaffUser
from plumbing.database import db
from tests.test_console_sessions import login, staff  # noqa: F401 (the fixture)


def test_every_guide_exists_in_czech_and_english():
    for name in guides.PAGES:
        for language in LANGUAGES:
            path = guides.GUIDES / f"{name}.{language}.md"
            assert path.is_file(), path
            assert path.read_text("utf-8").startswith("# ")


def test_the_header_links_to_help_and_a_czech_user_gets_the_czech_guide(staff, app):  # noqa: F811
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
    assert [a.get_text() for a in page.html.find("nav", {"class": "guides"}).find_all("a")] == ["Průvodce pro správce kliniky"]
    admin = app.get("/console/help/admin", status=200).html.find("article").find("h1").get_text()
    assert admin == "Průvodce pro správce kliniky"


def test_an_english_user_gets_the_english_guide(staff, app):  # noqa: F811
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
    html = str(guides.render("# Hi <script>alert(1)</script>\n\n<div onclick=x>raw</div>\n\n"
                             "[run](javascript:alert(1)) [file](../operations.md) [out](https://example.org/)\n\n"
                             "| a |\n|---|\n| <b>cell</b> |\n\n![shot](img/inbox.cs.png)\n"))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<div" not in html and "&lt;div onclick=x&gt;" in html
    assert "<b>" not in html and "&lt;b&gt;cell&lt;/b&gt;" in html
    assert "javascript:" not in re.sub(r"\[run\]\(javascript:alert\(1\)\)", "", html), "no javascript: link"
    assert 'href="../operations.md"' not in html and "file" in html, "a file the console cannot serve keeps its text"
    assert '<a href="https://example.org/">out</a>' in html
    assert '<img src="/console/help/img/inbox.cs.png" alt="shot" />' in html
