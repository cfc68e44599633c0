"""Strict JSON parsing of request bodies (RFC 8259, not Python's superset).

`json.loads` accepts `NaN` and `Infinity`, and raises `RecursionError`, not
`ValueError`, on deeply nested input such as 100,000 `[`: Falcon's JSON handler turns
only `ValueError` into a 400, so either would surface as a 500 or as a float no schema
expects. `loads` refuses both as malformed JSON.
"""

from __future__ import annotations

import json
from typing import Any


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str) -> Any:
    """`json.loads`, but every refusal is a `ValueError` (Falcon answers 400)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
