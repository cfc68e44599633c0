"""Request bodies: read the JSON body and check it against its schema (`web/schemas/`)
with the service's one validator (`plumbing/json_schema.py`); a refusal is
`errors.Invalid`, answered 400 VALIDATION_FAILED naming the field."""

from __future__ import annotations

from typing import Any

import falcon

from plumbing.errors import Invalid
from plumbing.json_schema import check


def body(req: falcon.Request, schema: dict[str, Any], *, optional: bool = False) -> dict[str, Any]:
    """The request's JSON body, validated against `schema`.

    `optional` bodies may be absent (treated as `{}`).
    """
    media = req.get_media(default_when_empty={} if optional else None)
    if media is None:
        raise Invalid("body: a JSON object is required")
    if not isinstance(media, dict):
        raise Invalid("body: must be a JSON object")
    check(media, schema)
    return media
