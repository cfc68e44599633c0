"""Logging: one JSON object per line, a request id on every record of a request, and
no secrets from the libraries underneath.

`setup(level, fmt)` is called by the process entry points (`create_app`, the worker). It
always installs the safety rules below; it adds its own stderr handler only when the root
logger has none (like `logging.basicConfig`), so an embedding host (pytest, a REPL) keeps
its handlers.

Safety rules, whatever the level:
- Peewee logs every statement at DEBUG as `(sql, params)`; the parameters carry recording
  URLs with their signatures, token hashes, patient data. A filter on the "peewee" logger
  keeps the SQL text and drops the parameters.
- urllib3, botocore, boto3 and s3transfer log full request URLs (presigned query strings)
  and signed headers at DEBUG: they are held at INFO.
"""

from __future__ import annotations

import contextvars
import ipaddress
import json
import logging
import os
import re
import sys
import time
import uuid
from typing import Any

import falcon

#: The id of the request being handled in this context (each gevent greenlet or thread
#: has its own); None outside.
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
#: The client address of that request (the audit trail's "from where"); None outside.
client_address: contextvars.ContextVar[str | None] = contextvars.ContextVar("client_address", default=None)

_QUIET = ("urllib3", "botocore", "boto3", "s3transfer")
_HEADER = "X-Request-Id"
# Accepted from the caller as is: bounded, and nothing a log reader or shell would
# misread (no spaces, quotes, newlines, control characters).
_VALID_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# LogRecord's own attributes; anything else on a record came from `extra=` and is emitted.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "request_id"}
_MARK = "_clinic_handler"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, request_id, exc, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid:
            entry["request_id"] = rid
        for key in sorted(record.__dict__.keys() - _STANDARD):  # extras (set difference: cheap per line)
            if not key.startswith("_"):
                entry[key] = record.__dict__[key]
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Human-readable lines for local runs (`LOG_FORMAT=text`), request id included."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if not getattr(record, "request_id", None):
            record.request_id = "-"
        return super().format(record)


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every record passing the handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = request_id.get()
        return True


class SqlParametersFilter(logging.Filter):
    """Peewee's `(sql, params)` debug records -> the SQL text alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, tuple) and len(record.msg) == 2 and isinstance(record.msg[0], str):
            record.msg = record.msg[0] + " -- parameters not logged"
            record.args = ()
        return True


def make_handler(fmt: str = "json", stream: Any = None) -> logging.Handler:
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(TextFormatter() if fmt == "text" else JsonFormatter())
    handler.addFilter(RequestIdFilter())
    return handler


def install_safety() -> None:
    """The secret-keeping rules of the module docstring; idempotent."""
    peewee = logging.getLogger("peewee")
    if not any(isinstance(f, SqlParametersFilter) for f in peewee.filters):
        peewee.addFilter(SqlParametersFilter())
    for name in _QUIET:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET or logger.level < logging.INFO:
            logger.setLevel(logging.INFO)


def setup(level: str = "INFO", fmt: str = "json") -> None:
    """Configure process logging (idempotent); see the module docstring."""
    if fmt not in ("json", "text"):
        raise ValueError(f"LOG_FORMAT must be json or text, not {fmt!r}")
    install_safety()
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, _MARK, False)]
    if root.handlers and not ours:
        return  # someone else's logging (pytest, an embedding host): leave it alone
    for handler in ours:
        root.removeHandler(handler)
    handler = make_handler(fmt)
    setattr(handler, _MARK, True)
    root.addHandler(handler)
    root.setLevel(level.upper())


access_log = logging.getLogger("access")


def peer_address(req: falcon.Request, trusted_proxy_hops: int = 0) -> str | None:
    """The client's address: the connection's, or behind `trusted_proxy_hops` proxies that
    each append the address they saw to X-Forwarded-For, the entry that many from the right
    (what the outermost trusted proxy saw; entries left of it are the client's to write).
    A request with fewer entries, or a malformed one, did not come through them: the
    connection's address."""
    if trusted_proxy_hops > 0:
        entries = [e.strip() for e in (req.get_header("X-Forwarded-For") or "").split(",")]
        if len(entries) >= trusted_proxy_hops:
            try:
                return str(ipaddress.ip_address(entries[-trusted_proxy_hops]))
            except ValueError:
                pass
    return (req.remote_addr or "")[:64] or None


class RequestId:
    """Falcon middleware: take a valid `X-Request-Id` or make one, expose it to logging
    for the request, echo it on every answer (errors included), and write the access log
    line (JSON like every other line, with the id and, for an authenticated request, the
    token's id; the query string is never logged, it may hold a presigned signature).
    First in the chain, so its `process_response` runs last, after every other middleware.
    It also sets the client's address (`peer_address`) for the request: the one
    every other part (login throttle, sessions, audit trail) reads."""

    def __init__(self, trusted_proxy_hops: int = 0) -> None:
        self.trusted_proxy_hops = trusted_proxy_hops

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        given = req.get_header(_HEADER)
        rid = given if given is not None and _VALID_ID.fullmatch(given) else uuid.uuid4().hex
        req.context.request_id = rid
        req.context.request_id_token = request_id.set(rid)
        req.context.client_address = peer_address(req, self.trusted_proxy_hops)
        req.context.client_address_token = client_address.set(req.context.client_address)
        req.context.request_started = time.perf_counter()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        rid = getattr(req.context, "request_id", None)
        if rid is None:  # process_request never ran (cannot happen with Falcon's ordering)
            return
        resp.set_header(_HEADER, rid)
        if access_log.isEnabledFor(logging.INFO):
            ms = round((time.perf_counter() - req.context.request_started) * 1000, 2)
            # A route whose path carries a secret (a set-password link's `{token}`) is logged
            # by its template, never by the path itself.
            path = req.uri_template if "{token}" in (req.uri_template or "") else req.path
            # pid: which web process answered (a check that must hold in every process can tell).
            fields = {
                "method": req.method,
                "path": path,
                "route": req.uri_template,
                "status": resp.status_code,
                "duration_ms": ms,
                "pid": os.getpid(),
            }
            token = getattr(req.context, "token", None)  # set by web.auth once the bearer token checked out
            if token is not None:
                fields["token"] = str(token.id)  # its id, which the audit trail names too; never the secret
            access_log.info("%s %s %s %.2fms", req.method, path, resp.status_code, ms, extra=fields)
        request_id.reset(req.context.request_id_token)
        client_address.reset(req.context.client_address_token)
