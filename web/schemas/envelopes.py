"""Success bodies and the pages of a search."""

from __future__ import annotations

from typing import Any

from web.schemas.common import NULLABLE_STRING, answer, component


def data(schema: dict[str, Any]) -> dict[str, Any]:
    """A success body: `{"data": schema}`."""
    return answer({"data": schema})


PAGE_INFO = component(
    "PageInfo",
    answer(
        {
            "nextCursor": {
                **NULLABLE_STRING,
                "description": "The next page's `pagination.cursor`; null on the last page.",
            },
        }
    ),
)


def page(item: dict[str, Any]) -> dict[str, Any]:
    """A page of a search: `data` plus the cursor of the next page (null on the last)."""
    return answer({"data": {"type": "array", "items": item}, "pagination": PAGE_INFO})


PAGINATION = component(
    "PageRequest",
    {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "Page size; default 50."},
            "cursor": {
                "type": "string",
                "minLength": 1,
                "maxLength": 300,
                "description": "`pagination.nextCursor` of the previous page.",
            },
        },
    },
)
