"""The OpenAPI document's schemas as plain JSON Schema, for tests that read or validate
against them: `inlined` replaces every `$ref` to `#/components/schemas/...` by the
component itself (the document has no recursive schemas), `response_schema` picks an
operation's answer, and `closed` forbids fields the schema does not list (a live answer
then proves the document names every field the server sends)."""

from __future__ import annotations

from typing import Any

import webtest

from web import openapi

_PREFIX = "#/components/schemas/"


def inlined(document: dict[str, Any], node: Any = None) -> Any:
    """`node` (default: the whole document) with every component reference resolved."""
    if node is None:
        node = document
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_PREFIX):
            target = document["components"]["schemas"][ref[len(_PREFIX) :]]
            return inlined(document, {**target, **{k: v for k, v in node.items() if k != "$ref"}})
        return {key: inlined(document, value) for key, value in node.items()}
    if isinstance(node, list):
        return [inlined(document, value) for value in node]
    return node


def response_schema(document: dict[str, Any], path: str, method: str, status: str = "200") -> dict[str, Any]:
    """The JSON body schema of `method path`'s `status` answer, references resolved."""
    answer = document["paths"][path][method]["responses"][status]
    return inlined(document, answer["content"]["application/json"]["schema"])


def closed(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` on every object that lists properties."""
    if isinstance(schema, dict):
        out = {key: closed(value) for key, value in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(value) for value in schema]
    return schema


def documented(app: webtest.TestApp, method: str, path: str) -> dict[str, Any]:
    document = app.get("/openapi.json").json
    return closed(response_schema(document, openapi.public_path(openapi.CLINIC + path), method))
