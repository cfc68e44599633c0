"""The whole service behind a real HTTP server in a thread (presigned URLs need one),
WebTest against a live server (`over_http`), plus the data set the signed-documents tests
share."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from app import create_app
from config import Config
from onboarding.writer import stable_id
from plumbing.database import bind_database, db
from tests.conftest import PG_URL, REDIS_URL
from tests.support import SECRET_KEY, clinic, organization
from tests.support.servers import serve_wsgi


def _placeholder(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
    return [b"starting"]


@contextlib.contextmanager
def serve(**overrides: Any) -> Iterator[str]:
    """Serve `create_app(Config(...))` on a free loopback port; yields the base URL.

    The port is bound first, so `public_base_url` (and the local storage URLs signed
    with it) point at this very server. `overrides` are Config fields; they win.
    """
    served: dict[str, Any] = {}  # the settings, once the app serves them
    try:
        with serve_wsgi(_placeholder) as httpd:
            base_url = f"http://127.0.0.1:{httpd.server_port}"
            settings = {
                "database_url": PG_URL,
                "redis_url": REDIS_URL,
                "secret_key": SECRET_KEY,
                "db_pool_size": 4,
                "public_base_url": base_url,
                **overrides,
            }
            config = Config(**settings)
            httpd.set_app(create_app(config))
            served = settings
            yield base_url
    finally:
        if served:  # the server is down: its pooled connections closed, a fresh pool bound
            db.obj.close_all()
            bind_database(served["database_url"], pool_size=4)


_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length"}


def over_http(base_url: str) -> Callable[[dict[str, Any], Any], list[bytes]]:
    """A WSGI app that sends each request to the server at `base_url` as it came (method,
    path, query, headers, body; redirects not followed) and answers what it answered:
    `webtest.TestApp(over_http(url))` drives a live service (gunicorn) with WebTest's
    forms and cookies."""
    import urllib.parse

    import requests

    http = requests.Session()
    http.trust_env = False

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = urllib.parse.quote(environ.get("PATH_INFO", "").encode("latin-1"), safe="/:@!$&'()*+,;=-._~%")
        query = environ.get("QUERY_STRING", "")
        headers = {
            key[5:].replace("_", "-").title(): value for key, value in environ.items() if key.startswith("HTTP_")
        }
        for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(key):
                headers[key.replace("_", "-").title()] = environ[key]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        http.cookies.clear()  # WebTest keeps the cookies, and sends them in the headers
        answer = http.request(
            environ["REQUEST_METHOD"],
            base_url + path + ("?" + query if query else ""),
            headers={**headers, "Accept-Encoding": "identity"},
            data=body,
            allow_redirects=False,
            timeout=60,
        )
        kept = [(k, v) for k, v in answer.raw.headers.items() if k.lower() not in _HOP_BY_HOP]
        start_response(f"{answer.status_code} {answer.reason}", [*kept, ("Content-Length", str(len(answer.content)))])
        return [answer.content]

    return app


def settings_of(config: Config, **extra: Any) -> dict[str, Any]:
    """`config`'s fields as `serve()` overrides (its own base URL and derived key excluded)."""
    skip = ("public_base_url", "storage_signing_key")
    return {**{k: v for k, v in config.__dict__.items() if k not in skip}, **extra}


def concurrently(send: Callable[[], Any], n: int = 20) -> list[Any]:
    """Call `send` from `n` threads released together; each answer, or the exception raised."""
    import requests

    barrier, answers = threading.Barrier(n), []

    def one() -> None:
        barrier.wait(timeout=10)
        try:
            answers.append(send())
        except requests.RequestException as exc:  # the caller's assertions count it
            answers.append(exc)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return answers


def api(slug: str = "clinic-a") -> str:
    return f"/external/v1/clinics/{slug}"


def type_id(ecrf: str, slug: str = "clinic-a") -> str:
    return str(stable_id("request-type", slug, ecrf))


def patient_id(key: str, org: str = "test-org") -> str:
    return str(stable_id("patient", org, key))


def tag_id(kind: str, name: str, slug: str = "clinic-a") -> str:
    return str(stable_id("tag", slug, kind, name))


def signing_organization(sharing: bool = True) -> dict[str, Any]:
    """Clinic A with a signed-consent type (default patient tag, no reservation), clinic B
    beside it; Jana (record in A, external id EXT-1), her merged duplicate, Petr (record
    only in B, external id EXT-2 there)."""
    a = clinic(
        "clinic-a",
        calendars=[{"name": "Doctor"}],
        tags=[
            {"type": "patient", "name": "signed-consent"},
            {"type": "patient", "name": "gone", "deleted": True},
            {"type": "patient_request", "name": "needs-callback"},
        ],
        requestTypes=[
            {
                "ecrfId": "SIGNED_CONSENT",
                "name": "Signed consent",
                "requiresReservation": False,
                "defaultPatientTags": ["signed-consent"],
            },
            {"ecrfId": "RETIRED", "name": "Retired", "active": False},
        ],
    )
    b = clinic(
        "clinic-b",
        tags=[{"type": "patient_request", "name": "b-only"}],
        requestTypes=[{"ecrfId": "SIGNED_CONSENT", "name": "Signed consent B"}],
    )
    return organization(
        a,
        b,
        sharing=sharing,
        patients=[
            {
                "key": "jana",
                "firstName": "Jana",
                "lastName": "Nováková",
                "phone": "+420 601 123 456",
                "email": "jana@example.org",
                "birthDate": "1980-04-12",
                "records": [
                    {
                        "clinic": "clinic-a",
                        "note": "Prefers mornings.",
                        "externalIds": [{"source": "signing-system", "id": "EXT-1"}],
                    }
                ],
            },
            {
                "key": "jana-dup",
                "firstName": "Jana",
                "lastName": "Novakova",
                "mergedInto": "jana",
                "records": [{"clinic": "clinic-a"}],
            },
            {
                "key": "petr",
                "firstName": "Petr",
                "lastName": "Svoboda",
                "phone": "602 987 654",
                "records": [{"clinic": "clinic-b", "externalIds": [{"source": "signing-system", "id": "EXT-2"}]}],
            },
        ],
    )
