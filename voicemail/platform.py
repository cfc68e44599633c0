"""The switchboard platform's API (the vendor's system), which hands out fresh download
links once a call's original `RecordingUrl` has expired (jobs/refetch.py asks it; which
calls may be asked about, and the check of what a fresh link yields, are
voicemail/recordings.py's).

Platform API (paths are configuration, relative to the clinic's `platform_api_url`):

- token exchange: `POST {PLATFORM_TOKEN_PATH}` with JSON `{"username", "password"}` answers
  `{"access_token" | "accessToken" | "token", "expires_in" | "expiresIn" (seconds)}`;
- fresh link: `GET {PLATFORM_RECORDING_PATH}` (`{recording}` = the reference, URL-encoded)
  with `Authorization: Bearer <token>` answers `{"url" | "downloadUrl" | "link",
  "expiresAt" | "expires_at" (ISO 8601) | "expiresIn" | "expires_in" (seconds)}`;
  404 or 410 means the platform has deleted the recording.

Secrets: passwords are stored encrypted (crypto.py) and the access token is cached in
Redis encrypted with the same key; neither they nor the links ever reach a log line.
Every platform call goes through `safe_fetch.fetch` (public https hosts only).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

import redis

from config import Config
from models import Clinic
from plumbing import crypto, strict_json
from plumbing.clock import as_utc
from plumbing.crypto import Keys
from safe_fetch import (
    FetchError,
    FetchResult,
    Resolver,
    UnsafeURL,
    check_resolves_public,
    fetch,
    is_retryable_status,
    redact_url,
    validate_url,
)

log = logging.getLogger(__name__)

_MAX_API_BYTES = 64 * 1024
_TOKEN_MARGIN = 30  # seconds: renew a cached token this long before the platform's expiry
_DEFAULT_TOKEN_SECONDS = 300
# The platform's numbers are input: bounded before use (a token cached for a day at most,
# a link trusted for a week at most: S3's own ceiling for presigned links).
_MAX_TOKEN_SECONDS = 86400
_MAX_LINK_SECONDS = 7 * 86400
_RESOLVE_SECONDS = 2.0


@dataclass(frozen=True)
class Credentials:
    clinic_id: str
    api_url: str
    username: str
    password: str = ""

    def __repr__(self) -> str:  # never print the password
        return f"Credentials(clinic_id={self.clinic_id!r}, api_url={redact_url(self.api_url)!r})"

    @property
    def cache_key(self) -> str:
        # Per clinic, and per credential set so that re-onboarding drops the old token.
        digest = hashlib.sha256(f"{self.api_url}\0{self.username}\0{self.password}".encode()).hexdigest()[:16]
        return f"platform-token:{self.clinic_id}:{digest}"


def credentials_of(clinic: Clinic, secret_key: Keys) -> Credentials | None:
    """The clinic's platform API credentials, or None when they were not supplied."""
    if not (clinic.platform_api_url and clinic.platform_username and clinic.platform_password_encrypted):
        return None
    try:
        password = crypto.decrypt(clinic.platform_password_encrypted, secret_key)
    except crypto.InvalidToken:
        log.error(
            "clinic %s: platform password not decryptable with SECRET_KEY or SECRET_KEY_FALLBACKS (re-onboard it)",
            clinic.slug,
        )
        return None
    return Credentials(str(clinic.id), clinic.platform_api_url.rstrip("/"), clinic.platform_username, password)


class RecordingGone(Exception):
    """The platform answered that the recording does not exist (any more)."""


class PlatformError(Exception):
    """The platform refused or answered nonsense. `transient`: retrying later may help.
    The message is safe to log (no token, password, link or query string)."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class FreshLink:
    url: str
    expires_at: datetime


class PlatformClient:
    """Token exchange (cached in Redis until it expires, renewed once on a 401) and the
    fresh-link call, through safe_fetch."""

    def __init__(self, config: Config, connection: redis.Redis, resolver: Resolver | None = None) -> None:
        self.config = config
        self.redis = connection
        self.resolver = resolver  # the system's by default
        self.token_exchanges = 0  # exchanges made by this instance (diagnostics)

    def _fetch(
        self, method: str, url: str, *, headers: dict[str, str] | None = None, body: bytes | None = None
    ) -> FetchResult:
        return fetch(
            method,
            url,
            headers={"Accept": "application/json", **(headers or {})},
            body=body,
            max_bytes=_MAX_API_BYTES,
            timeout=self.config.platform_fetch_timeout,
            max_redirects=0,
            allow_loopback=self.config.unsafe_allow_loopback_fetch,
            ca_certs=self.config.fetch_ca_bundle or None,
            raise_for_status=False,
        )

    # -- token
    def token(self, creds: Credentials, *, renew: bool = False) -> str:
        key = creds.cache_key
        if not renew:
            cached = self._cached(key)
            if cached:
                return cached
        # One exchange at a time per clinic; whoever waited finds the new token cached.
        with self.redis.lock(
            f"{key}:lock",
            timeout=self.config.platform_fetch_timeout + 5,
            blocking_timeout=self.config.platform_fetch_timeout + 5,
        ):
            if not renew:
                cached = self._cached(key)
                if cached:
                    return cached
            token, lifetime = self._exchange(creds)
            ttl = max(1, lifetime - _TOKEN_MARGIN) if lifetime > _TOKEN_MARGIN * 2 else max(1, lifetime // 2)
            self.redis.set(key, crypto.encrypt(token, self.config.secret_keys), ex=ttl)
            return token

    def forget_token(self, creds: Credentials) -> None:
        self.redis.delete(creds.cache_key)

    def _cached(self, key: str) -> str | None:
        raw = self.redis.get(key)
        if not raw:
            return None
        try:
            return crypto.decrypt(raw.decode() if isinstance(raw, bytes) else str(raw), self.config.secret_keys)
        except crypto.InvalidToken:
            return None

    def _exchange(self, creds: Credentials) -> tuple[str, int]:
        url = creds.api_url + self.config.platform_token_path
        body = json.dumps({"username": creds.username, "password": creds.password}).encode()
        self.token_exchanges += 1
        result = self._fetch("POST", url, headers={"Content-Type": "application/json"}, body=body)
        if result.status in (401, 403):
            raise PlatformError(
                f"token exchange refused (HTTP {result.status}) by {redact_url(url)}: "
                "check the clinic's platform username and password",
                transient=False,
            )
        _raise_for_status(result.status, url)
        data = _json(result.content, url)
        token = _first(data, "access_token", "accessToken", "token")
        if not isinstance(token, str) or not token:
            raise PlatformError(f"token exchange at {redact_url(url)} answered no token", transient=False)
        lifetime = _seconds(_first(data, "expires_in", "expiresIn"), _MAX_TOKEN_SECONDS)
        seconds = int(lifetime) if lifetime is not None and lifetime >= 1 else _DEFAULT_TOKEN_SECONDS
        log.info("clinic %s: platform token obtained (valid %ss)", creds.clinic_id, seconds)
        return token, seconds

    # -- link
    def fresh_link(self, creds: Credentials, reference: str, now: datetime) -> FreshLink:
        """A fresh download link for `reference`. Raises RecordingGone (404/410),
        PlatformError, FetchError (transient: timeout, connection, 5xx) or UnsafeURL."""
        path = self.config.platform_recording_path.replace("{recording}", quote(reference, safe=""))
        url = creds.api_url + path
        for attempt in (1, 2):
            token = self.token(creds, renew=attempt == 2)
            result = self._fetch("GET", url, headers={"Authorization": f"Bearer {token}"})
            if result.status == 401 and attempt == 1:
                self.forget_token(creds)
                continue  # expired or revoked early: renew once
            if result.status in (404, 410):
                raise RecordingGone(f"HTTP {result.status} from {redact_url(url)}")
            if result.status in (401, 403):
                raise PlatformError(
                    f"recording request refused (HTTP {result.status}) by {redact_url(url)}", transient=False
                )
            _raise_for_status(result.status, url)
            return _link_from(_json(result.content, url), url, now, self.config, self.resolver)
        raise AssertionError("unreachable")  # pragma: no cover


def _raise_for_status(status: int, url: str) -> None:
    if 200 <= status < 300:
        return
    raise FetchError(f"HTTP {status} from {redact_url(url)}", transient=is_retryable_status(status), status=status)


def _json(content: bytes | None, url: str) -> dict[str, Any]:
    """The platform's JSON object, parsed strictly (no NaN or Infinity, bounded nesting)."""
    try:
        data = strict_json.loads((content or b"").decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        data = None
    if not isinstance(data, dict):
        raise PlatformError(f"{redact_url(url)} did not answer a JSON object", transient=False)
    return data


def _first(data: dict[str, Any], *names: str) -> Any:
    for name in names:
        if data.get(name) is not None:
            return data[name]
    return None


def _seconds(value: Any, most: float) -> float | None:
    """A number of seconds the platform sent, within [0, most]; None when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return min(max(float(value), 0.0), most)


def _link_from(
    data: dict[str, Any], api_url: str, now: datetime, config: Config, resolver: Resolver | None = None
) -> FreshLink:
    """The fresh link in the platform's answer. The link goes to a doctor's browser as a
    302, so it gets the same checks as a `RecordingUrl`: https to a public host name, and
    a name that does not resolve to a private address (one that does not resolve right
    now is let through, as at intake). Its expiry is bounded to `_MAX_LINK_SECONDS`."""
    link = _first(data, "url", "downloadUrl", "link")
    if not isinstance(link, str):
        raise PlatformError(f"{redact_url(api_url)} answered no link", transient=False)
    allow_loopback = config.unsafe_allow_loopback_fetch
    try:
        parts = urlsplit(validate_url(link, allow_loopback=allow_loopback))
        check_resolves_public(
            parts.hostname or "",
            parts.port or 443,
            allow_loopback=allow_loopback,
            resolver=resolver,
            deadline=time.monotonic() + _RESOLVE_SECONDS,
        )
    except UnsafeURL as exc:
        raise PlatformError(f"{redact_url(api_url)} answered an unusable link: {exc.reason}", transient=False) from None
    except FetchError:
        pass
    latest = as_utc(now) + timedelta(seconds=_MAX_LINK_SECONDS)
    expires_at: datetime | None = None
    absolute = _first(data, "expiresAt", "expires_at")
    if isinstance(absolute, str):
        try:
            expires_at = min(as_utc(datetime.fromisoformat(absolute.replace("Z", "+00:00"))), latest)
        except (ValueError, OverflowError):
            expires_at = None
    relative = _seconds(_first(data, "expiresIn", "expires_in"), _MAX_LINK_SECONDS)
    if expires_at is None and relative is not None:
        expires_at = as_utc(now) + timedelta(seconds=relative)
    if expires_at is None:  # the platform did not say: assume what its links usually live
        expires_at = as_utc(now) + timedelta(minutes=config.recording_url_lifetime_minutes)
    return FreshLink(link, expires_at)
