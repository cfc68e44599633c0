"""Rendering the console's pages: Jinja2 with autoescape on (every value from outside is
escaped), gettext through the Jinja2 i18n extension, Czech first and English second.

The catalogue (locale/cs/LC_MESSAGES/messages.po, English msgids) is compiled in memory
at start with Babel: no build step and no .mo file to forget to regenerate."""

from __future__ import annotations

import gettext
import hashlib
import secrets
from pathlib import Path
from typing import Any

import falcon
import jinja2
from markupsafe import Markup

from console import pages
from plumbing import catalogue

HERE = Path(__file__).parent
LANGUAGES = ("cs", "en")  # the first is the default
DEFAULT_LANGUAGE = LANGUAGES[0]


def catalogues() -> dict[str, gettext.NullTranslations]:
    """The console's catalogue compiled for each language."""
    return {language: catalogue.compiled(HERE / "locale", language) for language in LANGUAGES}


def N_(message: str) -> str:
    """Marks a message for the catalogue where it is defined; translated where it is shown
    (`tr.gettext(message)`). tests/test_console_catalog.py extracts these with gettext's."""
    return message


class Renderer:
    def __init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # all templates are HTML
            extensions=["jinja2.ext.i18n"],
            undefined=jinja2.StrictUndefined,  # a misspelt variable fails a test, not a page silently
        )
        self.env.install_null_translations(newstyle=True)  # type: ignore[attr-defined]  # the i18n extension's
        self.translations = catalogues()
        # The stylesheet's and the script's addresses, with their content's hash: a changed
        # file reaches every browser at once, however long it kept the last one.
        self.assets = {
            p.name: f"{pages.static(p.name)}?v={hashlib.sha256(p.read_bytes()).hexdigest()[:12]}"
            for p in (HERE / "static").iterdir()
            if p.is_file()
        }
        self.env.globals["asset"] = self.assets.__getitem__
        self.env.globals["pages"] = pages  # every console address (console/pages.py)

    def render(self, name: str, language: str, **context: Any) -> str:
        # The translation functions go in with each page's context, not the environment's
        # globals: one worker renders pages in several languages at once (gevent).
        tr = self.translations.get(language) or self.translations[DEFAULT_LANGUAGE]

        def gettext_(message: str, **values: Any) -> str:
            # Markup's % escapes the values (they may come from outside); the catalogue's
            # own text is trusted.
            return Markup(tr.gettext(message)) % values if values else tr.gettext(message)

        def ngettext_(singular: str, plural: str, num: float, **values: Any) -> str:
            # A number in a sentence: the form its count takes (Czech has three), `num` filled in.
            text, shown = catalogue.plural(tr, singular, plural, num, language)
            return Markup(text) % {"num": shown, **values}

        return self.env.get_template(name).render(
            gettext=gettext_, _=gettext_, ngettext=ngettext_, language=language, once=_once, **context
        )


def _once() -> str:
    """A form's token of its one use (console/once.py), fresh in every form drawn."""
    return secrets.token_urlsafe(16)


LANGUAGE_COOKIE = "console_lang"  # the login page's language choice, before anyone is known


def cookie(req: falcon.Request, name: str) -> str | None:
    """The first value of the request's cookie `name`, or None."""
    values = req.get_cookie_values(name)
    return values[0] if values else None


def html(resp: falcon.Response, text: str, status: str = falcon.HTTP_200) -> None:
    """Answer with a console page. Pages carry patients' data: never kept by a shared
    computer's cache."""
    resp.status = status
    resp.content_type = "text/html; charset=utf-8"
    resp.cache_control = ["no-store"]
    resp.text = text


def see_other(to: str) -> falcon.HTTPSeeOther:
    """303 after a POST: the browser GETs the next page (post/redirect/get)."""
    return falcon.HTTPSeeOther(to)
