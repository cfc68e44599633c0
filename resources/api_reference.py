"""The interactive API reference at /docs: Swagger UI rendering /openapi.json, no auth (like
/openapi.json itself: the contract is public, the data is not).

Swagger UI's distribution comes in a wheel (`swagger-ui-bundle-v2`, pinned in
requirements.txt, kept by connexion's maintainers), so a PaaS build needs nothing but pip,
and is served from here: the page loads nothing from anywhere but this service. Its Content-Security-Policy says so to
the browser too, so a future Swagger UI that reached for a CDN, a font or the public
validator would be stopped by the browser, not only by the test that looks for it."""

from __future__ import annotations

import html
from pathlib import Path

import falcon
from markdown_it import MarkdownIt
from swagger_ui_bundle import swagger_ui_path

from web.error_codes import ERROR_CODES, TABLE_PATH, anchor
from web.errors import APIError

SWAGGER_UI = Path(__file__).resolve().parent.parent / "web" / "swagger-ui"
DIST = Path(str(swagger_ui_path))
PREFIX = "/docs"

# name served under /docs/assets/ -> (file, content type). Only these: no path from a URL
# ever reaches the file system.
_ASSETS = {
    "swagger-ui.css": (DIST / "swagger-ui.css", "text/css; charset=utf-8"),
    "swagger-ui-bundle.js": (DIST / "swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    "favicon-32x32.png": (DIST / "favicon-32x32.png", "image/png"),
    "initializer.js": (SWAGGER_UI / "initializer.js", "text/javascript; charset=utf-8"),
}

# Everything from this origin; inline styles because Swagger UI sets element styles itself;
# images may be data: URIs (its icons). No other origin for anything, requests included.
_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Clinic integration service: API reference</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<noscript>This reference needs JavaScript. The same contract as JSON:
<a href="/openapi.json">/openapi.json</a>.</noscript>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/initializer.js"></script>
</body>
</html>
"""


def _missing() -> APIError:
    return APIError(
        503,
        "SERVICE_UNAVAILABLE",
        "The API reference is not installed on this server (pip install -r requirements.txt brings "
        "Swagger UI). The contract itself is at /openapi.json.",
    )


class ApiReference:
    """GET /docs: the page that loads Swagger UI and points it at /openapi.json."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if not DIST.is_dir():
            raise _missing()
        resp.content_type = "text/html; charset=utf-8"
        resp.set_header("Content-Security-Policy", _POLICY)
        resp.cache_control = ["no-cache"]
        resp.text = _PAGE


def error_table_page() -> str:
    """The error table (web/error_codes.py) as a page: a row per code, its anchor the code's
    (`anchor`), what the OpenAPI document links each code to. The cells are the table's own
    Markdown (no HTML: the source is this service's, but escaped all the same)."""
    md = MarkdownIt("commonmark", {"html": False})
    rows = "".join(
        f'<tr id="{anchor(row.code)}"><td>{row.status if row.status is not None else "other 4xx"}</td>'
        f'<td><a href="#{anchor(row.code)}"><code>{html.escape(row.code)}</code></a></td>'
        f"<td>{md.renderInline(row.cause)}</td><td>{md.renderInline(row.action)}</td></tr>\n"
        for row in ERROR_CODES
    )
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>Clinic integration service: error codes</title>\n</head>\n<body>\n<h1>Error codes</h1>\n"
        '<p>Every error is <code>{"error", "code"}</code> (a 400 about one field adds <code>param</code>). '
        'Act on the code, never on the message. The API reference: <a href="/docs">/docs</a>.</p>\n'
        "<table>\n<thead><tr><th>status</th><th>code</th><th>cause</th>"
        "<th>what the caller should do</th></tr></thead>\n"
        f"<tbody>\n{rows}</tbody>\n</table>\n</body>\n</html>\n"
    )


class ErrorTable:
    """GET /docs/errors: the error table, a row (an anchor) per code; no auth, like /docs."""

    PATH = TABLE_PATH

    def __init__(self) -> None:
        self.page = error_table_page()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "text/html; charset=utf-8"
        resp.set_header("Content-Security-Policy", _POLICY)
        resp.cache_control = ["public", "max-age=3600"]
        resp.text = self.page


class ApiReferenceAsset:
    """GET /docs/assets/{name}: Swagger UI's files and the initializer, cached a day."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        asset = _ASSETS.get(name)
        if asset is None:
            raise falcon.HTTPNotFound()
        path, content_type = asset
        if not path.is_file():
            raise _missing()
        resp.content_type = content_type
        resp.set_header("Content-Security-Policy", _POLICY)
        resp.cache_control = ["public", "max-age=86400"]
        resp.data = path.read_bytes()
