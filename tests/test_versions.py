"""Versions and deprecations (CHANGELOG.md, "Versions and deprecation"): the versions are
set once (plumbing/versions.py) and are what the changelog's last release and the OpenAPI
document say; a change of the API's surface that a client can see is named in the
changelog; an operation going away says so on every answer (Deprecation, Sunset) and in the
document, with the notice the policy promises."""

from __future__ import annotations

import json
import os
import re
from datetime import date
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
import webtest

from plumbing import versions
from tests.conftest import ROOT
from tests.support import bearer, issue_token, load
from web import deprecations, openapi

CHANGELOG = ROOT / "CHANGELOG.md"
SURFACE = ROOT / "docs" / "api-surface.txt"
SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
# What a client can see of a schema; descriptions and examples are words.
_SIGNATURE = (
    "type",
    "format",
    "$ref",
    "const",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "pattern",
    "maxItems",
    "minItems",
)


def releases() -> list[tuple[str, str, str]]:
    """(version, date, text) of each release of the changelog, newest first; "Unreleased" too."""
    text = CHANGELOG.read_text("utf-8")
    heads = list(re.finditer(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M))
    return [
        (m.group(1), m.group(2) or "", text[m.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)])
        for i, m in enumerate(heads)
    ]


def surface(document: dict[str, Any]) -> list[str]:
    """What a client can see of the document, one fact a line: operations, their
    parameters, bodies and statuses, every field of every schema (required or not, its
    type), every value of every enumeration."""
    lines: list[str] = []
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            name = op["operationId"]
            lines.append(f"operation {name} {method.upper()} {path}")
            if op.get("deprecated"):
                lines.append(f"deprecated {name}")
            for parameter in [*item.get("parameters", []), *op.get("parameters", [])]:
                lines.append(
                    f"parameter {name} {parameter['in']} {parameter['name']} "
                    f"{'required' if parameter.get('required') else 'optional'}"
                )
            if "requestBody" in op:
                lines.append(f"request {name} {'required' if op['requestBody'].get('required') else 'optional'}")
            lines += [f"answer {name} {status}" for status in op["responses"]]
    for component, schema in document["components"]["schemas"].items():
        _schema_lines(schema, component, lines)
    return sorted(set(lines))


def _signature(schema: dict[str, Any]) -> str:
    shown = {k: schema[k] for k in _SIGNATURE if k in schema}
    for combined in ("anyOf", "oneOf"):
        if combined in schema:
            shown[combined] = [_signature(variant) for variant in schema[combined]]
    return json.dumps(shown, sort_keys=True, separators=(",", ":"))


def _schema_lines(schema: Any, where: str, lines: list[str]) -> None:
    if not isinstance(schema, dict):
        return
    for value in schema.get("enum", []):
        lines.append(f"value {where} {value}")
    required = set(schema.get("required", []))
    for name, field in (schema.get("properties") or {}).items():
        lines.append(f"field {where}.{name} {'required' if name in required else 'optional'} {_signature(field)}")
        _schema_lines(field, f"{where}.{name}", lines)
    if "items" in schema:
        _schema_lines(schema["items"], f"{where}[]", lines)
    for combined in ("anyOf", "oneOf"):
        for variant in schema.get(combined, []):
            _schema_lines(variant, where, lines)


def named(line: str) -> str:
    """The word a changelog entry names the fact of `line` by: the operation, the
    parameter, the field, the value."""
    kind, *rest = line.split(" ")
    if kind == "field":
        return re.split(r"[.\[\]]+", rest[0].rstrip("[]"))[-1]
    if kind == "value":
        return " ".join(rest[1:])
    if kind == "parameter":
        return rest[2]
    return rest[0]


def test_the_versions_are_semantic_and_the_last_release_names_them():
    assert SEMVER.match(versions.SERVICE) and SEMVER.match(versions.API)
    (head, _, _), *released = releases()
    assert head == "Unreleased"
    version, day, text = released[0]
    assert version == versions.SERVICE and date.fromisoformat(day)
    assert f"API {versions.API}" in text.split("\n\n")[1], "the release names the API's version"
    assert openapi.document()["info"]["version"] == versions.API
    assert json.loads((ROOT / "docs" / "openapi.json").read_text("utf-8"))["info"]["version"] == versions.API
    assert versions.API.split(".")[0] == "1" and "/external/v1/" in json.dumps(openapi.document()["paths"])


def test_each_release_has_the_four_headings_integrator_changes_first():
    for version, day, text in releases()[1:]:
        date.fromisoformat(day)
        headings = re.findall(r"^### (.+)$", text, re.M)
        assert headings == ["Added", "Changed", "Deprecated", "Fixed"], (version, headings)
        for section in re.split(r"^### .+$", text, flags=re.M)[1:]:
            entries = re.findall(r"^- (.*)$", section, re.M)
            marks = [entry.startswith("**API**") for entry in entries]
            assert marks == sorted(marks, reverse=True), f"{version}: the API's entries come first"
    policy = CHANGELOG.read_text("utf-8").split("## [Unreleased]")[0]
    assert "`Deprecation`" in policy and "`Sunset`" in policy
    assert f"**{deprecations.MIN_NOTICE.days} days**" in policy


def test_a_change_a_client_can_see_is_named_in_the_changelog():
    document = json.loads((ROOT / "docs" / "openapi.json").read_text("utf-8"))
    current = surface(document)
    header = f"# The API's surface at its release {versions.API} (tests/test_versions.py; DOCS_RELEASE=1 records it)"
    if os.environ.get("DOCS_RELEASE") == "1":
        SURFACE.write_text("\n".join([header, *current]) + "\n", "utf-8")
    recorded = SURFACE.read_text("utf-8").splitlines()
    assert recorded[0].startswith("# The API's surface at its release ")
    released = recorded[1:]
    unreleased = releases()[0][2]
    changed = sorted(set(current) ^ set(released))
    unnamed = [line for line in changed if f"`{named(line)}`" not in unreleased]
    assert not unnamed, (
        "changed since the last release and not named in CHANGELOG.md's Unreleased section:\n" + "\n".join(unnamed)
    )
    if not changed:
        assert recorded[0] == header, "the surface of the last release is the API version's"


def test_the_surface_sees_what_a_client_sees():
    document = openapi.document()
    before = surface(document)
    changed = json.loads(json.dumps(document))
    changed["components"]["schemas"]["RecordingUnavailable"]["properties"]["reason"]["enum"].append("lost")
    changed["components"]["schemas"]["Call"]["required"].remove("extra")
    changed["components"]["schemas"]["Call"]["properties"]["callTo"]["description"] = "words only"
    diff = sorted(set(surface(changed)) ^ set(before))
    assert [named(line) for line in diff] == ["extra", "extra", "lost"], diff


# --- Deprecation and Sunset ------------------------------------------------------------------


def test_a_sunset_without_the_promised_notice_is_refused():
    with pytest.raises(ValueError):
        deprecations.Deprecation("POST", "/x", date(2027, 1, 1), date(2027, 3, 1), "https://example.org")


def test_a_deprecated_operation_says_so_on_every_answer_and_in_the_document(config, app, example, monkeypatch):
    from dataclasses import replace

    from app import create_app
    from plumbing.database import db

    going = deprecations.Deprecation(
        "POST",
        openapi.SWITCHBOARD + "/is-on-vacation",
        date(2026, 11, 28),
        date(2027, 6, 1),
        "https://clinic.example.org/changelog#deprecated",
    )
    monkeypatch.setattr(deprecations, "DEPRECATED", (going,))
    before = db.obj
    try:
        web = webtest.TestApp(create_app(replace(config)))
        load(example)
        token = issue_token(["demo-clinic"], ["read"])
        url = "/external/v1/clinics/demo-clinic/switchboard"
        for answer in (
            web.post_json(f"{url}/is-on-vacation", {}, headers=bearer(token)),
            web.post_json(f"{url}/is-on-vacation", {}, status=401),
        ):
            assert answer.headers["Deprecation"] == "@1795824000"  # 2026-11-28T00:00:00Z
            assert parsedate_to_datetime(answer.headers["Sunset"]).date() == date(2027, 6, 1)
            assert (
                answer.headers["Link"] == '<https://clinic.example.org/changelog#deprecated>; rel="deprecation"; '
                'type="text/markdown"'
            )
        other = web.post_json(f"{url}/is-clinic-opened", {}, headers=bearer(token))
        assert "Deprecation" not in other.headers and "Sunset" not in other.headers
        op = web.get("/openapi.json").json["paths"]["/external/v1/clinics/{clinicSlug}/switchboard/is-on-vacation"]
        assert op["post"]["deprecated"] is True and "2027-06-01" in op["post"]["description"]
        assert {"Deprecation", "Sunset"} <= set(op["post"]["responses"]["200"]["headers"])
    finally:
        db.initialize(before)
    assert (
        "Deprecation"
        not in app.post_json(
            "/external/v1/clinics/demo-clinic/switchboard/is-on-vacation",
            {},
            headers=bearer(issue_token(["demo-clinic"], ["read"])),
        ).headers
    )
