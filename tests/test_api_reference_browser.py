"""The interactive API reference at /docs in a real headless Chromium (Debian's
/usr/bin/chromium through Playwright): it loads without a token, renders every operation of
/openapi.json, and no request leaves the service's origin (nor is one stopped by the page's
Content-Security-Policy, which would mean the renderer tried)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from resources import api_reference
from tests.support.live_service import serve

METHODS = {"get", "put", "post", "patch", "delete", "head", "options"}


@pytest.fixture(scope="module")
def service(wsgi_app):
    # No PUBLIC_BASE_URL, no trusted proxy: the document's server is "/", the page names its origin.
    with serve(public_base_url="") as base:
        yield base


def operations(document: dict) -> list[str]:
    """Every operation's id: the paths' and the webhooks' (Swagger UI renders both)."""
    items = [*document["paths"].values(), *document.get("webhooks", {}).values()]
    return [op["operationId"] for item in items for method, op in item.items() if method in METHODS]


def test_docs_renders_every_operation_and_loads_nothing_from_elsewhere(service, browser, tmp_path):
    """(The browser is the suite's: tests/support/browser.py.)"""
    assert api_reference.DIST.is_dir(), "requirements.txt brings Swagger UI (swagger-ui-bundle-v2)"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))

    answer = page.goto(service + "/docs")
    assert answer is not None and answer.status == 200
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    document = page.request.get(service + "/openapi.json").json()
    expected = operations(document)
    assert len(expected) >= 20
    page.wait_for_function(f"document.querySelectorAll('.opblock').length >= {len(expected)}", timeout=60_000)
    shown = page.locator(".opblock .opblock-summary-operation-id").all_inner_texts()
    assert sorted(shown) == sorted(expected), "every operation is rendered once, by its operationId"
    assert page.locator(".info .title").inner_text().startswith(document["info"]["title"])

    # "Try it out" sends to the address this page was reached at, not an address of the machine's.
    assert document["servers"] == [{"url": "/"}]
    assert page.locator(".servers select option").all_inner_texts() == [service]

    # Expanding an operation renders its request body schema (the renderer resolved the $refs).
    page.locator("#operations-switchboard-recordingComplete .opblock-summary").click()
    page.locator(
        "#operations-switchboard-recordingComplete .body-param__example, "
        "#operations-switchboard-recordingComplete .model-example"
    ).first.wait_for(timeout=30_000)
    assert "CallSid" in page.locator("#operations-switchboard-recordingComplete").inner_text()
    page.screenshot(path=str(tmp_path / "api-reference.png"))
    origin = urlsplit(service)
    elsewhere = [
        url for url in requested if not url.startswith("data:") and urlsplit(url)[:2] != (origin.scheme, origin.netloc)
    ]
    assert not elsewhere, f"requests leaving the service: {elsewhere}"
    assert any(url.endswith("/openapi.json") for url in requested)
    blocked = [p for p in problems if "Content Security Policy" in p or "Refused to" in p]
    assert not blocked and not problems, problems


def test_docs_and_its_assets_need_no_token_and_serve_only_named_files(app):
    page = app.get("/docs", status=200)
    assert page.content_type == "text/html"
    assert "swagger-ui-bundle.js" in page.text
    for name in ("swagger-ui.css", "swagger-ui-bundle.js", "initializer.js"):
        asset = app.get(f"/docs/assets/{name}", status=200)
        assert asset.headers["Cache-Control"] == "public, max-age=86400" and asset.body
    assert "validatorUrl: null" in app.get("/docs/assets/initializer.js").text
    for name in ("index.html", "..%2Fpackage.json", "swagger-ui.js.map", "package.json"):
        app.get(f"/docs/assets/{name}", status=404)
