"""The OpenAPI document as the judge of every answer the suite provokes (a pytest plugin).

Every answer of the API that a test gets through WebTest (every `webtest.TestApp`, the
`app` fixture's and those tests build themselves) is checked against the document the
service serves, as a strict generated client would read it: its status is one the
operation documents; its JSON body is valid against the documented schema with every
object closed (a field the document does not name is an error: the client would drop it
or refuse it), formats included (a `uuid` that is none, a `date-time` that is none); an
error's `code` is one of web/error_codes.py's, with its status, and one the operation's
answer lists. A path of the API that no operation has may only be 404 or 405. An answer
that breaks one of these fails the test that provoked it, at that request.

`Contract` is the checker; tests/test_contract.py drives every code and reason on purpose.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest

#: Where the API is; everything else (the console, /docs) is not the contract's.
API_PREFIXES = ("/external/", "/storage/", "/openapi.json", "/healthz", "/metrics")
#: "Codes: " and the codes, each a link to its row of the error table ([`CODE`](/docs/errors#...)).
_CODES = re.compile(r"Codes: ((?:\[`[A-Z_]+`\]\([^)\s]+\)(?:, )?)+)\.")


class Contract:
    """The document's operations and answers, compiled once."""

    def __init__(self, document: dict[str, Any]) -> None:
        from tests.support.documented import closed, inlined

        self.document = document
        self._inlined, self._closed = inlined, closed
        self._routes = []
        for path in document["paths"]:
            pattern = re.sub(r"\\\{key\\\}", "(?:.+)", re.escape(path))
            pattern = re.sub(r"\\\{[A-Za-z]+\\\}", "[^/]+", pattern)
            self._routes.append((re.compile(f"^{pattern}$"), path))
        self._validators: dict[tuple[str, str, str], Any] = {}

    def route(self, path: str) -> str | None:
        """The document's path template of a request path."""
        return next((template for pattern, template in self._routes if pattern.match(path)), None)

    def listed_codes(self, answer: dict[str, Any]) -> set[str]:
        found = _CODES.search(answer.get("description", ""))
        return set(re.findall(r"`([A-Z_]+)`", found.group(1))) if found else set()

    def _validator(self, template: str, method: str, status: str) -> Any:
        key = (template, method, status)
        if key not in self._validators:
            from jsonschema import Draft202012Validator, FormatChecker

            content = self.document["paths"][template][method]["responses"][status].get("content") or {}
            schema = (content.get("application/json") or {}).get("schema")
            self._validators[key] = (
                None
                if schema is None
                else Draft202012Validator(
                    self._closed(self._inlined(self.document, schema)), format_checker=FormatChecker()
                )
            )
        return self._validators[key]

    def _error_schema(self) -> Any:
        from jsonschema import Draft202012Validator

        schema = self._closed(self._inlined(self.document, {"$ref": "#/components/schemas/Error"}))
        return Draft202012Validator(schema)

    def problems(self, method: str, path: str, status: int, content_type: str, body: bytes) -> list[str]:
        """What is wrong with this answer, by the document (empty: nothing)."""
        from web.error_codes import BY_CODE

        method = method.lower()
        where = f"{method.upper()} {path} {status}"
        data: Any = None
        is_json = content_type.split(";")[0].strip() == "application/json"
        if is_json and body and method != "head":
            try:
                data = json.loads(body)
            except ValueError:
                return [f"{where}: a JSON Content-Type over a body that is not JSON"]
        out: list[str] = []
        if status >= 400 and method != "head":
            code = data.get("code") if isinstance(data, dict) else None
            row = BY_CODE.get(code) if isinstance(code, str) else None
            if row is None:
                out.append(f"{where}: error code {code!r} is not in web/error_codes.py")
            elif row.status not in (None, status):
                out.append(f"{where}: {code} comes with {row.status} in web/error_codes.py")
        template = self.route(path)
        item = self.document["paths"].get(template) if template else None
        op = (item or {}).get(method)
        if op is None:  # no such operation: only "no such path" or "no such method"
            if status not in (404, 405) or not is_json:
                out.append(f"{where}: no operation answers this, yet it was not a JSON 404 or 405")
            elif data is not None:
                out += [f"{where}: {e.message}" for e in self._error_schema().iter_errors(data)]
            return out
        answer = op["responses"].get(str(status))
        if answer is None:
            return [*out, f"{where}: status {status} is not documented for {op['operationId']}"]
        if status >= 400 and isinstance(data, dict) and data.get("code") not in self.listed_codes(answer):
            out.append(f"{where}: {op['operationId']} does not list {data.get('code')!r} among its {status} codes")
        if method == "head" or status in (204, 302, 304):
            return out
        documented = set(answer.get("content") or {})
        if "application/json" in documented:
            if not is_json:
                return [*out, f"{where}: {content_type!r} answered, JSON documented"]
            validator = self._validator(template, method, str(status))
            out += [f"{where}: {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]
        return out


@cache
def contract() -> Contract:
    from web import openapi

    return Contract(openapi.document())


def check(req: Any, res: Any) -> None:
    """Fail unless WebTest's answer `res` to `req` is one the document describes."""
    # The WSGI path as sent (bytes as latin-1): a test may send bytes that are no UTF-8.
    raw = req.environ.get("SCRIPT_NAME", "") + req.environ.get("PATH_INFO", "")
    path = raw.encode("latin-1", "replace").decode("utf-8", "replace")
    if not path.startswith(API_PREFIXES):
        return
    found = contract().problems(req.method, path, res.status_int, res.content_type or "", res.body)
    if found:
        raise AssertionError(
            "an answer the OpenAPI document does not describe:\n" + "\n".join(found) + f"\nbody: {res.body[:500]!r}"
        )


def pytest_configure(config: pytest.Config) -> None:
    import webtest

    original = webtest.TestApp.do_request
    if getattr(original, "__contract__", False):
        return

    def do_request(self: Any, req: Any, status: Any = None, expect_errors: Any = None) -> Any:
        res = original(self, req, status=status, expect_errors=expect_errors)
        check(req, res)
        return res

    do_request.__contract__ = True  # type: ignore[attr-defined]
    webtest.TestApp.do_request = do_request
