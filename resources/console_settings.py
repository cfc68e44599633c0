"""The console's admin pages (issue 21): the clinic's settings and its audit trail.
ConsoleSession (console/middleware.py) lets a resource with `admin_required` run only
for an admin of the clinic it acts on, and puts that clinic in `req.context.admin_clinic`."""
from __future__ import annotations

import falcon

from console.rendering import Renderer
from resources.console import _html

# The settings sections, in the order the index lists them; each section's page adds itself here.
SECTIONS: list[dict[str, str]] = []


class SettingsIndex:
    admin_required = True

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        _html(resp, self.renderer.render("console/settings/index.html", session.user.language, user=session.user,
                                         csrf_token=session.csrf_token, clinic=req.context.admin_clinic,
                                         clinics=req.context.admin_clinics, sections=SECTIONS))
