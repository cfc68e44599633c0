"""The console's help: the staff guides (docs/staff/*.md) in the user's language. Open
before login too (the login page's reader may need "who resets my password"): the guides
hold no clinic's data. The language: the user's, else the login page's choice."""

from __future__ import annotations

import falcon

from console import help as guides_module
from console.rendering import DEFAULT_LANGUAGE, LANGUAGE_COOKIE, LANGUAGES, Renderer, cookie, html


class HelpPage:
    """GET /console/help (the receptionist's guide) and /console/help/{name}."""

    def __init__(self, renderer: Renderer, guides: guides_module.Guides) -> None:
        self.renderer = renderer
        self.guides = guides

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str = guides_module.PAGES[0]) -> None:
        session = req.context.console_session
        if session is not None:
            language = session.user.language
        else:
            chosen = req.get_param("lang") or cookie(req, LANGUAGE_COOKIE)
            language = chosen if chosen in LANGUAGES else DEFAULT_LANGUAGE
        guide = self.guides.get(name, language) if name in guides_module.PAGES else None
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
        path = guides_module.image(name)
        if path is None:
            raise falcon.HTTPNotFound()
        resp.content_type = "image/png"
        resp.cache_control = ["public", "max-age=86400"]
        resp.data = path.read_bytes()
