"""Serves the local storage backend's presigned URLs: ``/storage/{key:path}``.

Route it only when ``storage_backend`` is ``local``; with S3 the URLs point at the
bucket and the service is not in the data path. Both directions stream, so memory
stays flat whatever the file size: PUT bodies go to disk in 1 MiB pieces, GET
responses are handed to the WSGI server as a file (gunicorn uses ``sendfile``).
"""

from __future__ import annotations

from typing import cast

import falcon

from storage import (
    DOWNLOAD_CACHE_CONTROL,
    AccessDenied,
    Disposition,
    IncompleteUpload,
    InvalidKeyError,
    LocalStorage,
    ObjectTooLarge,
    content_disposition,
)

__all__ = ["StoredObject"]


def _forbidden(reason: str) -> falcon.HTTPForbidden:
    return falcon.HTTPForbidden(title="Forbidden", description=reason, code="FORBIDDEN")


def _invalid_key() -> falcon.HTTPBadRequest:
    return falcon.HTTPBadRequest(title="Bad Request", description="invalid object key", code="VALIDATION_FAILED")


def _not_found() -> falcon.HTTPNotFound:
    return falcon.HTTPNotFound(title="Not Found", description="no such object", code="NOT_FOUND")


class StoredObject:
    """PUT uploads and GET downloads through URLs signed by ``LocalStorage``.

    Every refusal happens before any byte of the body is read or written: a bad,
    foreign or expired signature, or a ``Content-Type`` other than the signed one,
    answers 403 ``FORBIDDEN``. The error text never says which check failed beyond
    "expired" vs "does not match", and never echoes the URL.
    """

    def __init__(self, storage: LocalStorage) -> None:
        if not isinstance(storage, LocalStorage):
            raise TypeError("StoredObject serves the local storage backend only")
        self.storage = storage

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

        length = req.content_length
        stream = req.bounded_stream
        if length is None:
            # A chunked upload: read to its end (the storage stops one byte past its
            # cap), but only where the server marks that end; elsewhere a read of the
            # raw input could block, and S3 needs the length anyway.
            if req.get_header("Transfer-Encoding") is None or not req.env.get("wsgi.input_terminated"):
                raise falcon.HTTPLengthRequired(
                    title="Length Required",
                    description="Content-Length is required",
                    code="VALIDATION_FAILED",
                )
            stream = req.stream
        try:
            self.storage.write_stream(key, stream, length, (req.content_type or "").strip())
        except ObjectTooLarge as exc:
            raise falcon.HTTPContentTooLarge(
                title="Content Too Large", description=str(exc), code="PAYLOAD_TOO_LARGE"
            ) from None
        except IncompleteUpload as exc:
            # The client is normally gone; answer for the logs' sake.
            raise falcon.HTTPBadRequest(
                title="Bad Request", description=str(exc), code="VALIDATION_FAILED"
            ) from None
        except InvalidKeyError:
            raise _invalid_key() from None
        resp.status = falcon.HTTP_200
        resp.content_type = falcon.MEDIA_JSON
        resp.text = '{"data":{"stored":true}}'

    def on_get(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
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
        resp.set_stream(handle, size)
