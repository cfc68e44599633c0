"""The console's one stylesheet and one script."""

from __future__ import annotations

from pathlib import Path

import falcon

TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


class ConsoleStatic:
    """The stylesheet and the script. The pages link them with their content's hash
    (`Renderer.asset`), so a browser may keep them a year: a changed file is another URL.
    There is no build step: the hash is taken when the process starts."""

    def __init__(self, directory: Path) -> None:
        self.files = {p.name: p for p in directory.iterdir() if p.suffix in TYPES}

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        path = self.files.get(name)
        if path is None:
            raise falcon.HTTPNotFound()
        resp.content_type = TYPES[path.suffix]
        # A request without the current hash (an old page, a hand-typed URL) is kept a day only.
        fresh = req.get_param("v") is not None
        resp.cache_control = ["public", "max-age=31536000", "immutable"] if fresh else ["public", "max-age=86400"]
        resp.data = path.read_bytes()
