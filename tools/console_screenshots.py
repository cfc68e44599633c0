"""The documentation's screenshots, taken from a running service (the demo of `bin/run
--try-handoff`): the inbox at desktop and phone width, a request page, the inbox in English,
and the office hours settings page when the login is an admin's (in OUT); the staff guides'
pictures in Czech and English (inbox, request page, each settings page, API keys, audit
trail, the help page itself: OUT/staff/img/NAME.LANG.png); and the API reference at /docs
(OUT/api-reference.png).

    .venv/bin/python tools/console_screenshots.py --email admin@demo-clinic.example \\
        --password '…' [--base-url http://127.0.0.1:8000] [--out docs]

Reads the password from --password or, when it is "-", from standard input. Drives Debian's
Chromium (/usr/bin/chromium) through Playwright; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
DESKTOP = {"width": 1100, "height": 800}
PHONE = {"width": 390, "height": 844}


def login(page: Page, base: str, email: str, password: str, language: str) -> None:
    """Log in and show the console in `language`: a logged-in page follows the account's
    language, switched with the header's button (and switched back by the caller)."""
    page.goto(f"{base}/console/login?lang={language}")
    page.fill("#email", email)
    page.fill("#password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/console/")
    switch = page.query_selector(f"form[action='/console/language'] button[value='{language}']")
    if switch is not None:
        switch.click()
        page.wait_for_selector(f"html[lang='{language}']")


def shoot(page: Page, path: Path) -> None:
    page.screenshot(path=str(path), full_page=True)
    print(path)


def shoot_window(page: Page, path: Path) -> None:
    page.screenshot(path=str(path))
    print(path)


# The staff guides' pictures: file name -> console path (None: the first request's page).
GUIDE_PAGES = {
    "inbox": "/console/",
    "request": None,
    "office-hours": "/console/settings/office-hours",
    "calendars": "/console/settings/calendars",
    "calls": "/console/settings/calls",
    "request-types": "/console/settings/request-types",
    "api-keys": "/console/settings/api-keys",
    "audit": "/console/audit",
    "help": "/console/help",
}


def guide_pictures(page: Page, base: str, language: str, out: Path) -> None:
    """The guides' pictures in `language`, the window's height each (a guide shows what one
    sees first; a whole audit trail would be a scroll of its own)."""
    for name, path in GUIDE_PAGES.items():
        if path is None:
            page.goto(f"{base}/console/")
            first = page.query_selector("ul.rows a.who")
            if first is None:
                continue
            first.click()
            page.wait_for_selector("ol.history")
        else:
            page.goto(base + path)
        page.screenshot(path=str(out / f"{name}.{language}.png"))
        print(out / f"{name}.{language}.png")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--email", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--out", default="docs", type=Path)
    args = ap.parse_args()
    password = sys.stdin.readline().rstrip("\n") if args.password == "-" else args.password
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        # The demo's sample server has a throw-away CA (var/sample-ca.pem) the browser does not know.
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--ignore-certificate-errors"])
        try:
            for language, viewport, name in (
                ("cs", DESKTOP, "console-inbox.png"),
                ("cs", PHONE, "console-inbox-phone.png"),
                ("en", DESKTOP, "console-inbox-en.png"),
            ):
                # The browser's own locale too: date inputs and the player follow it, not the page.
                page = browser.new_page(viewport=viewport, locale="cs-CZ" if language == "cs" else "en-GB")
                login(page, args.base_url, args.email, password, language)
                # Polled through page.evaluate: the console's Content-Security-Policy has no
                # 'unsafe-eval', which Playwright's wait_for_function polls with.
                ready = (
                    "document.querySelectorAll('audio').length === 0 || "
                    "[...document.querySelectorAll('audio')].every(a => a.readyState >= 1 || a.error !== null)"
                )
                deadline = time.monotonic() + 15
                while not page.evaluate(ready) and time.monotonic() < deadline:
                    page.wait_for_timeout(100)
                shoot(page, args.out / name)
                if name == "console-inbox.png":
                    first = page.query_selector("ul.rows a.who")
                    if first is not None:
                        first.click()
                        page.wait_for_selector("ol.history")
                        shoot(page, args.out / "console-request.png")
                    if page.query_selector("a[href='/console/settings']"):
                        # A settings page with content (the staff guides show it), not the index.
                        page.goto(f"{args.base_url}/console/settings/office-hours")
                        shoot(page, args.out / "console-settings.png")
                if viewport == DESKTOP:
                    (args.out / "staff" / "img").mkdir(parents=True, exist_ok=True)
                    guide_pictures(page, args.base_url, language, args.out / "staff" / "img")
                if language != "cs":  # the demo account back to Czech, the clinics' language
                    page.goto(f"{args.base_url}/console/")
                    page.click("form[action='/console/language'] button[value='cs']")
                    page.wait_for_selector("html[lang='cs']")
                page.close()
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{args.base_url}/docs")
            page.wait_for_selector(".opblock")
            shoot_window(page, args.out / "api-reference.png")
            page.close()
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
