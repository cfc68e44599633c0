"""/openapi.json (and so /docs, which renders it) names the deployment's own address: the
configured PUBLIC_BASE_URL; else the origin the request reached, as a proxy the operator
trusts (TRUST_FORWARDED_PROTO, TRUSTED_PROXY_HOPS) reports it; else "/", the document's own
origin. A Host or X-Forwarded-* header a client wrote itself is never repeated back."""

from __future__ import annotations

from dataclasses import replace

import pytest
import webtest

from app import create_app
from plumbing.database import db

SPOOFED = {"Host": "evil.example", "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}


@pytest.fixture
def served(config):
    """`served(**settings)`: the document's servers as an app with those settings answers."""
    before = db.obj

    def servers(headers: dict[str, str] | None = None, **settings) -> list[dict[str, str]]:
        web = webtest.TestApp(create_app(replace(config, **settings)))
        return web.get("/openapi.json", headers=headers or {}).json["servers"]

    yield servers
    db.initialize(before)


def test_the_configured_address_whatever_the_headers_say(served):
    assert served(SPOOFED, public_base_url="https://clinic.example.org") == [{"url": "https://clinic.example.org"}]
    assert served(
        SPOOFED, public_base_url="https://clinic.example.org", trusted_proxy_hops=1, trust_forwarded_proto=True
    ) == [{"url": "https://clinic.example.org"}]


def test_without_a_configured_address_or_a_trusted_proxy_the_documents_own_origin(served, app):
    assert served(SPOOFED) == [{"url": "/"}]
    assert app.get("/openapi.json", headers=SPOOFED).json["servers"] == [{"url": "/"}], "the suite's own app"


def test_behind_a_trusted_proxy_the_origin_it_reports(served):
    proxied = {"Host": "10.0.0.7:8000", "X-Forwarded-Host": "clinic.example.org", "X-Forwarded-Proto": "https"}
    assert served(proxied, trusted_proxy_hops=1, trust_forwarded_proto=True) == [{"url": "https://clinic.example.org"}]
    # X-Forwarded-Proto only when the operator says the proxy sets it.
    assert served(proxied, trusted_proxy_hops=1) == [{"url": "http://clinic.example.org"}]
    # A proxy that passes the Host through (no X-Forwarded-Host): the Host it forwarded.
    assert served({"Host": "clinic.example.org", "X-Forwarded-Proto": "https"}, trust_forwarded_proto=True) == [
        {"url": "https://clinic.example.org"}
    ]
    # Two proxies: the entry the outer one wrote, not one the client prepended.
    two = {"X-Forwarded-Host": "evil.example, clinic.example.org, inner.local", "X-Forwarded-Proto": "https"}
    assert served(two, trusted_proxy_hops=2, trust_forwarded_proto=True) == [{"url": "https://clinic.example.org"}]
    # Something that is no host name is not an origin.
    assert served({"X-Forwarded-Host": "clinic.example.org/<script>"}, trusted_proxy_hops=1) == [{"url": "/"}]


def test_local_storage_keeps_its_address_when_public_base_url_is_unset(config):
    from config import LOCAL_BASE_URL, Config
    from storage import make_storage

    assert Config().public_base_url == ""
    assert make_storage(replace(config, public_base_url="")).public_base_url == LOCAL_BASE_URL
    assert make_storage(replace(config, public_base_url="https://x.example")).public_base_url == "https://x.example"
