"""The console's one stylesheet and one script."""

from __future__ import annotations

from pathlib import Path

import falcon

TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


class ConsoleStatic:
    """The stylesheet and the script. Cached a day; the console has no build step to
    fingerprint them, so a change reaches browsers within a day (or at once on reload)."""

    def __init__(self, directory: Path) -> None:
        self.files = {p.name: p for p in directory.iterdir() if p.suffix in TYPES}

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        path = self.files.get(name)
        if path is None:
            raise falcon.HTTPNotFound()
        resp.content_type = TYPES[path.suffix]
        resp.cache_control = ["public", "max-age=86400"]
        resp.data = path.read_bytes()
