"""Logging: one JSON object per line, a request id on every record of a request, and
no secrets and no patient data, from the service or the libraries underneath.

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
- markdown-it-py traces every block rule it tries at DEBUG (about 7,000 lines each time a
  process renders the staff guides, at its start): held at INFO, so that a DEBUG log is
  the service's, not a parser's.
- gunicorn logs a failed request's URI (its path and query) and a malformed request line
  as it came: a filter on "gunicorn.error" puts the path's loggable form (`unrouted_path`)
  in their place.
- A database error's text quotes the values of the row or statement (PostgreSQL's
  `DETAIL:  Key (phone)=(+420...)`, `LINE 1: ... '...'`): the formatters drop those lines
  from every exception and message they write (RQ puts a failed job's traceback in its
  message).

A request's path reaches a log only as `loggable_path(req)`: its route's template, with
only the parameters the app names as showable filled in (`PathNames`), or for a path no
route matches, its first segment and a short hash (`unrouted_path`). Every other logged
value is an id, a count, a duration or a short hash (`short_hash`), never a secret, a
phone number, a name, an e-mail address, a note or a transcript.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import ipaddress
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import falcon

#: The id of the request being handled in this context (each gevent greenlet or thread
#: has its own); None outside.
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
#: The client address of that request (the audit trail's "from where"); None outside.
client_address: contextvars.ContextVar[str | None] = contextvars.ContextVar("client_address", default=None)

_QUIET = ("urllib3", "botocore", "boto3", "s3transfer", "markdown_it")
_HEADER = "X-Request-Id"
# Accepted from the caller as is: bounded, and nothing a log reader or shell would
# misread (no spaces, quotes, newlines, control characters).
_VALID_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# LogRecord's own attributes; anything else on a record came from `extra=` and is emitted.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "request_id"}
_MARK = "_clinic_handler"


def short_hash(text: str) -> str:
    """The first 8 hex digits of the SHA-256 of `text` (UTF-8): tells two values in logs
    apart, and lets one who holds a value find its lines, without showing it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


# The lines of a database error that quote values: PostgreSQL's DETAIL (a unique key's
# values), LINE n (the statement as sent, parameters interpolated by psycopg2) and the
# caret under it.
_QUOTING_LINES = re.compile(r"^(?:DETAIL: .*|LINE \d+: .*|\s*\^)$\n?", re.MULTILINE)


def without_quoted_values(text: str) -> str:
    """Exception text with the lines a database error quotes values in dropped."""
    return _QUOTING_LINES.sub("", text) if "DETAIL: " in text or "LINE " in text else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, request_id, exc, extras."""

    def formatException(self, ei: Any) -> str:
        return without_quoted_values(super().formatException(ei))

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            # A message may hold a traceback too (RQ writes a failed job's into its message).
            "message": without_quoted_values(record.getMessage()),
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
        return without_quoted_values(super().format(record))


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


_GUNICORN_URI = re.compile(r"^Error handling request")
_GUNICORN_INVALID = re.compile(r"^(Invalid request from ip=[^:]*: )(.*)$", re.DOTALL)
_QUOTED = re.compile(r"'[^']*'")


class GunicornRequestFilter(logging.Filter):
    """gunicorn's "Error handling request <method> <uri>" -> the URI's loggable path; its
    "Invalid request from ip=...: <what was wrong> '<the request line>'" -> the quoted
    part as a short hash (a request line carries a path, and a path may carry a secret)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and _GUNICORN_URI.match(record.msg) and record.args:
            args = tuple(record.args) if isinstance(record.args, tuple) else (record.args,)
            record.args = (*args[:-1], unrouted_path(str(args[-1]).split("?", 1)[0]))
        elif isinstance(record.msg, str):
            invalid = _GUNICORN_INVALID.match(record.getMessage())
            if invalid:
                said = _QUOTED.sub(lambda quoted: f"'#{short_hash(quoted.group(0)[1:-1])}'", invalid.group(2))
                record.msg, record.args = invalid.group(1) + said, ()
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
    gunicorn = logging.getLogger("gunicorn.error")
    if not any(isinstance(f, GunicornRequestFilter) for f in gunicorn.filters):
        gunicorn.addFilter(GunicornRequestFilter())


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

#: A router's `find` (falcon's CompiledRouter.find): (resource, methods, params, template) or None.
Find = Callable[[str], "tuple[Any, Any, dict[str, Any], str | None] | None"]
#: Shapes of route parameter values a log may show: a clinic slug (with a letter: a value
#: of digits alone could be a phone number), an id, a file name of the service's own.
SLUG = re.compile(r"(?=[a-z0-9-]*[a-z])[a-z0-9][a-z0-9-]{0,62}")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
FILE_NAME = re.compile(r"(?=[a-z0-9._-]*[a-z])[a-z0-9][a-z0-9._-]{0,62}")
_PARAMETER = re.compile(r"\{(\w+)(?::[^{}]*)?\}")


def unrouted_path(path: str, prefixes: Iterable[str] = ()) -> str:
    """A path no route matches, as logs may hold it: its first segment when that is one
    of `prefixes` (the first segments of the app's routes, "console", "external"...),
    then `…#` and the short hash of the whole path. Never more of it: a client's path may
    hold anything (a link's secret, a phone number)."""
    if path in ("", "/"):
        return "/"
    first, _, rest = path[1:].partition("/") if path.startswith("/") else ("", "", path)
    if first in prefixes and not rest:
        return path
    return f"{'/' + first if first in prefixes else ''}/…#{short_hash(path)}"


class PathNames:
    """How logs name a request's path: the template of the route `find` matches it to,
    whether or not the request reached routing (a form the CSRF check refuses, a token
    the auth refuses, a body too large: refused before routing, the path would otherwise
    be logged as it came), with the values of the parameters named in `shown` filled in
    when they have their shape (`{name: pattern}`); every other parameter stays `{name}`
    (a set-password link's token, a storage key). A path no route matches:
    `unrouted_path` with the routes' first segments, `prefixes`."""

    def __init__(
        self, find: Find | None = None, shown: Mapping[str, re.Pattern[str]] | None = None, prefixes: Iterable[str] = ()
    ) -> None:
        self.find = find
        self.shown = dict(shown or {})
        self.prefixes = frozenset(prefixes)

    def of(self, path: str) -> str:
        return self.named(path)[0]

    def named(self, path: str, routed: tuple[str, dict[str, Any]] | None = None) -> tuple[str, str | None]:
        """(the loggable path, the template of the route it matches or None). `routed`:
        the template and parameters routing found for it already (no second match)."""
        if routed is None:
            match = self.find(path) if self.find is not None else None
            if match is None or match[3] is None:
                return unrouted_path(path, self.prefixes), None
            routed = match[3], match[2]
        template, params = routed
        shown: list[str] = []
        for literal, name in _pieces(template):
            shown.append(literal)
            if name is not None:
                value, shape = params.get(name), self.shown.get(name)
                if isinstance(value, str) and shape is not None and shape.fullmatch(value):
                    shown.append(value)
                else:
                    shown.append("{" + name + "}")
        return "".join(shown), template


@functools.lru_cache(maxsize=512)
def _pieces(template: str) -> tuple[tuple[str, str | None], ...]:
    """A route template as (literal text, the parameter after it or None) pairs; the app has
    a few dozen templates, each split once."""
    pieces: list[tuple[str, str | None]] = []
    at = 0
    for parameter in _PARAMETER.finditer(template):
        pieces.append((template[at : parameter.start()], parameter.group(1)))
        at = parameter.end()
    pieces.append((template[at:], None))
    return tuple(pieces)


_NO_ROUTES = PathNames()


def loggable_path(req: falcon.Request) -> str:
    """`req`'s path as a log may hold it (`PathNames.of`, with the app's routes once
    `RequestId` has seen the request); the one form every log line that names a path uses."""
    names = getattr(req.context, "path_names", None) or _NO_ROUTES
    return names.of(req.path)


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
    token's id). The line's path is `loggable_path` (the route's template, also for an
    answer refused before routing, with `paths` naming the app's routes), never the path
    as it came nor the query string (a set-password link's token, a presigned signature).
    First in the chain, so its `process_response` runs last, after every other middleware.
    It also sets the client's address (`peer_address`) for the request: the one
    every other part (login throttle, sessions, audit trail) reads."""

    def __init__(self, trusted_proxy_hops: int = 0, paths: PathNames | None = None) -> None:
        self.trusted_proxy_hops = trusted_proxy_hops
        self.paths = paths or _NO_ROUTES

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        given = req.get_header(_HEADER)
        rid = given if given is not None and _VALID_ID.fullmatch(given) else uuid.uuid4().hex
        req.context.request_id = rid
        req.context.path_names = self.paths
        req.context.request_id_token = request_id.set(rid)
        req.context.client_address = peer_address(req, self.trusted_proxy_hops)
        req.context.client_address_token = client_address.set(req.context.client_address)
        req.context.request_started = time.perf_counter()

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object, params: dict) -> None:
        # What routing found: the access line fills its path in without matching it again.
        req.context.route_params = params

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        rid = getattr(req.context, "request_id", None)
        if rid is None:  # process_request never ran (cannot happen with Falcon's ordering)
            return
        resp.set_header(_HEADER, rid)
        if access_log.isEnabledFor(logging.INFO):
            ms = round((time.perf_counter() - req.context.request_started) * 1000, 2)
            params = getattr(req.context, "route_params", None)
            routed = (req.uri_template, params) if req.uri_template is not None and params is not None else None
            path, route = self.paths.named(req.path, routed)
            # pid: which web process answered (a check that must hold in every process can tell).
            fields = {
                "method": req.method,
                "path": path,
                "route": req.uri_template or route,
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
