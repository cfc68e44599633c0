"""The local backend: files under a directory, served by the service itself at
HMAC-signed URLs (`resources.storage_objects.StoredObject`).

Presigned URLs are credentials: never log them.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any, BinaryIO

from config import Config
from storage.base import (
    AccessDenied,
    Disposition,
    IncompleteUpload,
    InvalidKeyError,
    ObjectInfo,
    ObjectNotFound,
    ObjectTooLarge,
    Readable,
    Sealed,
    _check_expires_in,
    _check_get_params,
    check_writable_key,
    validate_key,
)

__all__ = ["CHUNK_SIZE", "LocalStorage"]

#: Bytes per read/write when streaming an upload to disk.
CHUNK_SIZE = 1024 * 1024


def _subkey(raw_key: bytes) -> bytes:
    return hmac.new(raw_key, b"clinic-storage-url-v1", hashlib.sha256).digest()


class LocalStorage:
    """Files under `root`, served by the service itself at HMAC-signed URLs.

    Layout: the object `a/b.pdf` is `root/a/b.pdf`; its content type is in the
    JSON sidecar `root/.meta/a/b.pdf.json`. Uploads are written to a hidden
    `.upload-*.part` file in the target directory and renamed into place, so a
    reader sees either the old object or the complete new one. No valid key can
    name a hidden file, so neither sidecars nor partial uploads are ever served.

    URL signatures are HMAC-SHA256 (key derived from `signing_key`) over the
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
        # The default is the configuration's (`upload_max_bytes`); make_storage passes it.
        max_upload_bytes: int = Config.upload_max_bytes,
        fsync: bool = True,
        clock: Callable[[], float] = time.time,
        fallback_signing_keys: Sequence[bytes | str] = (),
    ) -> None:
        if not os.fspath(root):
            raise ValueError("storage_dir must not be empty")
        raw_key = signing_key.encode("utf-8") if isinstance(signing_key, str) else bytes(signing_key)
        if len(raw_key) < 16:
            raise ValueError("storage_signing_key must be at least 16 bytes")
        if not public_base_url.startswith(("http://", "https://")):
            raise ValueError("public_base_url must be an absolute http(s) URL")
        if max_upload_bytes < 1:
            raise ValueError("max_upload_bytes must be positive")
        # A dedicated subkey, so the configured secret can be shared with other
        # signers without their signatures ever validating here. The fallbacks (the keys
        # SECRET_KEY replaced) still verify the links they signed, never sign.
        self._hmac_key = _subkey(raw_key)
        self._verify_keys = [self._hmac_key] + [
            _subkey(k.encode("utf-8") if isinstance(k, str) else bytes(k)) for k in fallback_signing_keys
        ]
        self.root = Path(os.path.realpath(root))
        self.public_base_url = public_base_url.rstrip("/")
        self.max_upload_bytes = max_upload_bytes
        self.fsync = fsync
        self._clock = clock

    # -- paths -------------------------------------------------------------------

    def _contained(self, path: Path) -> Path:
        """`path` resolved, refusing anything outside `root` (e.g. via a symlink)."""
        resolved = Path(os.path.realpath(path))
        if os.path.commonpath([resolved, self.root]) != str(self.root) or resolved == self.root:
            raise InvalidKeyError("invalid object key")
        return resolved

    def path_for(self, key: str) -> Path:
        """File system path of the object `key`, guaranteed inside `root`."""
        return self._contained(self.root / validate_key(key))

    def _meta_path(self, key: str) -> Path:
        return self._contained(self.root / self._META_DIR / f"{validate_key(key)}.json")

    # -- signing -----------------------------------------------------------------

    def _signature(self, method: str, key: str, expires: int, *fields: str, hmac_key: bytes | None = None) -> str:
        # JSON framing makes the message unambiguous whatever the fields contain.
        message = json.dumps([method, key, expires, *fields], separators=(",", ":"))
        return hmac.new(hmac_key or self._hmac_key, message.encode("utf-8"), hashlib.sha256).hexdigest()

    def _verify(self, method: str, key: str, expires: str | None, signature: str | None, *fields: str) -> None:
        if not expires or not signature or not expires.isascii() or not expires.isdigit():
            raise AccessDenied("missing or malformed signature")
        given = signature.encode("utf-8", "replace")
        matches = [
            hmac.compare_digest(self._signature(method, key, int(expires), *fields, hmac_key=k).encode("ascii"), given)
            for k in self._verify_keys  # every key, whichever matches: the same work either way
        ]
        if not any(matches):
            raise AccessDenied("signature does not match")
        if int(expires) < self._clock():
            raise AccessDenied("URL has expired")

    def _url(self, key: str, params: dict[str, str]) -> str:
        return f"{self.public_base_url}/storage/{key}?{urllib.parse.urlencode(params)}"

    # -- Storage interface ---------------------------------------------------------

    def presign_put(self, key: str, content_type: str, expires_in: int) -> str:
        check_writable_key(key)
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
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    # -- used by resources.storage_objects -------------------------------------------

    def verify_put(self, key: str, *, expires: str | None, signature: str | None, content_type: str | None) -> None:
        """Raise `AccessDenied` unless the PUT URL is genuine, unexpired and for this content
        type, and its key is not sealed: a sealed copy is refused before the signature is
        even looked at, so a signing key that leaked (or was guessed) cannot change it."""
        check_writable_key(key)
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
        """Raise `AccessDenied` unless the GET URL is genuine and unexpired."""
        validate_key(key)
        if not content_type or disposition not in ("inline", "attachment") or not filename:
            raise AccessDenied("missing or malformed signature")
        self._verify("GET", key, expires, signature, content_type, disposition, filename)

    def write_stream(self, key: str, stream: Readable, length: int | None, content_type: str) -> int:
        """Store exactly `length` bytes read from `stream` as `key`; with `length`
        None (a chunked upload), the stream up to its end. Returns the size stored.

        Streams in `CHUNK_SIZE` pieces to a temporary file beside the target and
        renames it into place only once every byte has arrived, so a short body
        (`IncompleteUpload`), an oversized one (`ObjectTooLarge`: a declared length
        before reading, an open-ended stream once one byte over the cap has been read)
        or any error leaves the previous state untouched.
        """
        if length is not None and length > self.max_upload_bytes:
            raise ObjectTooLarge(f"upload exceeds {self.max_upload_bytes} bytes")
        target = self.path_for(key)
        meta = self._meta_path(key)
        try:
            self._make_directories(target.parent)
            self._make_directories(meta.parent)
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
            _discard(tmp_name)
            raise
        if self.fsync:
            # The rename is in the directory, not in the file: until the directory is on
            # disk a power loss can undo it. A sealed copy must be durable before the
            # caller commits its record and deletes the upload, so before returning.
            _fsync_directory(target.parent)
        return written

    def _make_directories(self, directory: Path) -> None:
        """`mkdir -p`; with `fsync`, each directory made is also made durable in its
        parent (a fresh `registered/<request>/` would otherwise vanish with its file)."""
        missing: list[Path] = []
        current = directory
        while not current.is_dir() and current != current.parent:
            missing.append(current)
            current = current.parent
        for made in reversed(missing):
            try:
                made.mkdir()
            except FileExistsError:
                if not made.is_dir():  # a file in the way: the caller's collision
                    raise
            if self.fsync:  # made by us or by a concurrent writer: its entry is synced here either way
                _fsync_directory(made.parent)

    def seal(self, source: str, target: str) -> Sealed:
        try:
            handle, _ = self.open_for_read(source)
        except FileNotFoundError:
            raise ObjectNotFound(source) from None
        info = self.head(source)
        digest = hashlib.sha256()

        class Hashing:  # what `write_stream` reads is what is hashed: exactly the stored bytes
            def read(self, size: int = -1, /) -> bytes:
                chunk = handle.read(size)
                digest.update(chunk)
                return chunk

        with handle:  # an upload replacing `source` meanwhile renames a new file: this one is whole
            size = self.write_stream(target, Hashing(), None, info.content_type if info else "application/octet-stream")
        return Sealed(sha256=digest.hexdigest(), size=size)

    def read_prefix(self, key: str, size: int) -> bytes:
        try:
            handle, _ = self.open_for_read(key)
        except FileNotFoundError:
            return b""
        with handle:
            return handle.read(size)

    def open_for_read(self, key: str) -> tuple[BinaryIO, int]:
        """Open the object for streaming; `FileNotFoundError` when missing."""
        path = self.path_for(key)
        handle = open(path, "rb")  # noqa: SIM115 (kept open for the caller; closed by it)
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
        kill leaves a hidden `.upload-*.part` behind. For an operator command.
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
                if self.fsync:  # the content type of a sealed copy is kept like its bytes
                    out.flush()
                    os.fsync(out.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            _discard(tmp_name)
            raise
        if self.fsync:
            _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the directory's entries (a rename, a new file or subdirectory) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(tmp_name: str) -> None:
    """Remove a temporary file that will not be renamed into place (it may be gone)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp_name)
