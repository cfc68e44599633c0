"""The two exceptions of `safe_fetch`, and which HTTP error answers are worth retrying."""

from __future__ import annotations


class UnsafeURL(ValueError):
    """The URL (or what it resolves / redirects to) is not allowed.

    Always permanent: retrying cannot help.  `str(exc)` is safe to log and
    to return to an API client (it never contains a query string).
    """

    transient = False
    status: int | None = None

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FetchError(Exception):
    """The fetch failed.

    `transient` tells a job whether retrying later may succeed (timeouts,
    connection errors, 5xx, 429) or not (other 4xx, too large, wrong type).
    `status` is the HTTP status when the failure is an HTTP answer.
    """

    def __init__(self, message: str, transient: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.status = status


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP error answer may succeed if the request is retried later.

    5xx, 408 (Request Timeout), 425 (Too Early) and 429 (Too Many Requests)
    are; every other status is permanent.  This is `FetchError.transient`
    for an HTTP answer, for `safe_fetch.fetch` and for its callers that
    judge statuses themselves (`raise_for_status=False`).
    """
    return status >= 500 or status in (408, 425, 429)
