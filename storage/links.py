"""Cached presigned download links of a request's attachments.

Presigned download links are cached per (attachment, disposition) and handed out
only while they have at least `LINK_MIN_LEFT` seconds to live.

Presigned URLs are credentials: nothing here logs them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from storage.base import Disposition, Storage, ascii_filename

if TYPE_CHECKING:
    from models import MedicalRecord

__all__ = ["LINK_MIN_LEFT", "LINK_SECONDS", "LinkCache"]

LINK_SECONDS = 8 * 3600  # download links: presigned for up to 8 hours
LINK_MIN_LEFT = 30 * 60  # ... and handed out only with at least 30 minutes left


class LinkCache:
    """Presigned download URLs per (attachment, disposition), reused while they have at
    least `min_left` seconds to live. In-process and bounded (LRU): a cache miss only
    costs a signature, and the URLs (credentials) stay out of shared stores."""

    def __init__(
        self,
        storage: Storage,
        *,
        lifetime: int = LINK_SECONDS,
        min_left: int = LINK_MIN_LEFT,
        max_entries: int = 50_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if min_left >= lifetime:
            raise ValueError("min_left must be shorter than lifetime")
        self.storage, self.lifetime, self.min_left = storage, lifetime, min_left
        self.max_entries, self.clock = max_entries, clock
        self._entries: OrderedDict[tuple[uuid.UUID, str], tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def url(self, record: MedicalRecord, disposition: Disposition) -> str:
        key, now = (record.id, disposition), self.clock()
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[1] - now >= self.min_left:
                self._entries.move_to_end(key)
                return hit[0]
        url = self.storage.presign_get(
            record.stored_key,
            self.lifetime,
            content_type=record.content_type,
            disposition=disposition,
            filename=ascii_filename(record.description),
        )
        with self._lock:
            # Backends count whole seconds from the second of signing: assume the worst.
            self._entries[key] = (url, int(now) + self.lifetime - 1)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return url
