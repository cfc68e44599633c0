"""Signed documents: patient requests and their attachments, the request catalog, the
patient directory (search and import) and file signatures.

Every write the API offers takes a `remember` callback and calls it with its answer
inside the write's own transaction: the web layer stores that answer for the request's
`Idempotency-Key` there (web/idempotency.py), so a write is never committed without the
answer a retry will be given, nor the answer without the write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Remember = Callable[[Any], None]


def forget(answer: Any) -> None:
    """The `remember` of a write sent without an Idempotency-Key: nothing to store."""
