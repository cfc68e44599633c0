"""The console's addresses the e-mails link to, under PUBLIC_BASE_URL. The console's own
list (console/pages.py) is above this package; tests/test_notices.py holds these to it."""

from __future__ import annotations

from urllib.parse import urlencode

INBOX = "/console/"
ACCOUNT = "/console/account"
API_KEYS = "/console/settings/api-keys"
WEBHOOKS = "/console/settings/webhooks"


def request(request_id: object) -> str:
    return f"/console/requests/{request_id}"


def password_link(token: str, language: str) -> str:
    """A set-password link, opened in the e-mail's language."""
    return f"/console/password/{token}?{urlencode({'lang': language})}"


def api_keys(slug: str) -> str:
    """The API keys page of one clinic."""
    return f"{API_KEYS}?{urlencode({'clinic': slug})}"


def webhooks(slug: str) -> str:
    """The webhooks page of one clinic."""
    return f"{WEBHOOKS}?{urlencode({'clinic': slug})}"
