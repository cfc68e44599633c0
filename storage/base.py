"""The storage interface and what both backends share: errors, `ObjectInfo`, the
`Storage` protocol, object-key and file-name helpers, and the argument checks.

Object keys are validated strictly (`validate_key`) before they reach a file
system path or a bucket, and every URL is bound to one method, one key, an expiry
and a content type (plus disposition and file name for downloads).

Its public names are re-exported by the package (`storage.__all__`).
"""

from __future__ import annotations

import dataclasses
import mimetypes
import re
import secrets
import unicodedata
import urllib.parse
import uuid
from typing import BinaryIO, Literal, Protocol, runtime_checkable

Disposition = Literal["inline", "attachment"]

#: Longest lifetime a presigned URL may have; SigV4 allows no more than 7 days either.
MAX_EXPIRES_IN = 7 * 24 * 3600
#: Headers both backends ask for on downloads: medical documents must not linger in
#: shared caches, and browsers must not sniff an uploaded file into HTML.
DOWNLOAD_CACHE_CONTROL = "private, no-store"

_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
# Every segment starts with an alphanumeric character, so "." and ".." cannot occur
# and no key can name the hidden names the local backend uses for itself
# (".meta/", ".upload-*.part").
_KEY_RE = re.compile(rf"{_SEGMENT}(?:/{_SEGMENT}){{0,15}}")
_MAX_KEY_LENGTH = 512
#: The same rule for the OpenAPI document (`/storage/{key}`), so clients can tell a bad key.
KEY_SCHEMA = {"type": "string", "pattern": f"^{_KEY_RE.pattern}$", "maxLength": _MAX_KEY_LENGTH}
_MAX_FILENAME_LENGTH = 255
_EXTENSION_RE = re.compile(r"\.[a-z0-9]{1,10}")
_PREFERRED_EXTENSIONS = {
    "application/pdf": ".pdf",
    "image/jpeg": ".jpg",
    "image/png": ".png",
    "image/gif": ".gif",
    "image/webp": ".webp",
}


class Readable(Protocol):
    """What `LocalStorage.write_stream` reads from (a file, `req.bounded_stream`)."""

    def read(self, size: int = -1, /) -> bytes: ...


# --------------------------------------------------------------------------- errors


class StorageError(Exception):
    """Base class of the errors this module raises on purpose."""


class InvalidKeyError(StorageError, ValueError):
    """The object key does not match the allowed pattern."""


class AccessDenied(StorageError):
    """A presigned URL was missing, tampered with, expired or used differently than signed,
    or would write a sealed object (`check_writable_key`)."""


class ObjectTooLarge(StorageError):
    """The upload exceeds the configured size cap."""


class ObjectNotFound(StorageError, LookupError):
    """No object under that key."""


class IncompleteUpload(StorageError):
    """The body ended before its announced length (client went away): nothing was stored."""


# ---------------------------------------------------------------- the shared interface


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What `head` reports about a stored object."""

    size: int
    content_type: str


@runtime_checkable
class Storage(Protocol):
    """Operations the service needs from object storage, whatever the backend."""

    #: Largest upload accepted (`Config.upload_max_bytes`). The local backend refuses a
    #: larger PUT itself; a presigned S3 PUT cannot carry a size limit, so registration
    #: checks the stored object against it (documents.attachments).
    max_upload_bytes: int

    def presign_put(self, key: str, content_type: str, expires_in: int) -> str:
        """URL accepting `PUT` of the object's bytes with exactly this `Content-Type`.

        The URL may be used any number of times until it expires; each use replaces
        the object. `AccessDenied` for a sealed key (`check_writable_key`).
        """
        ...

    def presign_get(
        self,
        key: str,
        expires_in: int,
        *,
        content_type: str,
        disposition: Disposition,
        filename: str,
    ) -> str:
        """URL serving the object with this content type and `Content-Disposition`."""
        ...

    def exists(self, key: str) -> bool: ...

    def read_prefix(self, key: str, size: int) -> bytes:
        """The object's first `size` bytes (fewer when it is shorter; b"" when missing)."""
        ...

    def open_for_read(self, key: str) -> tuple[BinaryIO, int]:
        """The object's bytes as a stream (the caller closes it) and its size;
        `FileNotFoundError` when missing."""
        ...

    def seal(self, source: str, target: str) -> Sealed:
        """Copy object `source` to `target` (a key no upload URL names, so nothing can
        write it afterwards) and return the SHA-256 and size of the bytes `target` holds.
        `ObjectNotFound` when `source` is missing."""
        ...

    def head(self, key: str) -> ObjectInfo | None:
        """Size and stored content type, or `None` when there is no such object."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""
        ...

    def prepare(self) -> None:
        """Create what the backend needs (directory or bucket); idempotent."""
        ...


# ------------------------------------------------------------------------- helpers


def validate_key(key: str) -> str:
    """Return `key` unchanged if it is an acceptable object key, else raise.

    Accepted: 1-16 `/`-separated segments of `[A-Za-z0-9._-]`, each starting with
    a letter or digit, at most 512 characters in all. No leading `/`, no empty,
    `.` or `..` segment, no percent-encoding, no backslash.
    """
    if not isinstance(key, str) or len(key) > _MAX_KEY_LENGTH or not _KEY_RE.fullmatch(key):
        raise InvalidKeyError("invalid object key")
    return key


#: Where `sealed_key` puts registered copies. No URL may ever write under it: a signature
#: is no protection once the signing key is known (a weak SECRET_KEY), so the backends
#: refuse by key, before and whatever the signature (`check_writable_key`).
SEALED_PREFIX = "registered/"


def check_writable_key(key: str) -> str:
    """`validate_key`, and `AccessDenied` for a sealed key: a PUT URL is neither issued nor
    honoured for one, so a registered copy changes through no URL, forged or not."""
    validate_key(key)
    if key.startswith(SEALED_PREFIX):
        raise AccessDenied("sealed object: it cannot be written")
    return key


@dataclasses.dataclass(frozen=True, slots=True)
class Sealed:
    """What `Storage.seal` stored: the digest and size of exactly those bytes."""

    sha256: str
    size: int


def sealed_key(upload_key: str) -> str:
    """A fresh key for the registered copy of an upload: `registered/…`, a prefix no
    upload link is ever issued for (`new_object_key` only makes `requests/…`)."""
    head, _, name = upload_key.rpartition("/")
    _stem, dot, ext = name.rpartition(".")
    return validate_key(f"{SEALED_PREFIX}{head.split('/', 1)[-1]}/{secrets.token_hex(16)}{dot}{ext if dot else ''}")


def new_object_key(request_id: uuid.UUID | str, content_type: str) -> str:
    """A fresh, unguessable key `requests/<request-uuid>/<32 hex>.<ext>`.

    The suffix follows the content type, as the upload-link's `fileHash` does.
    """
    rid = uuid.UUID(str(request_id))
    base = content_type.split(";", 1)[0].strip().lower()
    ext = _PREFERRED_EXTENSIONS.get(base) or mimetypes.guess_extension(base) or ".bin"
    if not _EXTENSION_RE.fullmatch(ext):
        ext = ".bin"
    return validate_key(f"requests/{rid}/{secrets.token_hex(16)}{ext}")


def ascii_filename(filename: str) -> str:
    """ASCII-only, quote-free fallback file name for `filename="..."`.

    Diacritics are dropped and whitespace becomes `_`; anything else outside
    `[A-Za-z0-9._-]` is removed. Never empty.
    """
    decomposed = unicodedata.normalize("NFKD", filename)
    ascii_only = decomposed.encode("ascii", "ignore").decode("ascii")
    ascii_only = re.sub(r"\s+", "_", ascii_only.strip())
    ascii_only = re.sub(r"[^A-Za-z0-9._-]", "", ascii_only).lstrip(".")
    return ascii_only[:_MAX_FILENAME_LENGTH] or "file"


def content_disposition(disposition: Disposition, filename: str) -> str:
    """`Content-Disposition` value with an ASCII `filename` and RFC 5987 `filename*`."""
    if disposition not in ("inline", "attachment"):
        raise ValueError("disposition must be 'inline' or 'attachment'")
    encoded = urllib.parse.quote(filename, safe="")
    return f"{disposition}; filename=\"{ascii_filename(filename)}\"; filename*=UTF-8''{encoded}"


def _check_expires_in(expires_in: int) -> int:
    if isinstance(expires_in, bool) or not isinstance(expires_in, int):
        raise TypeError("expires_in must be an int (seconds)")
    if not 1 <= expires_in <= MAX_EXPIRES_IN:
        raise ValueError(f"expires_in must be between 1 and {MAX_EXPIRES_IN} seconds")
    return expires_in


def _check_get_params(content_type: str, disposition: str, filename: str) -> None:
    if not content_type or any(c in content_type for c in "\r\n"):
        raise ValueError("content_type must be a non-empty header value")
    if disposition not in ("inline", "attachment"):
        raise ValueError("disposition must be 'inline' or 'attachment'")
    if not filename or len(filename) > _MAX_FILENAME_LENGTH:
        raise ValueError(f"filename must have 1 to {_MAX_FILENAME_LENGTH} characters")
