"""Object storage behind one interface: a local directory or an S3-compatible bucket.

Both backends hand out *presigned URLs*: the integrator PUTs the raw file to one
(step 5 of the signed-documents flow) and clinic users open or download it through
another (`url` / `downloadUrl` of a medical record). The service itself never
proxies S3 traffic; with the local backend it serves the URLs itself through
`resources.storage_objects.StoredObject`.

Object keys are validated strictly (`validate_key`) before they reach a file
system path or a bucket, and every URL is bound to one method, one key, an expiry
and a content type (plus disposition and file name for downloads).

Presigned URLs are credentials: never log them.

Modules: `base` (errors, `ObjectInfo`, the `Storage` protocol, key and file-name
helpers), `local` (`LocalStorage`), `s3` (`S3Storage` and its SigV4 GET
presigner), `links` (`LinkCache`: cached download links), `factory`
(`make_storage`). The names in `__all__` are re-exported from here;
`LinkCache` is imported from `storage.links`.
"""

from __future__ import annotations

from storage.base import (
    DOWNLOAD_CACHE_CONTROL,
    KEY_SCHEMA,
    MAX_EXPIRES_IN,
    SEALED_PREFIX,
    AccessDenied,
    Disposition,
    IncompleteUpload,
    InvalidKeyError,
    ObjectInfo,
    ObjectNotFound,
    ObjectTooLarge,
    Readable,
    Sealed,
    Storage,
    StorageError,
    ascii_filename,
    check_writable_key,
    content_disposition,
    new_object_key,
    sealed_key,
    validate_key,
)
from storage.factory import make_storage
from storage.local import LocalStorage
from storage.s3 import S3Storage, SigV4Presigner

__all__ = [
    "DOWNLOAD_CACHE_CONTROL",
    "KEY_SCHEMA",
    "MAX_EXPIRES_IN",
    "SEALED_PREFIX",
    "AccessDenied",
    "Disposition",
    "IncompleteUpload",
    "InvalidKeyError",
    "LocalStorage",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectTooLarge",
    "Readable",
    "S3Storage",
    "Sealed",
    "SigV4Presigner",
    "Storage",
    "StorageError",
    "ascii_filename",
    "check_writable_key",
    "content_disposition",
    "make_storage",
    "new_object_key",
    "sealed_key",
    "validate_key",
]
