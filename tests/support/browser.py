"""The browser tests' headless Chromium (a pytest plugin, see conftest.py): Debian's
/usr/bin/chromium driven by Playwright for Python, never `playwright install`.

`browser`: one Chromium for the test, closed after it. A module may add switches with a
module-level `CHROMIUM_EXTRA_ARGS` list.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.tiers import needs

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # The recordings come from the test HTTPS server, whose CA (trustme) Chromium does not know.
    "--ignore-certificate-errors",
]


@pytest.fixture
@needs("browser")
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM, args=ARGS + list(getattr(request.module, "CHROMIUM_EXTRA_ARGS", ()))
        )
        try:
            yield chromium
        finally:
            chromium.close()
