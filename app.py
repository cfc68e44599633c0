"""WSGI application factory: routes, middleware and error handling."""
from __future__ import annotations

import io
import logging
import urllib.parse

import falcon
import peewee as pw
from rq import Queue

from web import errors
from plumbing import logs
from plumbing import metrics
from web import openapi
from plumbing import strict_json
from web.auth import TokenAuth
from plumbing.row_cache import RowCache
from config import Config
from storage.links import LinkCache
from web.errors import APIError
from models import MedicalRecord
from switchboard.intake import GroupCommit
from jobs import queueing
from voicemail.player import RecordingPlayer
from plumbing.database import bind_database, db
from resources import meta, switchboard
from resources import catalog, patient_requests, patients
from resources.storage_objects import StoredObject
from storage import LocalStorage, Readable, make_storage

log = logging.getLogger(__name__)


class DatabaseConnection:
    """At most one pooled connection per request, returned to the pool when the answer is
    out. Taken at the first query (Peewee's autoconnect), not up front: a call hand-off
    whose token is cached and whose row another request's group commit writes needs none."""

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool) -> None:
        if not db.is_closed():
            db.close()


class TakeTurns:
    """Under gevent, each request first lets the other connections' requests run.

    A check answered from memory never waits on I/O, and a keep-alive connection whose
    client sends its next request at once finds it already readable: gevent does not
    yield there, so one connection's requests ran back to back while the others of the
    process waited (p99 of a cached check 400-800 ms against 100 ms for one that
    queries, at 32 connections; bench/routing_bench.py). Yielding once per request
    puts it behind the others; outside gevent there is nothing to yield to."""

    def __init__(self) -> None:
        self._yield = None
        try:
            from gevent import monkey, sleep
        except ImportError:
            return
        if monkey.is_module_patched("socket"):
            self._yield = sleep

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self._yield is not None:
            self._yield(0)


class BodyLimit:
    """Refuse a body over the limit without reading it whole.

    A declared length over the limit is refused before a byte is read. A body without
    one (chunked transfer encoding) is read here, at most limit + 1 bytes, and handed
    on with its length, so the JSON handler sees an ordinary body; Falcon alone would
    read such a body as empty. Servers that cannot tell where a chunked body ends
    (`wsgi.input_terminated` unset) get 411 instead of a read that could hang.

    Not for `/storage/` (local backend uploads): those stream to disk under their own
    cap, `LocalStorage.max_upload_bytes`, checked after the signature, before reading.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.path.startswith("/storage/"):
            return
        if req.content_length is not None:
            if req.content_length > self.max_bytes:
                raise APIError(413, "PAYLOAD_TOO_LARGE", f"Body over {self.max_bytes} bytes.")
            return
        if req.get_header("Transfer-Encoding") is None:
            return  # no body at all
        if not req.env.get("wsgi.input_terminated"):
            raise APIError(411, "LENGTH_REQUIRED", "Send a Content-Length with the body.")
        body = read_at_most(req.stream, self.max_bytes + 1)
        if len(body) > self.max_bytes:
            raise APIError(413, "PAYLOAD_TOO_LARGE", f"Body over {self.max_bytes} bytes.")
        req.env["wsgi.input"] = io.BytesIO(body)
        req.env["CONTENT_LENGTH"] = str(len(body))


def read_at_most(stream: Readable, limit: int) -> bytes:
    """Up to `limit` bytes of `stream`, in pieces (a WSGI input may return short reads)."""
    pieces, size = [], 0
    while size < limit:
        piece = stream.read(min(64 * 1024, limit - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    return b"".join(pieces)


class NoNulInUrl:
    """400 for a NUL character in the (decoded) path or query string: no slug, id, key or
    parameter holds one, and PostgreSQL refuses it in a lookup, which would be a 500."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if "\x00" in req.path or "\x00" in urllib.parse.unquote(req.query_string or ""):
            raise APIError(400, "VALIDATION_FAILED", "The URL contains a NUL character.")


def create_app(config: Config) -> falcon.App:
    logs.setup(config.log_level, config.log_format)
    database: pw.Database = bind_database(config.database_url, pool_size=config.db_pool_size)
    queue_redis = queueing.redis_client(config.redis_url, "web")

    # Request id and metrics first (after the turn taking, which has no response side):
    # their process_response run last, so every answer (other middleware's errors
    # included) carries the id and gets timed.
    flusher = metrics.Flusher(queueing.redis_client(config.redis_url, "metrics"), config.metrics_flush_seconds)
    # Token rows and the clinics' routing schedules (schedules.py), kept current by NOTIFY.
    cache = RowCache.for_database(database)
    app = falcon.App(middleware=[TakeTurns(), logs.RequestId(), metrics.RequestMetrics(flusher), NoNulInUrl(),
                                 BodyLimit(config.max_body_bytes), DatabaseConnection(),
                                 TokenAuth(config.clock, cache)])
    app.req_options.strip_url_path_trailing_slash = True
    # JSON only: Falcon would also parse form bodies, which `curl -d` sends by default,
    # and a JSON text read as a form key fails confusingly later. Answer 415 instead.
    app.req_options.media_handlers = falcon.media.Handlers(
        {falcon.MEDIA_JSON: falcon.media.JSONHandler(loads=strict_json.loads)})
    errors.install(app)

    sb = openapi.SWITCHBOARD
    app.add_route(f"{sb}/is-clinic-opened", switchboard.IsClinicOpened(config.clock, cache))
    app.add_route(f"{sb}/is-on-vacation", switchboard.IsOnVacation(config.clock, cache))
    app.add_route(f"{sb}/has-active-request", switchboard.HasActiveRequest())
    app.add_route(f"{sb}/recording-complete", switchboard.RecordingComplete(config, GroupCommit()))
    storage = make_storage(config)
    if isinstance(storage, LocalStorage):  # S3 serves its own presigned URLs
        app.add_route("/storage/{key:path}", StoredObject(storage, MedicalRecord.is_registered))
    clinic = openapi.CLINIC  # signed documents (spec/signed-documents.md)
    request = f"{clinic}/patientRequests/{{request_id}}"
    app.add_route(f"{clinic}/patientRequestTypes/search", catalog.RequestTypeSearch())
    app.add_route(f"{clinic}/tags", catalog.Tags())
    app.add_route(f"{clinic}/patients/search", patients.PatientSearch())
    app.add_route(f"{clinic}/patients/import", patients.PatientImport())
    app.add_route(f"{clinic}/patients/import-bulk", patients.PatientImportBulk())
    app.add_route(f"{clinic}/patientRequests/create", patient_requests.RequestCreate())
    app.add_route(f"{clinic}/patientRequests/search", patient_requests.RequestSearch())
    player = RecordingPlayer(config, Queue(queueing.RECORDINGS, connection=queue_redis))
    app.add_route(request, patient_requests.RequestDetail(LinkCache(storage), player, config.clock))
    app.add_route(f"{request}/recording", patient_requests.RequestRecording(player, config.clock))
    app.add_route(f"{request}/attachments/upload-link", patient_requests.UploadLink(storage))
    app.add_route(f"{request}/attachments", patient_requests.Attachments(storage))
    app.add_route("/openapi.json", meta.OpenAPIDocument(lambda: openapi.document(config.public_base_url)))
    app.add_route("/healthz", meta.Healthz(database, queue_redis))
    app.add_route("/metrics", metrics.MetricsEndpoint(queue_redis, list(queueing.QUEUES), config.metrics_token))
    return app
