"""`make_storage`: the configured backend, built from the `Config`."""

from __future__ import annotations

from config import LOCAL_BASE_URL, Config
from storage.local import LocalStorage
from storage.s3 import S3Storage

__all__ = ["make_storage"]


def make_storage(cfg: Config) -> LocalStorage | S3Storage:
    """Build the configured backend from the `Config`.

    Reads `storage_backend` (`local` | `s3`), `upload_max_bytes` (both),
    `storage_dir`, `storage_signing_key` (and the fallbacks' signing keys) and
    `public_base_url` (local), or
    `s3_endpoint_url`, `s3_public_endpoint_url`, `s3_bucket`, `s3_region`,
    `s3_access_key_id` and `s3_secret_access_key` (s3). Their defaults are
    `Config`'s (an unset `public_base_url`: `LOCAL_BASE_URL`).
    """
    backend = cfg.storage_backend.strip().lower()
    if backend == "local":
        return LocalStorage(
            cfg.storage_dir,
            signing_key=cfg.storage_signing_key,
            fallback_signing_keys=cfg.storage_signing_fallbacks,
            public_base_url=cfg.public_base_url or LOCAL_BASE_URL,
            max_upload_bytes=cfg.upload_max_bytes,
        )
    if backend == "s3":
        return S3Storage(
            bucket=cfg.s3_bucket,
            endpoint_url=cfg.s3_endpoint_url,
            region=cfg.s3_region,
            access_key_id=cfg.s3_access_key_id,
            secret_access_key=cfg.s3_secret_access_key,
            public_endpoint_url=cfg.s3_public_endpoint_url,
            max_upload_bytes=cfg.upload_max_bytes,
        )
    raise ValueError(f"unknown storage_backend {backend!r}; expected 'local' or 's3'")
