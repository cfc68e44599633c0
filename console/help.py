"""The staff guides in the console: docs/staff/*.md, the very Markdown a reader of the
repository opens, rendered to HTML for the console's help page in the user's language.

markdown-it-py (CommonMark with tables) with raw HTML off: whatever the Markdown holds is
text, so a `<script>` in a guide shows as text like anything else the console displays.
Links between the guides become console URLs, their images the console's image route;
a link the console cannot serve (a file elsewhere in the repository) keeps its text only.

The console's help: the staff guides (docs/staff/*.md) in the user's language. Open
before login too (the login page's reader may need "who resets my password"): the guides
hold no clinic's data. The language: the user's, else the login page's choice."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import falcon
from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup

from console import pages
from console.rendering import DEFAULT_LANGUAGE, LANGUAGE_COOKIE, LANGUAGES, Renderer, cookie, html
from plumbing import catalogue

GUIDES = Path(__file__).resolve().parent.parent / "docs" / "staff"
IMAGES = GUIDES / "img"
URL = pages.HELP
#: The guides, in the order the help page lists them; each is `<name>.<language>.md`.
PAGES = ("receptionist", "admin")


@dataclass(frozen=True)
class Guide:
    name: str
    language: str
    title: str
    html: Markup


def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _console_href(href: str) -> str | None:
    """Where a guide's link goes in the console: another guide's page, an image, an outside
    address as it is; None for a file of the repository the console does not serve."""
    parts = urlsplit(href)
    if parts.scheme in ("http", "https", "mailto", "tel") or href.startswith("#"):
        return href
    if parts.scheme or parts.netloc:
        return None
    name = parts.path.rsplit("/", 1)[-1]
    if parts.path.startswith("img/") and "/" not in parts.path[4:]:
        return pages.guide_image(name)
    stem, _, suffix = name.partition(".")
    if "/" not in parts.path and stem in PAGES and suffix in tuple(f"{lang}.md" for lang in LANGUAGES):
        return pages.guide(stem) + (f"#{parts.fragment}" if parts.fragment else "")
    return None


def _rewrite(tokens: list[Token], language: str) -> None:
    for previous, token in zip([None, *tokens], tokens, strict=False):
        if token.type in ("text", "code_inline"):
            # A quoted example too („`24. 12. 2026`“): the console reads it back with either space.
            token.content = catalogue.typeset(token.content, language)
        elif (
            token.type == "softbreak"
            and language == "cs"
            and previous is not None
            and previous.type == "text"
            and catalogue.ENDS_IN_ONE_LETTER_WORD.search(previous.content)
        ):
            # A line of the Markdown that ends in a one-letter word: the break is a
            # non-breaking space, so the word stays with the next one.
            token.type, token.content = "text", catalogue.NBSP
        elif token.type == "image":
            token.attrSet("src", _console_href(str(token.attrGet("src") or "")) or "")
        elif token.children:
            _rewrite(token.children, language)
            # A link whose target the console cannot serve: its text stays, the link goes.
            kept, dropping = [], 0
            for child in token.children:
                if child.type == "link_open":
                    target = _console_href(str(child.attrGet("href") or ""))
                    if target is None:
                        dropping += 1
                        continue
                    child.attrSet("href", target)
                elif child.type == "link_close" and dropping:
                    dropping -= 1
                    continue
                kept.append(child)
            token.children = kept


def render(text: str, language: str = DEFAULT_LANGUAGE) -> Markup:
    """HTML of a guide's Markdown, raw HTML escaped, links made console links, the text
    typeset as the language sets it (Czech: no one-letter word at a line's end)."""
    md = _markdown()
    tokens = md.parse(text)
    _rewrite(tokens, language)
    return Markup(md.renderer.render(tokens, md.options, {}))


def _title(text: str) -> str:
    return next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")


class Guides:
    """Every guide in every language, read and rendered once, at start."""

    def __init__(self, directory: Path = GUIDES) -> None:
        self.guides: dict[tuple[str, str], Guide] = {}
        for name in PAGES:
            for language in LANGUAGES:
                path = directory / f"{name}.{language}.md"
                if path.is_file():
                    text = path.read_text("utf-8")
                    self.guides[(name, language)] = Guide(name, language, _title(text), render(text, language))

    def get(self, name: str, language: str) -> Guide | None:
        """The guide in `language`, else in the default language (Czech), else None."""
        return self.guides.get((name, language)) or self.guides.get((name, DEFAULT_LANGUAGE))

    def listed(self, language: str) -> list[Guide]:
        return [guide for guide in (self.get(name, language) for name in PAGES) if guide is not None]


def image(name: str) -> Path | None:
    """A guide's screenshot by file name: a PNG directly in docs/staff/img, nothing else."""
    path = IMAGES / name
    if "/" in name or not name.endswith(".png") or not path.is_file():
        return None
    return path


class HelpPage:
    """GET /console/help (the receptionist's guide) and /console/help/{name}."""

    def __init__(self, renderer: Renderer, guides: Guides) -> None:
        self.renderer = renderer
        self.guides = guides

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str = PAGES[0]) -> None:
        session = req.context.console_session
        if session is not None:
            language = session.user.language
        else:
            chosen = req.get_param("lang") or cookie(req, LANGUAGE_COOKIE)
            language = chosen if chosen in LANGUAGES else DEFAULT_LANGUAGE
        guide = self.guides.get(name, language) if name in PAGES else None
        if guide is None:
            raise falcon.HTTPNotFound()
        html(
            resp,
            self.renderer.render(
                "console/help.html",
                guide.language,
                user=session.user if session else None,
                csrf_token=session.csrf_token if session else "",
                guide=guide,
                guides=self.guides.listed(language),
            ),
        )


class HelpImage:
    """GET /console/help/img/{name}: a guide's screenshot (from the demo, no patient's data)."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        path = image(name)
        if path is None:
            raise falcon.HTTPNotFound()
        resp.content_type = "image/png"
        resp.cache_control = ["public", "max-age=86400"]
        resp.data = path.read_bytes()
