"""The console's one stylesheet."""

from __future__ import annotations

from pathlib import Path

import falcon


class ConsoleStatic:
    """The one stylesheet. Cached a day; the console has no build step to fingerprint it,
    so a change reaches browsers within a day (or at once on reload)."""

    def __init__(self, directory: Path) -> None:
        self.files = {p.name: p for p in directory.iterdir() if p.suffix == ".css"}

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        path = self.files.get(name)
        if path is None:
            raise falcon.HTTPNotFound()
        resp.content_type = "text/css; charset=utf-8"
        resp.cache_control = ["public", "max-age=86400"]
        resp.data = path.read_bytes()
