"""What the pages say is what the service does, one test for each kind of claim: a field
path a page names is a field of the document's schemas; the order the integrators' page
gives the checks is the order the service runs them in; the 415 rule holds per operation
as the document states it; the recording's reasons on the switchboard page are the
service's; the figures quoted across pages are the measured table's; the guides name who
really resets a password; the design card says what the key commands allow."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from typing import Any

import webtest
from markdown_it import MarkdownIt

from tests.conftest import ROOT
from tests.support import bearer, issue_token, load
from tests.support.documented import inlined
from web import openapi

DOCS = ROOT / "docs"
INTEGRATORS = sorted((DOCS / "integrators").glob("*.md"))
_SEGMENT = re.compile(r"^[a-z][A-Za-z0-9]*$")
# Backquoted dotted words that are no field path: files, hosts, Python's modules and calls.
_NOT_FIELDS = re.compile(r"\.(py|md|json|ts|mp3|wav|pdf|org|net|cz|com|example|sync|asyncio|sync_detailed)\b")


def field_paths(text: str) -> set[str]:
    """The dotted field paths (`pagination.limit`) among the Markdown's code spans."""
    found = set()
    spans = [
        child.content
        for token in MarkdownIt("commonmark").enable("table").parse(text)
        for child in token.children or ()
        if child.type == "code_inline"
    ]
    for quoted in spans:
        token = (quoted.split() or [""])[0].rstrip(":…").split("[")[0]
        parts = token.split(".")
        if len(parts) >= 2 and all(_SEGMENT.match(p) for p in parts) and not _NOT_FIELDS.search(token):
            found.add(token)
    return found


def resolves(schema: Any, parts: list[str]) -> bool:
    if not parts:
        return True
    if not isinstance(schema, dict):
        return False
    for variant in (schema.get("anyOf") or []) + (schema.get("oneOf") or []):
        if resolves(variant, parts):
            return True
    if "items" in schema and resolves(schema["items"], parts):
        return True
    head, *rest = parts
    prop = (schema.get("properties") or {}).get(head)
    return prop is not None and resolves(prop, rest)


def _in_document(document: Any, parts: list[str]) -> bool:
    """A path of the document itself (`info.version`)."""
    for part in parts:
        if not isinstance(document, dict) or part not in document:
            return False
        document = document[part]
    return True


def test_every_field_path_the_integrator_pages_name_is_a_field_of_the_document():
    from web.error_codes import ERROR_CODES

    document = openapi.document()
    components = [inlined(document, s) for s in document["components"]["schemas"].values()]
    texts = [page.read_text("utf-8") for page in INTEGRATORS] + [row.cause for row in ERROR_CODES]
    named = set().union(*(field_paths(text) for text in texts))
    assert {
        "pagination.limit",
        "pagination.cursor",
        "recording.reason",
        "recording.state",
        "filter.externalIds",
    } <= named, sorted(named)
    # A value of an enumeration is named in backquotes too: an event's type (`request.created`).
    values = set(re.findall(r'"enum": \[([^\]]*)\]', json.dumps(document)))
    enumerated = {v for listed in values for v in re.findall(r'"([^"]+)"', listed)}
    unknown = sorted(
        p
        for p in named
        if not any(resolves(c, p.split(".")) for c in components)
        and not _in_document(document, p.split("."))
        and p not in enumerated
    )
    assert not unknown, f"named by the integrator pages, no field of the OpenAPI document: {unknown}"
    assert field_paths("`filter.limit: …`") == {"filter.limit"}
    assert not any(resolves(c, ["filter", "limit"]) for c in components), "the check can fail"


# --- the order of the checks ----------------------------------------------------------------


def documented_order() -> list[set[int]]:
    """The statuses of each step of the integrators' page's numbered list of checks."""
    text = (DOCS / "integrators" / "README.md").read_text("utf-8")
    block = text[text.index("The checks run in this order") :]
    steps = re.findall(r"^  \d+\. (.+?)(?=^  \d+\. |^- |\Z)", block, re.S | re.M)
    return [{int(s) for s in re.findall(r"\b([45]\d\d)\b", step)} for step in steps]


def test_the_documented_order_of_the_checks_is_the_services(app, config, example):
    """Requests that fail two neighbouring steps at once are answered by the earlier one."""
    assert documented_order() == [
        {400},
        {503},
        {413},
        {401},
        {404},
        {403},
        {429},
        {408, 411, 413},
        {400, 409, 422},
        {415, 400},
    ]
    load(example)
    write = issue_token(["demo-clinic"], ["read", "write"])
    read = issue_token(["demo-clinic"], ["read"])
    other = issue_token(["demo-clinic-brno"], ["read", "write"])
    create = "/external/v1/clinics/demo-clinic/patientRequests/create"
    nowhere = "/external/v1/clinics/nowhere/patientRequests/create"
    huge = {"Content-Length": str(config.max_body_bytes + 1), "Content-Type": "application/json"}

    def post(web: webtest.TestApp, path: str, headers: dict[str, str], body: bytes = b"{}") -> int:
        req = webtest.TestRequest.blank(path, method="POST", headers=headers, body=body)
        if "Content-Length" in headers:
            req.environ["CONTENT_LENGTH"] = headers["Content-Length"]
        return web.do_request(req, status="*", expect_errors=True).status_int

    assert post(app, create + "?x=%00", huge) == 400, "1 before 3: a NUL in the URL before the declared length"
    assert post(app, create, huge) == 413, "3 before 4: the declared length before the token"
    assert post(app, nowhere, {}) == 401, "4 before 5"
    assert post(app, nowhere, bearer(other)) == 404, "5 before 6"
    previous = app.app
    from plumbing.database import db

    before = db.obj
    try:
        from app import create_app

        tight = webtest.TestApp(create_app(replace(config, rate_limit_writes_per_minute=1)))
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        assert post(tight, create, {**bearer(write), **form}, b"a=b") == 415, "the one write of the minute"
        assert post(tight, create, {**bearer(read), **form}, b"a=b") == 403, "6 before 7"
        assert post(tight, create, {**bearer(write), "Idempotency-Key": ""}) == 429, "7 before 9"
    finally:
        db.initialize(before)
    assert previous is app.app
    fresh = issue_token(["demo-clinic"], ["read", "write"])  # a budget the tight app did not spend
    assert post(app, create, {**bearer(fresh), "Idempotency-Key": "", "Content-Type": "text/csv"}, b"a") == 400, (
        "9 before 10: the key before the body's type"
    )
    assert (
        post(app, create, {**bearer(fresh), "Idempotency-Key": str(uuid.uuid4()), "Content-Type": "text/csv"}, b"a")
        == 415
    )


def test_the_415_rule_holds_per_operation_as_the_document_says(app, example):
    """Every operation with a body: a form is 415 exactly where the document lists 415."""
    load(example)
    token = issue_token(["demo-clinic"], ["read", "write"])
    document = app.get("/openapi.json").json
    base = "/external/v1/clinics/demo-clinic"
    kind = app.post_json(f"{base}/patientRequestTypes/search", {}, headers=bearer(token)).json["data"][0]["id"]
    patient = app.post_json(f"{base}/patients/search", {"filter": {"inClinic": True}}, headers=bearer(token)).json[
        "data"
    ][0]["id"]
    request_id = app.post_json(
        f"{base}/patientRequests/create", {"patientId": patient, "userECRFId": kind}, headers=bearer(token)
    ).json["data"]["id"]
    tried = 0
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method == "parameters" or "requestBody" not in op or path.startswith("/storage/"):
                continue
            url = path.replace("{clinicSlug}", "demo-clinic").replace("{requestId}", request_id)
            answer = app.request(
                url,
                method=method.upper(),
                body=b"CallSid=CA-415&a=b",
                expect_errors=True,
                headers={**bearer(token), "Content-Type": "application/x-www-form-urlencoded"},
            )
            assert (answer.status_int == 415) == ("415" in op["responses"]), (op["operationId"], answer.status_int)
            tried += 1
    assert tried >= 12


# --- the pages' own words against the service's definitions and figures -----------------------


def test_the_switchboard_page_names_every_reason_a_recording_is_gone():
    from voicemail.recordings import GONE_REASONS

    text = (DOCS / "integrators" / "switchboard.md").read_text("utf-8")
    item = text[text.index("**410 `RECORDING_UNAVAILABLE`**") : text.index("**503 `SERVICE_UNAVAILABLE`**")]
    assert set(re.findall(r"\(`([a-z_]+)`\)", item)) == set(GONE_REASONS)


def test_the_figures_quoted_are_the_measured_tables():
    transcription = (DOCS / "transcription.md").read_text("utf-8")
    rtf = re.search(r"\| time over audio length \(RTF\) \| ([\d.]+) \| ([\d.]+) \|", transcription)
    czech, english = float(rtf.group(1)), float(rtf.group(2))
    operations = (DOCS / "operations.md").read_text("utf-8")
    ranges = re.search(
        r"runs at ([\d.]+) to ([\d.]+) of real time for\s+Czech voicemail on the machines measured, "
        r"and ([\d.]+) to ([\d.]+) for English",
        operations,
    )
    low_cs, high_cs, low_en, high_en = map(float, ranges.groups())
    assert low_cs <= czech <= high_cs and low_en <= english <= high_en, (czech, english, ranges.groups())
    said, right = re.search(r"callback numbers right / wrong \(of (\d+) said\) \| (\d+) / 0", transcription).groups()
    counts = re.findall(r"(\d+) of the (\d+) numbers said are confirmed", transcription)
    assert counts == [(right, said)], counts
    assert not re.search(r"\d+ of \d+ Czech and \d+ of \d+ English numbers", transcription)


def test_the_guides_say_the_clinics_administrator_makes_a_new_password_link():
    staff = DOCS / "staff"
    cs, en = (staff / "receptionist.cs.md").read_text("utf-8"), (staff / "receptionist.en.md").read_text("utf-8")
    assert "Správce kliniky vám v konzoli vytvoří nový odkaz pro nastavení hesla" in cs
    assert "administrator makes you a new set-password link" in en
    for page in staff.glob("*.md"):
        text = page.read_text("utf-8")
        assert not re.search(r"[Hh]eslo obnoví provozovatel|operator resets passwords", text), page.name


def test_the_design_card_says_the_operator_may_make_a_key_that_never_expires():
    from commands import tokens  # noqa: F401  (the command that has the flag)

    assert "--never-expires" in (ROOT / "commands" / "tokens.py").read_text("utf-8")
    design = (DOCS / "design.md").read_text("utf-8")
    assert "--never-expires" in design and "an expiry (at most a year)" not in design


def test_the_key_format_the_integrators_page_gives_matches_every_key_the_service_makes(app):
    """The documented pattern is what a secret scanner will use: it must match every key."""
    text = (DOCS / "integrators" / "README.md").read_text("utf-8")
    pattern = re.search(r"`(\\bcsk_[^`]+)`", text)
    assert pattern is not None, "the page gives the pattern"
    keys = [issue_token([], ["read"]) for _ in range(50)]
    assert all(re.fullmatch(pattern.group(1), key) for key in keys), keys
    assert all(re.search(pattern.group(1), f"leaked: {key}.") for key in keys), "found inside text too"


def test_the_user_agent_the_switchboard_page_names_is_the_services():
    from safe_fetch import USER_AGENT

    text = (DOCS / "integrators" / "switchboard.md").read_text("utf-8")
    assert f"`User-Agent: {USER_AGENT}`" in text


def test_the_switchboard_page_gives_the_bounds_the_service_keeps_and_timeouts_above_them():
    """The bounds are what the deadlines allow (config.py refuses a routing deadline that
    would not fit in the check's bound) and what tests/test_routing_deadlines.py holds the
    real processes to through each fault; each timeout advised is above its bound."""
    from config import Config
    from tests import test_routing_deadlines

    text = (DOCS / "integrators" / "switchboard.md").read_text("utf-8")
    row = re.compile(r"^\| (`[^|]+`) \| \*\*([\d.]+) s\*\* \|[^|]+\| ([\d.]+) s \|$", re.M)
    rows = {name: (float(bound), float(timeout)) for name, bound, timeout in row.findall(text)}
    checks = rows["`is-clinic-opened`, `is-on-vacation`"], rows["`has-active-request`"]
    handoff = rows["`recording-complete`"]
    assert {bound for bound, _ in checks} == {test_routing_deadlines.CHECK_BOUND}
    assert handoff[0] == test_routing_deadlines.HANDOFF_BOUND
    assert Config.routing_deadline_seconds < test_routing_deadlines.CHECK_BOUND
    assert Config.handoff_deadline_seconds < test_routing_deadlines.HANDOFF_BOUND
    assert all(timeout > bound for bound, timeout in (*checks, handoff)), rows
    assert "**2 seconds**" in text and "give it 10 seconds" in text and handoff[1] == 10
