"""The security headers on each kind of answer: console pages (logged in, the login page, a
refusal, a redirect), the console's static files, the API's JSON (an answer with patient data,
an error, a redirect to a recording), the API reference (its own policy kept), over http and
https; and a probe of gunicorn as a PaaS runs it (TRUSTED_PROXY_HOPS=1, TRUST_FORWARDED_PROTO,
the router's X-Forwarded-Proto: https) that reads the same headers off the wire, with the
session cookie's flags."""

from __future__ import annotations

from dataclasses import replace

import pytest
import requests
import webtest

from app import create_app
from models import Clinic, StaffMembership, StaffUser
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import bearer, clinic, issue_token, load, organization
from tests.support.gunicorn import serving, start_gunicorn
from tests.support.ports import free_port
from tests.support.processes import stop_process
from tests.support.worker import worker_env
from web.security import CONSOLE_POLICY

PASSWORD = "correct horse battery"
SEARCH = "/external/v1/clinics/clinic-a/patients/search"
SEARCH_BODY = {"query": "Nov"}


@pytest.fixture
def people(app):
    load(
        organization(
            clinic("clinic-a"),
            patients=[
                {
                    "key": "jana",
                    "firstName": "Jana",
                    "lastName": "Nováková",
                    "phone": "+420 601 123 456",
                    "records": [{"clinic": "clinic-a"}],
                }
            ],
        )
    )
    with db.connection_context():
        user = StaffUser.create(email="anna@example.cz", name="Anna", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == "clinic-a"), role="staff")


def console_page(headers) -> None:
    """What every console answer carries: no framing, the policy, no sniffing, no referrer out."""
    assert headers["X-Frame-Options"] == "DENY"
    policy = headers["Content-Security-Policy"]
    assert policy == CONSOLE_POLICY
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["frame-ancestors"] == "'none'"
    assert directives["script-src"] == "'self'" and "unsafe-inline" not in policy
    assert "https:" in directives["media-src"].split(), "the recordings redirect to the platform's https host"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "same-origin"


def test_console_answers_of_every_kind(people, app):
    login = app.get("/console/login")
    console_page(login.headers)
    assert login.headers["Cache-Control"] == "no-store"
    assert "Strict-Transport-Security" not in login.headers, "plain http: HSTS would mean nothing"
    form = login.forms[0]
    form["email"], form["password"] = "anna@example.cz", PASSWORD
    done = form.submit(status=303)
    console_page(done.headers)
    cookie = next(c for c in done.headers.getall("Set-Cookie") if c.startswith("console_session="))
    assert "max-age" not in cookie.lower() and "expires" not in cookie.lower(), "a browser-session cookie"
    inbox = app.get("/console/")
    console_page(inbox.headers)
    assert "<script>" not in inbox.text and '<script src="/console/static/console.js?v=' in inbox.text
    refused = app.get("/console/settings", status=403)  # a staff member
    console_page(refused.headers)
    missing = app.get("/console/requests/00000000-0000-0000-0000-000000000000", status=404)
    assert missing.headers["X-Content-Type-Options"] == "nosniff" and missing.headers["X-Frame-Options"] == "DENY"
    csrf = app.post("/console/logout", {"csrf_token": "wrong"}, status=403)
    console_page(csrf.headers)
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        static = app.get(f"/console/static/{name}")
        assert static.content_type == kind and static.headers["X-Content-Type-Options"] == "nosniff"
        assert static.headers["Cache-Control"] == "public, max-age=86400", "cached like the stylesheet"
    # No page of the console has an inline script left.
    for path in ("/console/", "/console/account", "/console/account/two-factor", "/console/help"):
        assert "<script>" not in app.get(path).text, path


def test_api_answers_of_every_kind(people, app):
    token = issue_token(["clinic-a"], ["read", "write"])
    found = app.post_json(SEARCH, SEARCH_BODY, headers=bearer(token))
    assert found.json["data"][0]["lastName"] == "Nováková"
    for answer in (
        found,
        app.post_json(SEARCH, SEARCH_BODY, status=401),
        app.post_json(SEARCH.replace("clinic-a", "no-such-clinic"), SEARCH_BODY, headers=bearer(token), status=404),
    ):
        assert answer.headers["Cache-Control"] == "no-store", "patient data: no cache keeps it"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Referrer-Policy"] == "same-origin"
        assert answer.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
        assert "Strict-Transport-Security" not in answer.headers
    over_https = app.post_json(SEARCH, SEARCH_BODY, headers=bearer(token), extra_environ={"wsgi.url_scheme": "https"})
    assert over_https.headers["Strict-Transport-Security"] == "max-age=31536000"
    # A client's own X-Forwarded-Proto means nothing unless the operator trusts the proxy.
    spoofed = app.post_json(SEARCH, SEARCH_BODY, headers={**bearer(token), "X-Forwarded-Proto": "https"})
    assert "Strict-Transport-Security" not in spoofed.headers
    docs = app.get("/docs")
    assert "script-src 'self'" in docs.headers["Content-Security-Policy"]
    assert docs.headers["Content-Security-Policy"] != CONSOLE_POLICY, "the API reference keeps its own policy"
    assert docs.headers["Cache-Control"] == "no-cache", "and its own caching"
    assert docs.headers["X-Content-Type-Options"] == "nosniff"


def test_behind_a_trusted_proxy_https_answers_carry_hsts(people, config):
    trusted = webtest.TestApp(create_app(replace(config, trust_forwarded_proto=True, trusted_proxy_hops=1)))
    page = trusted.get("/console/login", headers={"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"})
    assert page.headers["Strict-Transport-Security"] == "max-age=31536000"
    plain = trusted.get("/console/login", headers={"X-Forwarded-Proto": "http"})
    assert "Strict-Transport-Security" not in plain.headers


@pytest.mark.gunicorn
def test_probe_of_gunicorn_as_a_paas_runs_it(people, app, ca_bundle, tmp_path):
    """The headers off the wire, as the router forwards an https request (one proxy hop)."""
    port = free_port()
    env = worker_env(ca_bundle, TRUSTED_PROXY_HOPS="1", TRUST_FORWARDED_PROTO="1", LOG_FORMAT="text")
    proc = start_gunicorn(
        port, env=env, log=tmp_path / "web.log", ready=lambda _: serving(f"http://127.0.0.1:{port}"), timeout=120
    )
    base = f"http://127.0.0.1:{port}"
    router = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.7"}
    results = {}
    try:
        with requests.Session() as browser:
            browser.headers.update(router)
            login = browser.get(base + "/console/login", timeout=60)
            results["console login page"] = login.headers
            # The pre-login cookie is Secure (the router said https): requests keeps it from plain
            # http, so it is sent by hand, as the browser would over the router's https.
            csrf = login.cookies["console_csrf"]
            done = browser.post(
                base + "/console/login",
                allow_redirects=False,
                timeout=60,
                cookies={"console_csrf": csrf},
                data={"csrf_token": csrf, "email": "anna@example.cz", "password": PASSWORD},
            )
            assert done.status_code == 303, done.text
            cookie = next(c for c in done.raw.headers.getlist("Set-Cookie") if c.startswith("console_session="))
            assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
            assert "max-age" not in cookie.lower() and "expires" not in cookie.lower()
            browser.cookies.set("console_session", cookie.split(";")[0].split("=", 1)[1], path="/console")
            inbox = browser.get(base + "/console/", timeout=60)
            assert "Anna" in inbox.text and csrf_of_text(inbox.text)
            results["console page"] = inbox.headers
            results["console static"] = browser.get(base + "/console/static/console.js", timeout=60).headers
        token = issue_token(["clinic-a"], ["read"])
        api = requests.post(base + SEARCH, json=SEARCH_BODY, headers={**router, **bearer(token)}, timeout=60)
        assert api.status_code == 200, api.text
        results["API JSON"] = api.headers
        results["API error"] = requests.post(base + SEARCH, json=SEARCH_BODY, headers=router, timeout=60).headers
        results["API reference"] = requests.get(base + "/docs", headers=router, timeout=60).headers
    finally:
        stop_process(proc, 30)
    for kind, headers in results.items():
        assert headers["Strict-Transport-Security"] == "max-age=31536000", kind
        assert headers["X-Content-Type-Options"] == "nosniff", kind
        assert headers["Referrer-Policy"] == "same-origin", kind
    for kind in ("console login page", "console page"):
        console_page(results[kind])
        assert results[kind]["Cache-Control"] == "no-store"
    for kind in ("API JSON", "API error"):
        assert results[kind]["Cache-Control"] == "no-store", kind
        assert "frame-ancestors 'none'" in results[kind]["Content-Security-Policy"], kind
    assert results["API reference"]["Content-Security-Policy"] != CONSOLE_POLICY
    print("\nheader probe (gunicorn, TRUSTED_PROXY_HOPS=1, TRUST_FORWARDED_PROTO=1, X-Forwarded-Proto: https):")
    for kind, headers in results.items():
        shown = {
            k: headers.get(k)
            for k in (
                "Strict-Transport-Security",
                "X-Frame-Options",
                "Content-Security-Policy",
                "X-Content-Type-Options",
                "Referrer-Policy",
                "Cache-Control",
            )
        }
        print(f"  {kind}: {shown}")


def csrf_of_text(text: str) -> bool:
    return 'name="csrf_token"' in text
