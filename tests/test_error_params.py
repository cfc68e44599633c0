"""An error names its field: a 400 about one field carries `param`, the field's JSON
Pointer (RFC 6901) into the request body, beside `code`; a query parameter is `?` and its
name; a bulk import's item names the field inside the item. A refusal about the whole body
carries none. Every 400 the API can give (tests/support/provoke.py) whose message names a
field carries the pointer of that field, so `param` and the message cannot disagree.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import webtest

from plumbing.json_schema import pointer
from tests.support import bearer, issue_token, load
from tests.support.provoke import BASE, SB, SLUG, _ids, every_answer


@pytest.fixture
def tokens(example) -> dict[str, str]:
    load(example)
    return {"read": issue_token([SLUG], ["read"]), "rw": issue_token([SLUG], ["read", "write"])}


def refused(app: webtest.TestApp, method: str, path: str, body: Any, token: str) -> dict[str, Any]:
    answer = app.request(
        path,
        method=method,
        body=None if body is None else webtest.app.json.dumps(body).encode(),
        headers={**bearer(token), "Content-Type": "application/json"},
        expect_errors=True,
    )
    assert answer.status_int == 400 and answer.json["code"] == "VALIDATION_FAILED", answer.body
    return answer.json


def test_a_schema_refusal_names_its_field_as_a_pointer(app, tokens):
    read, rw = tokens["read"], tokens["rw"]
    assert refused(app, "POST", f"{BASE}/patients/search", {"pagination": {"limit": 0}}, read)["param"] == (
        "/pagination/limit"
    )
    missing = refused(app, "POST", f"{BASE}/patients/import", {"externalIdSource": "x", "firstName": "A"}, rw)
    assert missing["param"] == "/externalId" and missing["error"].startswith("externalId: ")
    typed = refused(
        app,
        "POST",
        f"{BASE}/patientRequests/create",
        {"patientId": _ids()["jana"], "userECRFId": _ids()["type"], "userNote": 5},
        rw,
    )
    assert typed["param"] == "/userNote"
    # "At least one of": the first of the fields that would do.
    assert refused(app, "POST", f"{SB}/has-active-request", {}, read)["param"] == "/callFrom"


def test_the_services_own_checks_name_their_fields(app, tokens):
    rw = tokens["rw"]
    assert refused(app, "POST", f"{SB}/recording-complete", {"CallFrom": "+420601123456"}, rw)["param"] == "/CallSid"
    assert (
        refused(app, "POST", f"{SB}/recording-complete", {"CallSid": "CA-1", "RecordingUrl": 5}, rw)["param"]
        == "/RecordingUrl"
    )
    imported = {"externalId": "E-1", "externalIdSource": "x", "firstName": "A", "lastName": "B", "phone": "nope"}
    assert refused(app, "POST", f"{BASE}/patients/import", imported, rw)["param"] == "/phone"
    create = {"patientId": _ids()["jana"], "userECRFId": _ids()["type"]}
    made = app.post_json(f"{BASE}/patientRequests/create", create, headers=bearer(rw)).json["data"]
    assert (
        refused(app, "PATCH", f"{BASE}/patientRequests/{made['id']}", {"addTagIds": [_ids()["jana"]]}, rw)["param"]
        == "/addTagIds"
    )
    assert refused(app, "POST", f"{BASE}/patientRequests/search", {"pagination": {"cursor": "?"}}, rw)["param"] == (
        "/pagination/cursor"
    )
    assert refused(app, "GET", f"{BASE}/tags?type=nonsense", None, rw)["param"] == "?type"


def test_a_bulk_items_error_names_the_field_inside_the_item(app, tokens):
    bulk = {"patients": [{"externalId": "E-1", "externalIdSource": "x", "firstName": "A"}]}
    [item] = app.post_json(f"{BASE}/patients/import-bulk", bulk, headers=bearer(tokens["rw"])).json["data"]
    assert item["status"] == "failed" and item["error"]["param"] == "/lastName", item


def test_a_refusal_of_the_whole_body_names_no_field(app, tokens):
    answer = refused(app, "POST", f"{SB}/has-active-request", [], tokens["read"])
    assert "param" not in answer, answer


def test_json_pointers_escape_as_rfc_6901_says():
    assert pointer(["patients", 3, "phone"]) == "/patients/3/phone"
    assert pointer(["a/b", "m~n"]) == "/a~1b/m~0n"
    assert pointer([]) == ""


_FIELD = re.compile(r"^([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*|\[\d+\])*): ")


def as_pointer(path: str) -> str:
    return pointer(int(p) if p.isdigit() else p for p in re.split(r"\.|\[|\]\.?", path.rstrip("]")) if p != "")


def test_every_400_whose_message_names_a_field_carries_that_fields_param(app, config, clock, example):
    seen = 0
    for answer in every_answer(app, config, clock, example):
        data = answer.data
        if answer.status != 400 or not isinstance(data, dict) or data.get("code") != "VALIDATION_FAILED":
            continue
        one_of = re.match(r"^body: (\w+) or \w+ is required$", data["error"])
        if one_of:  # "at least one of": the first of them
            assert data.get("param") == "/" + one_of.group(1), data
            continue
        named = _FIELD.match(data["error"])
        if named is None or named.group(1) == "body":
            assert "param" not in data, data
            continue
        seen += 1
        # The GET routes' fields are query parameters (`?type`); the others' are in the body.
        query = answer.method == "GET" and answer.path.endswith(("/tags", "/events"))
        expected = "?" + named.group(1) if query else as_pointer(named.group(1))
        assert data.get("param") == expected, (answer.method, answer.path, data)
    assert seen >= 2


# --- each code links to its row ---------------------------------------------------------------


def test_every_code_has_a_row_with_its_anchor_and_the_openapi_links_each_code_to_it(app):
    """The served error table has a row (an anchor) for every code of web/error_codes.py (the
    codes the service raises, held to it by tests/test_docs.py), the integrators' table the
    same anchors, and every code the OpenAPI document names in an error answer is a link to
    its row: none named without one, none to a row that is not there."""
    import re

    from bs4 import BeautifulSoup

    from tests.conftest import ROOT
    from web.error_codes import ERROR_CODES, TABLE_PATH, anchor

    page = app.get(TABLE_PATH)
    assert page.content_type == "text/html"
    rows = {tr["id"]: tr for tr in BeautifulSoup(page.text, "html.parser").select("tr[id]")}
    assert set(rows) == {anchor(row.code) for row in ERROR_CODES}
    assert all(row.code in rows[anchor(row.code)].text for row in ERROR_CODES)
    readme = (ROOT / "docs" / "integrators" / "README.md").read_text("utf-8")
    assert set(re.findall(r'<a id="(error-[a-z0-9-]+)"></a>', readme)) == set(rows)
    document = app.get("/openapi.json").json
    linked, bare = set(), []
    for item in document["paths"].values():
        for method, op in item.items():
            if method == "parameters":
                continue
            for status, answer in op["responses"].items():
                said = answer.get("description", "")
                if not status.startswith(("4", "5")) or "Codes: " not in said:
                    continue
                codes = said.split("Codes: ", 1)[1]
                linked |= set(re.findall(r"\]\(/docs/errors#([a-z0-9-]+)\)", codes))
                bare += [c for c in re.findall(r"`([A-Z_]+)`(?!\])", codes)]
    assert not bare, f"codes without a link to their row: {bare[:5]}"
    assert len(linked) >= 20 and linked <= set(rows), sorted(linked - set(rows))
