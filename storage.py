"""Object storage behind one interface: a local directory or an S3-compatible bucket.

Both backends hand out *presigned URLs*: the integrator PUTs the raw file to one
(step 5 of the signed-documents flow) and clinic users open or download it through
another (`url` / `downloadUrl` of a medical record). The service itself never
proxies S3 traffic; with the local backend it serves the URLs itself through
``resources.storage_objects.StoredObject``.

Object keys are validated strictly (``validate_key``) before they reach a file
system path or a bucket, and every URL is bound to one method, one key, an expiry
and a content type (plus disposition and file name for downloads).

Presigned URLs are credentials: never log them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import mimetypes
import os
import re
import secrets
import tempfile
import time
import unicodedata
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, Protocol, runtime_checkable

from s3_presign import SigV4Presigner

if TYPE_CHECKING:  # boto3 is imported lazily: a local-only service never loads it.
    from botocore.client import BaseClient

__all__ = [
    "DEFAULT_MAX_UPLOAD_BYTES",
    "MAX_EXPIRES_IN",
    "AccessDenied",
    "Disposition",
    "IncompleteUpload",
    "InvalidKeyError",
    "LocalStorage",
    "ObjectInfo",
    "ObjectTooLarge",
    "Readable",
    "S3Storage",
    "Storage",
    "StorageError",
    "ascii_filename",
    "content_disposition",
    "make_storage",
    "new_object_key",
    "validate_key",
]

Disposition = Literal["inline", "attachment"]

#: Default cap for one upload through the local backend (``storage_max_upload_bytes``).
DEFAULT_MAX_UPLOAD_BYTES = 100 * 1024 * 1024
#: Longest lifetime a presigned URL may have; SigV4 allows no more than 7 days either.
MAX_EXPIRES_IN = 7 * 24 * 3600
#: Bytes per read/write when streaming an upload to disk.
CHUNK_SIZE = 1024 * 1024
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
    """What ``LocalStorage.write_stream`` reads from (a file, ``req.bounded_stream``)."""

    def read(self, size: int = -1, /) -> bytes: ...


# --------------------------------------------------------------------------- errors


class StorageError(Exception):
    """Base class of the errors this module raises on purpose."""


class InvalidKeyError(StorageError, ValueError):
    """The object key does not match the allowed pattern."""


class AccessDenied(StorageError):
    """A presigned URL was missing, tampered with, expired or used differently than signed."""


class ObjectTooLarge(StorageError):
    """The upload exceeds the configured size cap."""


class IncompleteUpload(StorageError):
    """The body ended before its announced length (client went away): nothing was stored."""


# ---------------------------------------------------------------- the shared interface


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What ``head`` reports about a stored object."""

    size: int
    content_type: str


@runtime_checkable
class Storage(Protocol):
    """Operations the service needs from object storage, whatever the backend."""

    def presign_put(self, key: str, content_type: str, expires_in: int) -> str:
        """URL accepting ``PUT`` of the object's bytes with exactly this ``Content-Type``.

        The URL may be used any number of times until it expires; each use replaces
        the object.
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
        """URL serving the object with this content type and ``Content-Disposition``."""
        ...

    def exists(self, key: str) -> bool: ...

    def head(self, key: str) -> ObjectInfo | None:
        """Size and stored content type, or ``None`` when there is no such object."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""
        ...

    def prepare(self) -> None:
        """Create what the backend needs (directory or bucket); idempotent."""
        ...


# ------------------------------------------------------------------------- helpers


def validate_key(key: str) -> str:
    """Return ``key`` unchanged if it is an acceptable object key, else raise.

    Accepted: 1-16 ``/``-separated segments of ``[A-Za-z0-9._-]``, each starting with
    a letter or digit, at most 512 characters in all. No leading ``/``, no empty,
    ``.`` or ``..`` segment, no percent-encoding, no backslash.
    """
    if not isinstance(key, str) or len(key) > _MAX_KEY_LENGTH or not _KEY_RE.fullmatch(key):
        raise InvalidKeyError("invalid object key")
    return key


def new_object_key(request_id: uuid.UUID | str, content_type: str) -> str:
    """A fresh, unguessable key ``requests/<request-uuid>/<32 hex>.<ext>``.

    The suffix follows the content type, as the upload-link's ``fileHash`` does.
    """
    rid = uuid.UUID(str(request_id))
    base = content_type.split(";", 1)[0].strip().lower()
    ext = _PREFERRED_EXTENSIONS.get(base) or mimetypes.guess_extension(base) or ".bin"
    if not _EXTENSION_RE.fullmatch(ext):
        ext = ".bin"
    return validate_key(f"requests/{rid}/{secrets.token_hex(16)}{ext}")


def ascii_filename(filename: str) -> str:
    """ASCII-only, quote-free fallback file name for ``filename="..."``.

    Diacritics are dropped and whitespace becomes ``_``; anything else outside
    ``[A-Za-z0-9._-]`` is removed. Never empty.
    """
    decomposed = unicodedata.normalize("NFKD", filename)
    ascii_only = decomposed.encode("ascii", "ignore").decode("ascii")
    ascii_only = re.sub(r"\s+", "_", ascii_only.strip())
    ascii_only = re.sub(r"[^A-Za-z0-9._-]", "", ascii_only).lstrip(".")
    return ascii_only[:_MAX_FILENAME_LENGTH] or "file"


def content_disposition(disposition: Disposition, filename: str) -> str:
    """``Content-Disposition`` value with an ASCII ``filename`` and RFC 5987 ``filename*``."""
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


# -------------------------------------------------------------------- local backend


class LocalStorage:
    """Files under ``root``, served by the service itself at HMAC-signed URLs.

    Layout: the object ``a/b.pdf`` is ``root/a/b.pdf``; its content type is in the
    JSON sidecar ``root/.meta/a/b.pdf.json``. Uploads are written to a hidden
    ``.upload-*.part`` file in the target directory and renamed into place, so a
    reader sees either the old object or the complete new one. No valid key can
    name a hidden file, so neither sidecars nor partial uploads are ever served.

    URL signatures are HMAC-SHA256 (key derived from ``signing_key``) over the
    method, key, expiry and content type, and for GET also the disposition and
    file name.
    """

    _META_DIR = ".meta"
    _PART_PREFIX = ".upload-"
    _PART_SUFFIX = ".part"

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        signing_key: bytes | str,
        public_base_url: str,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        fsync: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        raw_key = signing_key.encode("utf-8") if isinstance(signing_key, str) else bytes(signing_key)
        if len(raw_key) < 16:
            raise ValueError("storage_signing_key must be at least 16 bytes")
        if not public_base_url.startswith(("http://", "https://")):
            raise ValueError("public_base_url must be an absolute http(s) URL")
        if max_upload_bytes < 1:
            raise ValueError("max_upload_bytes must be positive")
        # A dedicated subkey, so the configured secret can be shared with other
        # signers without their signatures ever validating here.
        self._hmac_key = hmac.new(raw_key, b"clinic-storage-url-v1", hashlib.sha256).digest()
        self.root = Path(os.path.realpath(root))
        self.public_base_url = public_base_url.rstrip("/")
        self.max_upload_bytes = max_upload_bytes
        self.fsync = fsync
        self._clock = clock

    # -- paths -------------------------------------------------------------------

    def _contained(self, path: Path) -> Path:
        """``path`` resolved, refusing anything outside ``root`` (e.g. via a symlink)."""
        resolved = Path(os.path.realpath(path))
        if os.path.commonpath([resolved, self.root]) != str(self.root) or resolved == self.root:
            raise InvalidKeyError("invalid object key")
        return resolved

    def path_for(self, key: str) -> Path:
        """File system path of the object ``key``, guaranteed inside ``root``."""
        return self._contained(self.root / validate_key(key))

    def _meta_path(self, key: str) -> Path:
        return self._contained(self.root / self._META_DIR / f"{validate_key(key)}.json")

    # -- signing -----------------------------------------------------------------

    def _signature(self, method: str, key: str, expires: int, *fields: str) -> str:
        # JSON framing makes the message unambiguous whatever the fields contain.
        message = json.dumps([method, key, expires, *fields], separators=(",", ":"))
        return hmac.new(self._hmac_key, message.encode("utf-8"), hashlib.sha256).hexdigest()

    def _verify(self, method: str, key: str, expires: str | None, signature: str | None, *fields: str) -> None:
        if not expires or not signature or not expires.isascii() or not expires.isdigit():
            raise AccessDenied("missing or malformed signature")
        expected = self._signature(method, key, int(expires), *fields)
        if not hmac.compare_digest(expected.encode("ascii"), signature.encode("utf-8", "replace")):
            raise AccessDenied("signature does not match")
        if int(expires) < self._clock():
            raise AccessDenied("URL has expired")

    def _url(self, key: str, params: dict[str, str]) -> str:
        return f"{self.public_base_url}/storage/{key}?{urllib.parse.urlencode(params)}"

    # -- Storage interface ---------------------------------------------------------

    def presign_put(self, key: str, content_type: str, expires_in: int) -> str:
        validate_key(key)
        if not content_type or any(c in content_type for c in "\r\n"):
            raise ValueError("content_type must be a non-empty header value")
        expires = int(self._clock()) + _check_expires_in(expires_in)
        signature = self._signature("PUT", key, expires, content_type.strip())
        return self._url(key, {"expires": str(expires), "signature": signature})

    def presign_get(
        self,
        key: str,
        expires_in: int,
        *,
        content_type: str,
        disposition: Disposition,
        filename: str,
    ) -> str:
        validate_key(key)
        _check_get_params(content_type, disposition, filename)
        expires = int(self._clock()) + _check_expires_in(expires_in)
        signature = self._signature("GET", key, expires, content_type, disposition, filename)
        return self._url(
            key,
            {
                "expires": str(expires),
                "content_type": content_type,
                "disposition": disposition,
                "filename": filename,
                "signature": signature,
            },
        )

    def exists(self, key: str) -> bool:
        return self.path_for(key).is_file()

    def head(self, key: str) -> ObjectInfo | None:
        try:
            size = os.stat(self.path_for(key)).st_size
        except FileNotFoundError:
            return None
        try:
            content_type = json.loads(self._meta_path(key).read_text("utf-8"))["content_type"]
        except (OSError, ValueError, KeyError):
            content_type = "application/octet-stream"
        return ObjectInfo(size=size, content_type=content_type)

    def delete(self, key: str) -> None:
        for path in (self.path_for(key), self._meta_path(key)):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    # -- used by resources.storage_objects -------------------------------------------

    def verify_put(self, key: str, *, expires: str | None, signature: str | None, content_type: str | None) -> None:
        """Raise ``AccessDenied`` unless the PUT URL is genuine, unexpired and for this content type."""
        validate_key(key)
        self._verify("PUT", key, expires, signature, (content_type or "").strip())

    def verify_get(
        self,
        key: str,
        *,
        expires: str | None,
        signature: str | None,
        content_type: str | None,
        disposition: str | None,
        filename: str | None,
    ) -> None:
        """Raise ``AccessDenied`` unless the GET URL is genuine and unexpired."""
        validate_key(key)
        if not content_type or disposition not in ("inline", "attachment") or not filename:
            raise AccessDenied("missing or malformed signature")
        self._verify("GET", key, expires, signature, content_type, disposition, filename)

    def write_stream(self, key: str, stream: Readable, length: int | None, content_type: str) -> int:
        """Store exactly ``length`` bytes read from ``stream`` as ``key``; with ``length``
        None (a chunked upload), the stream up to its end. Returns the size stored.

        Streams in ``CHUNK_SIZE`` pieces to a temporary file beside the target and
        renames it into place only once every byte has arrived, so a short body
        (``IncompleteUpload``), an oversized one (``ObjectTooLarge``: a declared length
        before reading, an open-ended stream once one byte over the cap has been read)
        or any error leaves the previous state untouched.
        """
        if length is not None and length > self.max_upload_bytes:
            raise ObjectTooLarge(f"upload exceeds {self.max_upload_bytes} bytes")
        target = self.path_for(key)
        meta = self._meta_path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            meta.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise InvalidKeyError("object key collides with an existing object") from exc
        # Re-check after mkdir: a symlinked directory must not lead outside root.
        self._contained(target.parent / target.name)

        fd, tmp_name = tempfile.mkstemp(prefix=self._PART_PREFIX, suffix=self._PART_SUFFIX, dir=target.parent)
        try:
            with open(fd, "wb", buffering=0, closefd=True) as out:
                # Never more than one byte past what may be stored.
                wanted = self.max_upload_bytes + 1 if length is None else length
                written = 0
                while written < wanted:
                    chunk = stream.read(min(CHUNK_SIZE, wanted - written))
                    if not chunk:
                        if length is None:
                            break
                        raise IncompleteUpload(f"body ended {length - written} bytes early")
                    out.write(chunk)
                    written += len(chunk)
                if written > self.max_upload_bytes:
                    raise ObjectTooLarge(f"upload exceeds {self.max_upload_bytes} bytes")
                if self.fsync:
                    os.fsync(out.fileno())
            # Sidecar first: if we die between the two renames, the old object (if
            # any) is served with the new type, never a new object without a type.
            self._write_json_atomic(meta, {"content_type": content_type, "size": written})
            os.replace(tmp_name, target)
        except BaseException:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
            raise
        return written

    def open_for_read(self, key: str) -> tuple[BinaryIO, int]:
        """Open the object for streaming; ``FileNotFoundError`` when missing."""
        path = self.path_for(key)
        handle = open(path, "rb")
        try:
            stat = os.fstat(handle.fileno())
        except BaseException:
            handle.close()
            raise
        if not S_ISREG(stat.st_mode):  # a directory is no object
            handle.close()
            raise FileNotFoundError(key)
        return handle, stat.st_size

    def purge_stale_uploads(self, older_than_seconds: float = 3600.0) -> int:
        """Delete temp files of uploads killed mid-way (process crash); returns how many.

        An interrupted upload in a live process cleans up after itself; only a hard
        kill leaves a hidden ``.upload-*.part`` behind. For an operator command.
        """
        cutoff = self._clock() - older_than_seconds
        removed = 0
        for dirpath, _dirnames, filenames in os.walk(self.root):
            for name in filenames:
                if name.startswith(self._PART_PREFIX) and name.endswith(self._PART_SUFFIX):
                    path = os.path.join(dirpath, name)
                    try:
                        if os.stat(path).st_mtime < cutoff:
                            os.unlink(path)
                            removed += 1
                    except FileNotFoundError:
                        pass
        return removed

    def _write_json_atomic(self, path: Path, payload: dict[str, Any]) -> None:
        fd, tmp_name = tempfile.mkstemp(prefix=self._PART_PREFIX, suffix=self._PART_SUFFIX, dir=path.parent)
        try:
            with open(fd, "w", encoding="utf-8", closefd=True) as out:
                json.dump(payload, out)
            os.replace(tmp_name, path)
        except BaseException:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
            raise


# ----------------------------------------------------------------------- S3 backend


class S3Storage:
    """An S3-compatible bucket, reached with boto3 (SigV4, path-style addressing).

    ``public_endpoint_url`` is the endpoint written into presigned URLs when clients
    reach storage under another address than the service does; SigV4 signs the
    host, so URLs are signed by a second client bound to that address.
    """

    def __init__(
        self,
        *,
        bucket: str,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        public_endpoint_url: str | None = None,
    ) -> None:
        if not bucket:
            raise ValueError("s3_bucket is required for the s3 storage backend")
        self.bucket = bucket
        self.region = region or "us-east-1"
        self._client = self._make_client(endpoint_url, access_key_id, secret_access_key)
        if public_endpoint_url and public_endpoint_url != endpoint_url:
            self._signer = self._make_client(public_endpoint_url, access_key_id, secret_access_key)
        else:
            self._signer = self._client
        # GET links are presigned by the hundred (request detail): with static keys, sign
        # them directly (same URLs as boto3, ~100x cheaper); otherwise through boto3.
        self._fast_signer: SigV4Presigner | None = None
        if access_key_id and secret_access_key:
            self._fast_signer = SigV4Presigner(self._signer.meta.endpoint_url, self._signer.meta.region_name,
                                               access_key_id, secret_access_key)

    def _make_client(self, endpoint_url: str | None, access_key_id: str | None, secret_access_key: str | None) -> BaseClient:
        import boto3
        from botocore.config import Config as BotoConfig

        return boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url or None,
            region_name=self.region,
            aws_access_key_id=access_key_id or None,
            aws_secret_access_key=secret_access_key or None,
            config=BotoConfig(
                signature_version="s3v4",
                s3={"addressing_style": "path"},
                # Flexible checksums (botocore >= 1.36) are not understood by every
                # S3-compatible server; only send them where an operation needs them.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                connect_timeout=5,
                read_timeout=30,
                retries={"max_attempts": 3, "mode": "standard"},
            ),
        )

    def presign_put(self, key: str, content_type: str, expires_in: int) -> str:
        validate_key(key)
        if not content_type or any(c in content_type for c in "\r\n"):
            raise ValueError("content_type must be a non-empty header value")
        return str(self._signer.generate_presigned_url(
            "put_object",
            Params={"Bucket": self.bucket, "Key": key, "ContentType": content_type.strip()},
            ExpiresIn=_check_expires_in(expires_in),
            HttpMethod="PUT",
        ))

    def presign_get(
        self,
        key: str,
        expires_in: int,
        *,
        content_type: str,
        disposition: Disposition,
        filename: str,
    ) -> str:
        validate_key(key)
        _check_get_params(content_type, disposition, filename)
        if self._fast_signer is not None:
            return self._fast_signer.presign("GET", self.bucket, key, _check_expires_in(expires_in), {
                "response-content-type": content_type,
                "response-content-disposition": content_disposition(disposition, filename),
                "response-cache-control": DOWNLOAD_CACHE_CONTROL,
            })
        return str(self._signer.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ResponseContentType": content_type,
                "ResponseContentDisposition": content_disposition(disposition, filename),
                "ResponseCacheControl": DOWNLOAD_CACHE_CONTROL,
            },
            ExpiresIn=_check_expires_in(expires_in),
            HttpMethod="GET",
        ))

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def head(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        validate_key(key)
        try:
            response = self._client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _is_not_found(exc):
                return None
            raise
        return ObjectInfo(
            size=int(response["ContentLength"]),
            content_type=response.get("ContentType") or "application/octet-stream",
        )

    def delete(self, key: str) -> None:
        validate_key(key)
        self._client.delete_object(Bucket=self.bucket, Key=key)

    def prepare(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
            return
        except ClientError as exc:
            if not _is_not_found(exc):
                raise
        params: dict[str, Any] = {"Bucket": self.bucket}
        if self.region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        self._client.create_bucket(**params)


def _is_not_found(exc: Exception) -> bool:
    response = getattr(exc, "response", {}) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status == 404 or code in {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}


# -------------------------------------------------------------------------- factory


def make_storage(cfg: Any) -> LocalStorage | S3Storage:
    """Build the configured backend from a ``Config``-like object.

    Reads ``storage_backend`` (``local`` | ``s3``), ``storage_dir``,
    ``storage_signing_key``, ``public_base_url``, ``s3_endpoint_url``, ``s3_bucket``,
    ``s3_region``, ``s3_access_key_id``, ``s3_secret_access_key`` and, when present,
    ``storage_max_upload_bytes`` and ``s3_public_endpoint_url``.
    """
    backend = (getattr(cfg, "storage_backend", None) or "local").strip().lower()
    if backend == "local":
        return LocalStorage(
            getattr(cfg, "storage_dir", None) or "./var/storage",
            signing_key=cfg.storage_signing_key or b"",
            public_base_url=cfg.public_base_url,
            max_upload_bytes=getattr(cfg, "storage_max_upload_bytes", None) or DEFAULT_MAX_UPLOAD_BYTES,
        )
    if backend == "s3":
        return S3Storage(
            bucket=cfg.s3_bucket,
            endpoint_url=cfg.s3_endpoint_url,
            region=cfg.s3_region,
            access_key_id=cfg.s3_access_key_id,
            secret_access_key=cfg.s3_secret_access_key,
            public_endpoint_url=getattr(cfg, "s3_public_endpoint_url", None),
        )
    raise ValueError(f"unknown storage_backend {backend!r}; expected 'local' or 's3'")
