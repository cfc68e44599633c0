"""Writing an e-mail: its subject, a plain text part and an HTML part, in Czech or English
(the recipient's language), from the templates beside this module and the e-mails' own
catalogue (locale/cs/LC_MESSAGES/messages.po, English msgids). Autoescaped HTML; the text
part unescaped. Never patient data: what a template is given is ids, the clinic's name,
times and console links."""

from __future__ import annotations

import gettext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from plumbing import catalogue

HERE = Path(__file__).parent
LANGUAGES = ("cs", "en")  # the first is the default: the clinics are Czech
DEFAULT_LANGUAGE = LANGUAGES[0]


def N_(message: str) -> str:
    """Marks a message for the catalogue where it is defined; translated where it is written."""
    return message


def Nn_(singular: str, plural: str) -> tuple[str, str]:
    """Marks a message with a number for the catalogue, with its plural (`ngettext`'s)."""
    return singular, plural


#: Each template's subject, in the catalogue (`%(...)s` filled from its values); one with a
#: number is its singular and plural, the number being the values' `num`.
SUBJECTS: dict[str, str | tuple[str, str]] = {
    "urgent": N_("Messages that may be urgent: %(clinic)s"),
    "key_expiring": Nn_("An API key expires in %(num)s day: %(key)s", "An API key expires in %(num)s days: %(key)s"),
    "key_refused": N_("Calls refused: the API key %(key)s %(reason)s"),
    "webhook_disabled": N_("Webhooks stopped: %(clinic)s"),
    "password_reset": N_("Set a new password for the clinic console"),
    "welcome": N_("Your account in the clinic console"),
    "password_link": N_("A link to set your password in the clinic console"),
}


@dataclass(frozen=True)
class Written:
    subject: str
    text: str
    html: str
    language: str


class Composer:
    """The e-mails' templates and catalogues, loaded once per worker."""

    def __init__(self) -> None:
        self.translations = {language: catalogue.compiled(HERE / "locale", language) for language in LANGUAGES}
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=jinja2.select_autoescape(["html"], default_for_string=False, default=False),
            extensions=["jinja2.ext.i18n"],
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.install_null_translations(newstyle=True)  # type: ignore[attr-defined]  # the i18n extension's

    def tr(self, language: str) -> gettext.NullTranslations:
        return self.translations.get(language) or self.translations[DEFAULT_LANGUAGE]

    def write(self, template: str, language: str, **values: Any) -> Written:
        tr = self.tr(language)
        if language not in self.translations:
            language = DEFAULT_LANGUAGE
        parts = {}
        for kind in ("txt", "html"):

            def gettext_(message: str, _html: bool = kind == "html", **given: Any) -> str:
                text = tr.gettext(message)
                if not given:
                    return text
                return Markup(text) % given if _html else text % given

            def ngettext_(singular: str, plural: str, num: float, _html: bool = kind == "html", **given: Any) -> str:
                # A number in a sentence: the form its count takes (Czech has three).
                text, shown = catalogue.plural(tr, singular, plural, num, language)
                return Markup(text) % {"num": shown, **given} if _html else text % {"num": shown, **given}

            parts[kind] = self.env.get_template(f"{template}.{kind}").render(
                gettext=gettext_, _=gettext_, ngettext=ngettext_, language=language, **values
            )
        wording = SUBJECTS[template]
        given = values.get("subject", {})
        if isinstance(wording, tuple):  # a subject with a number: its plural forms
            text, shown = catalogue.plural(tr, wording[0], wording[1], given["num"], language)
            subject = text % {**given, "num": shown}
        else:
            subject = tr.gettext(wording) % given
        return Written(" ".join(subject.split()), parts["txt"].strip() + "\n", parts["html"], language)
