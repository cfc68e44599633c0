"""What a stored attachment's first bytes say it is, against the type it is registered as.

Signed documents are evidence: an HTML page registered as `application/pdf` would be
served to a doctor as a PDF. The five types the API accepts (`schemas.ALLOWED_CONTENT_TYPES`)
each start with a fixed signature (their specifications' "magic numbers"); a PDF may
carry up to 1 KiB of bytes before `%PDF-`, as PDF readers allow.
"""

from __future__ import annotations

import re

PREFIX_BYTES = 1024

_SIGNATURES: dict[str, re.Pattern[bytes]] = {
    "application/pdf": re.compile(rb"%PDF-", re.DOTALL),  # anywhere in the first KiB
    "image/jpeg": re.compile(rb"\A\xff\xd8\xff"),
    "image/png": re.compile(rb"\A\x89PNG\r\n\x1a\n"),
    "image/gif": re.compile(rb"\AGIF8[79]a"),
    "image/webp": re.compile(rb"\ARIFF....WEBP", re.DOTALL),
}


def matches(content_type: str, prefix: bytes) -> bool:
    """Whether `prefix` (the object's first `PREFIX_BYTES`) starts like `content_type`.
    An unknown type matches nothing."""
    signature = _SIGNATURES.get(content_type)
    return bool(signature and signature.search(prefix[:PREFIX_BYTES]))
