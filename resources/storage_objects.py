"""Serves the local storage backend's presigned URLs: `/storage/{key:path}`.

Route it only when `storage_backend` is `local`; with S3 the URLs point at the
bucket and the service is not in the data path. Both directions stream, so memory
stays flat whatever the file size: PUT bodies go to disk in 1 MiB pieces, GET
responses are handed to the WSGI server as a file (gunicorn uses `sendfile`).
A PUT body streams without a pooled database connection and within a deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO, cast

import falcon

from config import Config
from plumbing.database import release_connection
from storage import (
    DOWNLOAD_CACHE_CONTROL,
    AccessDenied,
    Disposition,
    IncompleteUpload,
    InvalidKeyError,
    LocalStorage,
    ObjectTooLarge,
    Readable,
    content_disposition,
)
from web.errors import APIError, validation_failed
from web.middleware import Deadline, require_known_end

__all__ = ["StoredObject"]


def _forbidden(reason: str) -> APIError:
    return APIError(403, "FORBIDDEN", reason)


def _invalid_key() -> APIError:
    return validation_failed("invalid object key")


def _not_found() -> APIError:
    return APIError(404, "NOT_FOUND", "no such object")


class StoredObject:
    """PUT uploads and GET downloads through URLs signed by `LocalStorage`.

    Every refusal happens before any byte of the body is read or written: a bad,
    foreign or expired signature, or a `Content-Type` other than the signed one,
    answers 403 `FORBIDDEN`. The error text never says which check failed beyond
    "expired" vs "does not match", and never echoes the URL.
    """

    def __init__(
        self,
        storage: LocalStorage,
        registered: Callable[[str], bool] = lambda key: False,
        *,
        read_seconds: float = Config.upload_read_seconds,
    ) -> None:
        """`registered(key)`: whether an upload is registered as an attachment (the app
        asks its database); a registered upload cannot be written again. `read_seconds`:
        the whole body's deadline; past it, 408 and nothing stored."""
        if not isinstance(storage, LocalStorage):
            raise TypeError("StoredObject serves the local storage backend only")
        self.storage = storage
        self.registered = registered
        self.read_seconds = read_seconds

    def on_put(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        try:
            self.storage.verify_put(
                key,
                expires=req.get_param("expires"),
                signature=req.get_param("signature"),
                content_type=req.content_type,
            )
        except InvalidKeyError:
            raise _invalid_key() from None
        except AccessDenied as exc:
            raise _forbidden(str(exc)) from None
        if self.registered(key):
            # Registered: the record holds a copy, and this URL may not replace what was uploaded.
            raise APIError(409, "ALREADY_REGISTERED", "the upload is registered; it cannot change")
        # The body may take minutes; the pool has a handful of connections for a thousand
        # clients: ten trickled uploads holding theirs left every other request none.
        release_connection()

        length = req.content_length
        stream: Readable = req.bounded_stream
        if length is None:
            # A chunked upload: read to its end (the storage stops one byte past its
            # cap), but only where the server marks that end.
            if req.get_header("Transfer-Encoding") is None:
                raise APIError(411, "LENGTH_REQUIRED", "Send a Content-Length with the body.")
            require_known_end(req)
            stream = req.stream
        try:
            # Past the deadline the read raises 408 (an APIError, passed through here);
            # write_stream removes its partial file on any error.
            self.storage.write_stream(
                key, Deadline(stream, self.read_seconds), length, (req.content_type or "").strip()
            )
        except ObjectTooLarge as exc:
            raise APIError(413, "PAYLOAD_TOO_LARGE", str(exc)) from None
        except IncompleteUpload as exc:
            # The client is normally gone; answer for the logs' sake.
            raise validation_failed(str(exc)) from None
        except InvalidKeyError:
            raise _invalid_key() from None
        resp.status = falcon.HTTP_200
        resp.content_type = falcon.MEDIA_JSON
        resp.text = '{"data":{"stored":true}}'

    def on_get(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        handle, size = self._open_signed(req, resp, key)
        span = _byte_range(req, size)
        if span is None:
            resp.set_stream(handle, size)
            return
        start, end = span
        handle.seek(start)
        resp.status = falcon.HTTP_206
        resp.set_header("Content-Range", f"bytes {start}-{end}/{size}")
        resp.set_stream(_Bounded(handle, end - start + 1), end - start + 1)

    def on_head(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        """The GET answer's headers without its body, for the same signed URL (browsers'
        PDF viewers ask before they fetch ranges)."""
        handle, size = self._open_signed(req, resp, key)
        handle.close()
        resp.content_length = size

    def _open_signed(self, req: falcon.Request, resp: falcon.Response, key: str) -> tuple[BinaryIO, int]:
        content_type = req.get_param("content_type")
        disposition = req.get_param("disposition")
        filename = req.get_param("filename")
        try:
            self.storage.verify_get(
                key,
                expires=req.get_param("expires"),
                signature=req.get_param("signature"),
                content_type=content_type,
                disposition=disposition,
                filename=filename,
            )
        except InvalidKeyError:
            raise _invalid_key() from None
        except AccessDenied as exc:
            raise _forbidden(str(exc)) from None
        # verify_get has checked all three are present and disposition is valid.
        content_type, filename = str(content_type), str(filename)
        disposition_value = cast("Disposition", disposition)

        try:
            handle, size = self.storage.open_for_read(key)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise _not_found() from None
        resp.content_type = content_type
        resp.set_header("Content-Disposition", content_disposition(disposition_value, filename))
        resp.set_header("Cache-Control", DOWNLOAD_CACHE_CONTROL)
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.set_header("Accept-Ranges", "bytes")
        return handle, size


def _byte_range(req: falcon.Request, size: int) -> tuple[int, int] | None:
    """The single byte range asked for, as (first, last) within the object; None for the
    whole object (no Range, or a unit other than bytes, which HTTP says to ignore).
    Falcon parses the header (a malformed one is 400); past the end is 416, as S3 answers."""
    asked = req.range
    if asked is None or req.range_unit != "bytes":
        return None
    first, last = asked
    if first < 0:  # the last -first bytes
        first, last = max(0, size + first), size - 1
    elif last < 0 or last >= size:  # "bytes=500-": to the end
        last = size - 1
    if first >= size or first > last:
        raise APIError(
            416, "RANGE_NOT_SATISFIABLE", f"the object has {size} bytes", headers={"Content-Range": f"bytes */{size}"}
        )
    return first, last


class _Bounded:
    """A file read from its current position for `length` bytes at most (a 206 body)."""

    def __init__(self, handle: BinaryIO, length: int) -> None:
        self._handle, self._left = handle, length

    def read(self, size: int | None = -1, /) -> bytes:
        if self._left <= 0:
            return b""
        data = self._handle.read(self._left if size is None or size < 0 else min(size, self._left))
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._handle.close()
