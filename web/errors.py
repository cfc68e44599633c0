"""One error family, one serializer: every non-2xx body is `{"error", "code"}`.

The domain's refusals (`plumbing.errors`: Invalid, NotFound, ...) are mapped to statuses in
one table here (`DOMAIN_STATUSES`); Falcon's own errors (unknown route, wrong method,
malformed JSON, ...) go through the same serializer; `DoesNotExist`, `IntegrityError`, the database being unreachable
(`OperationalError`, `InterfaceError`) and every pooled connection being in use
(`MaxConnectionsExceeded`), both 503 with `Retry-After`, are mapped here, centrally, and
anything unexpected becomes a logged 500 `INTERNAL_ERROR` that leaks nothing.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon
import peewee as pw
from playhouse.pool import MaxConnectionsExceeded

from plumbing.errors import Conflict, DomainError, Forbidden, Gone, Invalid, NotFound, TooMany
from plumbing.logs import loggable_path

log = logging.getLogger(__name__)

# Status -> code for errors raised without an explicit code (Falcon's own included).
_DEFAULT_CODES = {
    400: "VALIDATION_FAILED",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT",
    409: "CONFLICT",
    410: "GONE",
    411: "LENGTH_REQUIRED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    416: "RANGE_NOT_SATISFIABLE",
    429: "TOO_MANY_REQUESTS",
    503: "SERVICE_UNAVAILABLE",
}


class APIError(falcon.HTTPError):
    """An API error: HTTP status, stable machine-readable code, human message."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        # Falcon types `code` as an int, but any JSON value is allowed: ours is the stable word.
        super().__init__(falcon.code_to_http_status(status), title=message, code=code, headers=headers)  # type: ignore[arg-type]
        self.extra = extra

    def to_dict(self, obj_type: type = dict) -> dict[str, Any]:
        return {"error": self.title, "code": self.code, **self.extra}


#: The domain's refusals and the statuses the API answers them with (the body keeps their
#: code, message and data; `retry_after` becomes the Retry-After header).
DOMAIN_STATUSES: dict[type[DomainError], int] = {
    Invalid: 400,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Gone: 410,
    TooMany: 429,
}


def from_domain(exc: DomainError) -> APIError:
    """The API's answer to a domain refusal (`DOMAIN_STATUSES`)."""
    status = next(code for kind, code in DOMAIN_STATUSES.items() if isinstance(exc, kind))
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return APIError(status, exc.code, exc.message, headers=headers, **exc.data)


def validation_failed(message: str, *, param: str | None = None) -> APIError:
    """400 VALIDATION_FAILED; `param` names the field (web/schemas/common.py's `Error`)."""
    extra: dict[str, Any] = {"param": param} if param is not None else {}
    return APIError(400, "VALIDATION_FAILED", message, **extra)


def body_too_slow(seconds: float) -> APIError:
    """408: the request body did not arrive within its deadline (`web.middleware.Deadline`)."""
    return APIError(408, "REQUEST_TIMEOUT", f"The request body did not arrive within {seconds:g} seconds.")


def _body(req: falcon.Request, ex: falcon.HTTPError) -> dict[str, Any]:
    if isinstance(ex, APIError):
        return ex.to_dict()
    status = ex.status_code
    code = (
        ex.code
        if isinstance(ex.code, str) and ex.code
        else _DEFAULT_CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "ERROR")
    )
    # Falcon's titles are the bare status line ("404 Not Found"); say something useful.
    if ex.description:
        message = ex.description
    elif status == 404:
        message = "No such path."
    elif status == 405:
        message = f"Method {req.method} is not allowed here."
    else:
        message = ex.title or "Error"
    return {"error": message, "code": code}


def serialize(req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError) -> None:
    """Falcon error serializer: always JSON, whatever the client accepts."""
    resp.content_type = falcon.MEDIA_JSON
    resp.text = json.dumps(_body(req, ex))


def _not_found(req: falcon.Request, resp: falcon.Response, ex: pw.DoesNotExist, params: dict) -> None:
    # A model lookup that found nothing; resources raise specific codes where it matters.
    raise APIError(404, "NOT_FOUND", "No such resource.")


def _domain(req: falcon.Request, resp: falcon.Response, ex: DomainError, params: dict) -> None:
    raise from_domain(ex)


def _integrity(req: falcon.Request, resp: falcon.Response, ex: pw.IntegrityError, params: dict) -> None:
    log.info("integrity error on %s %s: %s", req.method, loggable_path(req), type(ex).__name__)
    raise APIError(409, "CONFLICT", "The request conflicts with existing data.")


SAFE_TO_RETRY = "safe to retry"
CHECK_FIRST = (
    "the request or document may have been stored: retry with the same Idempotency-Key, or check "
    "with patientRequests/search or the request detail before retrying"
)
RETRY_WITH_KEY = "safe to retry with the same Idempotency-Key"


def retry_advice(req: falcon.Request) -> str:
    """What a 5xx tells the client about retrying (the signed-documents retry rules): a
    create or a registration may have been stored before the failure, and retrying it
    blindly makes a duplicate unless it carries the first one's Idempotency-Key
    (web/idempotency.py); everything else is safe to retry. A resource names its methods
    that write once in `not_idempotent` (web.middleware.RetryAdvice reads it)."""
    if not getattr(req.context, "not_idempotent", False):
        return SAFE_TO_RETRY
    return RETRY_WITH_KEY if getattr(req.context, "idempotency", None) is not None else CHECK_FIRST


def _database_unavailable(req: falcon.Request, resp: falcon.Response, ex: Exception, params: dict) -> None:
    # The database is down, restarting or dropped the connection: nothing was claimed,
    # the pool discards the broken connection, and the client should simply retry.
    # The driver's first line ("connection refused", "server closed the connection", ...)
    # names no secret; the DSN's password is never part of it.
    detail = (str(ex).strip().splitlines() or [""])[0][:200]
    log.warning("database unavailable on %s %s: %s: %s", req.method, loggable_path(req), type(ex).__name__, detail)
    raise APIError(
        503, "SERVICE_UNAVAILABLE", f"Database unavailable; {retry_advice(req)}.", headers={"Retry-After": "2"}
    )


def _pool_exhausted(req: falcon.Request, resp: falcon.Response, ex: MaxConnectionsExceeded, params: dict) -> None:
    # Every pooled connection stayed in use for the pool's whole wait: the database is
    # slow, or more requests query at once than DB_POOL_SIZE serves. Nothing was done;
    # a retry shortly after is the remedy, not a 500.
    log.warning("database pool exhausted on %s %s", req.method, loggable_path(req))
    raise APIError(503, "SERVICE_UNAVAILABLE", "The service is busy; safe to retry.", headers={"Retry-After": "2"})


def _unexpected(req: falcon.Request, resp: falcon.Response, ex: Exception, params: dict) -> None:
    if isinstance(ex, falcon.HTTPError):
        raise ex
    log.exception("unhandled error on %s %s", req.method, loggable_path(req))
    raise APIError(500, "INTERNAL_ERROR", f"Internal error; {retry_advice(req)}.")


def install(app: falcon.App) -> None:
    app.set_error_serializer(serialize)
    app.add_error_handler(Exception, _unexpected)
    app.add_error_handler(DomainError, _domain)
    app.add_error_handler(pw.DoesNotExist, _not_found)
    app.add_error_handler(pw.IntegrityError, _integrity)
    for database_error in (pw.OperationalError, pw.InterfaceError):
        app.add_error_handler(database_error, _database_unavailable)
    app.add_error_handler(MaxConnectionsExceeded, _pool_exhausted)
