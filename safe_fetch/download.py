"""Recordings: recognizing MP3 / WAV by their magic bytes, and `download_audio`,
which fetches one to a file atomically."""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from .addresses import Resolver
from .client import fetch
from .errors import FetchError
from .urls import redact_url

# The package's one logger ("safe_fetch"), whichever module logs.
log = logging.getLogger(__package__)

# --------------------------------------------------------------------------
# Content sniffing
# --------------------------------------------------------------------------

#: Declared media types accepted for recordings.  `application/octet-stream`
#: is listed because `download_audio` always sniffs the magic bytes.
AUDIO_CONTENT_TYPES: frozenset[str] = frozenset(
    {
        "audio/mpeg",
        "audio/mp3",
        "audio/wav",
        "audio/x-wav",
        "audio/wave",
        "application/octet-stream",
    }
)


def sniff_audio(head: bytes) -> str | None:
    """Return `"mp3"`, `"wav"` or `None` from the first bytes of a file."""
    if len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:3] == b"ID3":
        return "mp3"
    # MPEG audio frame sync: 11 set bits, then a valid version / layer.
    if len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0:
        version = (head[1] >> 3) & 0x03
        layer = (head[1] >> 1) & 0x03
        if version != 0x01 and layer != 0x00:
            return "mp3"
    return None


@dataclass
class DownloadResult:
    path: str
    bytes_written: int
    content_type: str
    format: str  # "mp3" or "wav"
    final_url: str


# --------------------------------------------------------------------------
# Downloading
# --------------------------------------------------------------------------


def download_audio(
    url: str,
    dest_path: str | os.PathLike[str],
    *,
    max_bytes: int,
    timeout: float,
    allow_loopback: bool = False,
    headers: Mapping[str, str] | None = None,
    ca_certs: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    resolver: Resolver | None = None,
    max_redirects: int = 3,
) -> DownloadResult:
    """Download an MP3/WAV recording to `dest_path` atomically.

    The body goes to a temporary file in the same directory, is fsynced and
    renamed over `dest_path` only when complete and valid; on any failure
    the temporary file is removed and `dest_path` is left untouched.
    Accepts `AUDIO_CONTENT_TYPES`; the magic bytes must always look
    like MP3 (ID3 / frame sync) or WAV (RIFF....WAVE), whatever the declared
    type -- which is what makes `application/octet-stream` acceptable.
    """
    dest_path = os.fspath(dest_path)
    directory = os.path.dirname(os.path.abspath(dest_path))
    fd, tmp = tempfile.mkstemp(prefix=".part-", suffix=".download", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            result = fetch(
                "GET",
                url,
                headers=headers,
                max_bytes=max_bytes,
                timeout=timeout,
                allowed_content_types=AUDIO_CONTENT_TYPES,
                sniff=sniff_audio,
                max_redirects=max_redirects,
                allow_loopback=allow_loopback,
                dest=fh,
                ca_certs=ca_certs,
                ssl_context=ssl_context,
                resolver=resolver,
            )
            if result.bytes_written == 0:
                raise FetchError(f"empty body from {redact_url(url)}", transient=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest_path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    log.info("downloaded %d bytes from %s", result.bytes_written, redact_url(result.final_url))
    assert result.sniffed is not None
    return DownloadResult(
        path=dest_path,
        bytes_written=result.bytes_written,
        content_type=result.content_type,
        format=result.sniffed,
        final_url=result.final_url,
    )
