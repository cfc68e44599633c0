"""The S3 backend: an S3-compatible bucket reached with boto3, and the direct SigV4
GET presigner it signs download links with.

Presigned URLs are credentials: never log them.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from typing import TYPE_CHECKING, Any, BinaryIO

from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from config import Config
from storage.base import (
    DOWNLOAD_CACHE_CONTROL,
    Disposition,
    ObjectInfo,
    ObjectNotFound,
    Sealed,
    _check_expires_in,
    _check_get_params,
    check_writable_key,
    content_disposition,
    validate_key,
)

if TYPE_CHECKING:  # boto3 is imported lazily: a local-only service never loads it.
    from botocore.client import BaseClient

__all__ = ["S3Storage", "SigV4Presigner"]

CHUNK_SIZE = 1024 * 1024  # bytes read at a time when hashing a registered copy


# ------------------------------------------------------------- direct GET presigning


class SigV4Presigner:
    """S3 GET presigning with botocore's own SigV4 query signer, without boto3's pipeline.

    `generate_presigned_url` costs ~0.35 ms a URL in boto3 (events, parameter validation,
    endpoint rules); a request detail with 1000 attachments needs 2000 URLs. Calling the
    signer class that it ends in (`botocore.auth.S3SigV4QueryAuth`) on a prepared request
    gives the same URL (path-style, `UNSIGNED-PAYLOAD`, only `host` signed) in ~0.07 ms,
    and keeps the cryptography in the library. `tests/test_s3_presign.py` compares the
    URLs with boto3's and has a real SeaweedFS serve and refuse them.

    Used only with static credentials (access key id and secret configured); anything
    else (session tokens, instance roles) goes through boto3.
    """

    def __init__(self, endpoint_url: str, region: str, access_key_id: str, secret_access_key: str) -> None:
        parts = urllib.parse.urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError("endpoint_url must be an http(s) URL without query")
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.base_path = parts.path.rstrip("/")
        self.region = region
        self._credentials = Credentials(access_key_id, secret_access_key)

    def presign(self, method: str, bucket: str, key: str, expires_in: int, params: dict[str, str]) -> str:
        """URL for `method` on `bucket/key` with extra query `params` (signed)."""
        path = urllib.parse.quote(f"{self.base_path}/{bucket}/{key}", safe="/~")
        request = AWSRequest(method=method, url=f"{self.origin}{path}", params=params)
        S3SigV4QueryAuth(self._credentials, "s3", self.region, expires=expires_in).add_auth(request)
        return request.prepare().url


# ----------------------------------------------------------------------- S3 backend


class S3Storage:
    """An S3-compatible bucket, reached with boto3 (SigV4, path-style addressing).

    `public_endpoint_url` is the endpoint written into presigned URLs when clients
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
        max_upload_bytes: int = Config.upload_max_bytes,
    ) -> None:
        if not bucket:
            raise ValueError("s3_bucket is required for the s3 storage backend")
        if max_upload_bytes < 1:
            raise ValueError("max_upload_bytes must be positive")
        self.bucket = bucket
        # Not enforced by the bucket: a presigned PUT limits the size only when the exact
        # Content-Length is signed, which the integrator does not announce
        # (docs/integrators/signed-documents.md). Registration refuses a larger object instead.
        self.max_upload_bytes = max_upload_bytes
        self.region = region or Config.s3_region  # the configuration's default region
        self._client = self._make_client(endpoint_url, access_key_id, secret_access_key)
        if public_endpoint_url and public_endpoint_url != endpoint_url:
            self._signer = self._make_client(public_endpoint_url, access_key_id, secret_access_key)
        else:
            self._signer = self._client
        # GET links are presigned by the hundred (request detail): with static keys, sign
        # them directly (same URLs as boto3, ~100x cheaper); otherwise through boto3.
        self._fast_signer: SigV4Presigner | None = None
        if access_key_id and secret_access_key:
            self._fast_signer = SigV4Presigner(
                self._signer.meta.endpoint_url, self._signer.meta.region_name, access_key_id, secret_access_key
            )

    def _make_client(
        self, endpoint_url: str | None, access_key_id: str | None, secret_access_key: str | None
    ) -> BaseClient:
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
        # Never for a sealed key: S3 cannot revoke a presigned PUT, so none may exist for one.
        check_writable_key(key)
        if not content_type or any(c in content_type for c in "\r\n"):
            raise ValueError("content_type must be a non-empty header value")
        return str(
            self._signer.generate_presigned_url(
                "put_object",
                Params={"Bucket": self.bucket, "Key": key, "ContentType": content_type.strip()},
                ExpiresIn=_check_expires_in(expires_in),
                HttpMethod="PUT",
            )
        )

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
            return self._fast_signer.presign(
                "GET",
                self.bucket,
                key,
                _check_expires_in(expires_in),
                {
                    "response-content-type": content_type,
                    "response-content-disposition": content_disposition(disposition, filename),
                    "response-cache-control": DOWNLOAD_CACHE_CONTROL,
                },
            )
        return str(
            self._signer.generate_presigned_url(
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
            )
        )

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

    def read_prefix(self, key: str, size: int) -> bytes:
        from botocore.exceptions import ClientError

        validate_key(key)
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{max(size, 1) - 1}")
        except ClientError as exc:
            code = (getattr(exc, "response", {}) or {}).get("Error", {}).get("Code")
            if _is_not_found(exc) or code == "InvalidRange":  # missing, or empty
                return b""
            raise
        with response["Body"] as body:
            return body.read(size)

    def open_for_read(self, key: str) -> tuple[BinaryIO, int]:
        from botocore.exceptions import ClientError

        validate_key(key)
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _is_not_found(exc):
                raise FileNotFoundError(key) from None
            raise
        return response["Body"], int(response["ContentLength"])

    def seal(self, source: str, target: str) -> Sealed:
        """A server-side copy, then the copy read back once to hash it: the digest is of
        the bytes the registered object holds, whatever happens to `source` meanwhile."""
        from botocore.exceptions import ClientError

        validate_key(source)
        validate_key(target)
        try:
            self._client.copy_object(
                Bucket=self.bucket,
                Key=target,
                CopySource={"Bucket": self.bucket, "Key": source},
                MetadataDirective="COPY",
            )
        except ClientError as exc:
            if _is_not_found(exc):
                raise ObjectNotFound(source) from None
            raise
        digest, size = hashlib.sha256(), 0
        body = self._client.get_object(Bucket=self.bucket, Key=target)["Body"]
        try:
            for chunk in body.iter_chunks(CHUNK_SIZE):
                digest.update(chunk)
                size += len(chunk)
        finally:
            body.close()
        return Sealed(sha256=digest.hexdigest(), size=size)

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
