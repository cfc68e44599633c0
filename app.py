"""WSGI application factory: the middleware and the routes, in the order they apply."""

from __future__ import annotations

import logging
from typing import Any

import falcon
from rq import Queue

import migrations
from config import Config, prepare_process_environment
from console import (
    account,
    assets,
    audit,
    inbox,
    keys,
    login,
    pages,
    patient,
    reads,
    rendering,
    settings,
    team,
    webhooks,
)
from console import help as guides
from console import request as request_page
from console.flash import Flash
from console.middleware import ConsoleSession
from console.once import OnceOnly
from console.throttle import LoginThrottle, ResetThrottle
from jobs import queueing
from jobs.playback import RecordingPlayer
from models import MedicalRecord
from plumbing import clock, logs, metrics, strict_json
from plumbing.database import bind_database
from plumbing.row_cache import REQUESTS_CHANNEL, RowCache
from resources import api_reference, catalog, change_events, meta, patient_requests, patients, switchboard
from resources.storage_objects import StoredObject
from staff import passwords, sessions
from storage import LocalStorage, make_storage
from storage.links import LinkCache
from switchboard.intake import GroupCommit
from web import deprecations, errors, openapi
from web import metrics as web_metrics
from web.auth import TokenAuth
from web.handoff_refusals import HandoffRefusals
from web.idempotency import IdempotencyKeys, KeyTaken
from web.middleware import (
    AnswerBy,
    BodyLimit,
    DatabaseConnection,
    NoNulInUrl,
    RetryAdvice,
    SchemaGate,
    TakeTurns,
)
from web.rate_limit import RateLimit, RateLimiter
from web.security import SecurityHeaders

log = logging.getLogger(__name__)
# The console routes' field of a request's id (console/pages.py builds routes and links alike).
_REQUEST = "{request_id}"

#: Route parameters a log line shows by value, when the value has the shape given: clinic
#: slugs, ids and the service's own file names. Every other parameter (a set-password
#: link's token, a storage key) is named, never shown (plumbing/logs.py: PathNames).
LOGGED_PARAMETERS = {
    "clinic_slug": logs.SLUG,
    "request_id": logs.UUID,
    "patient_id": logs.UUID,
    "document_id": logs.UUID,
    "token_id": logs.UUID,
    "name": logs.FILE_NAME,
}


def create_app(config: Config) -> falcon.App:
    logs.setup(config.log_level, config.log_format)
    clock.use(config.clock)  # what asks for "now" without being handed the clock reads this one
    prepare_process_environment()
    for notice in config.notices:  # former variable names still in use (config.py)
        log.warning(notice)
    database = bind_database(config.database_url, pool_size=config.db_pool_size, pool_wait=config.db_pool_wait_seconds)
    queue_redis = queueing.redis_client(config.redis_url, "web")
    # This process's metrics, counted by the middleware and the resources that are handed it,
    # added to Redis by the flusher's thread (plumbing/metrics.py).
    recorder = metrics.Recorder()
    flusher = metrics.Flusher(
        queueing.redis_client(config.redis_url, "metrics"), config.metrics_flush_seconds, recorder
    )
    # Token rows and routing schedules, kept current by NOTIFY; through a database outage the
    # routing checks answer from the last known state, up to ROUTING_LAST_KNOWN_SECONDS old.
    # A lookup's database read waits at most ROUTING_DEADLINE_SECONDS (AnswerBy: all of a check's).
    cache = RowCache.for_database(
        database,
        max_stale=config.routing_last_known_seconds,
        deadline=config.routing_deadline_seconds,
        recorder=recorder,
    )
    # The clinics' open requests by caller (has-active-request), kept current by their own
    # NOTIFY channel; never answered from a last known state.
    open_requests = RowCache.for_database(
        database, channel=REQUESTS_CHANNEL, max_stale=0, deadline=config.routing_deadline_seconds
    )
    storage = make_storage(config)
    player = RecordingPlayer(config, Queue(queueing.RECORDINGS, connection=queue_redis))
    limiter = RateLimiter(
        queueing.redis_client(config.redis_url, "limits"),
        {"handoffs": config.rate_limit_handoffs_per_minute, "writes": config.rate_limit_writes_per_minute},
    )
    renderer = rendering.Renderer()
    passwords.warm_up()  # the console's logins: an unknown e-mail costs a wrong password's time
    help_pages = guides.Guides()  # docs/staff/*.md, rendered once
    session_lifetime = sessions.Lifetime.of(config.console_session_idle_hours, config.console_session_max_hours)
    throttle = LoginThrottle(queue_redis, config.console_login_max_failures, config.console_login_window_seconds)
    flash = Flash(queue_redis, config.secret_keys)
    trust = config.trust_forwarded_proto
    idempotency = IdempotencyKeys(queue_redis, config.idempotency_key_hours, config.clock)

    sb, clinic = openapi.SWITCHBOARD, openapi.CLINIC
    calls = GroupCommit(deadline=config.handoff_deadline_seconds)  # a hand-off waits at most this for its row
    one_request = f"{clinic}/patientRequests/{{request_id}}"
    routes = [
        (f"{sb}/is-clinic-opened", switchboard.IsClinicOpened(config.clock, cache)),
        (f"{sb}/is-on-vacation", switchboard.IsOnVacation(config.clock, cache)),
        (f"{sb}/has-active-request", switchboard.HasActiveRequest(cache, open_requests)),
        (f"{sb}/recording-complete", switchboard.RecordingComplete(config, calls, recorder)),
        (f"{clinic}/patientRequestTypes/search", catalog.RequestTypeSearch()),
        (f"{clinic}/tags", catalog.Tags()),
        (f"{clinic}/events", change_events.Events()),
        (f"{clinic}/patients/search", patients.PatientSearch(config.clock)),
        (f"{clinic}/patients/import", patients.PatientImport(config.clock)),
        (f"{clinic}/patients/import-bulk", patients.PatientImportBulk(config.clock)),
        (f"{clinic}/patientRequests/create", patient_requests.RequestCreate(config.clock)),
        (f"{clinic}/patientRequests/search", patient_requests.RequestSearch(config.clock)),
        (one_request, patient_requests.RequestDetail(LinkCache(storage), player, config.clock)),
        (f"{one_request}/recording", patient_requests.RequestRecording(player, config.clock)),
        (
            f"{one_request}/attachments/upload-link",
            patient_requests.UploadLink(storage, config.upload_links_per_clinic, config.clock),
        ),
        (f"{one_request}/attachments", patient_requests.Attachments(storage, config.clock)),
        (
            "/openapi.json",
            meta.OpenAPIDocument(openapi.document, config.public_base_url, trust, config.trusted_proxy_hops),
        ),
        (api_reference.PREFIX, api_reference.ApiReference()),
        (api_reference.PREFIX + "/assets/{name}", api_reference.ApiReferenceAsset()),
        (api_reference.ErrorTable.PATH, api_reference.ErrorTable()),
        (pages.PREFIX, inbox.Inbox(renderer, config.clock, player)),
        (pages.ROWS, inbox.InboxRows(renderer, config.clock, player)),
        (pages.request(_REQUEST), request_page.RequestPage(renderer, LinkCache(storage), player, config.clock)),
        (pages.request_note(_REQUEST), request_page.RequestNote(config.clock)),
        (pages.request_tags(_REQUEST), request_page.RequestTags(config.clock)),
        (pages.request_transcript(_REQUEST), request_page.RequestTranscript(config.clock)),
        (pages.request_resolution(_REQUEST), request_page.RequestResolution(config.clock)),
        (pages.request_type(_REQUEST), request_page.RequestTypeChoice(config.clock)),
        (pages.request_urgent(_REQUEST), request_page.RequestUrgentClear(config.clock)),
        (pages.recording(_REQUEST), recording := request_page.ConsoleRecording(renderer, player, config.clock)),
        (pages.document(_REQUEST, "{document_id}"), request_page.ConsoleDocument(LinkCache(storage), config.clock)),
        (pages.LOGIN, login.ConsoleLogin(renderer, throttle, config.clock, trust, config.mail_enabled)),
        (
            pages.FORGOT,
            login.ForgotPassword(
                renderer,
                ResetThrottle(queue_redis),
                config.clock,
                trust,
                config.mail_enabled,
                config.console_reset_link_minutes,
            ),
        ),
        (pages.LOGIN_CODE, login.ConsoleLoginCode(renderer, throttle, config.clock, config.secret_keys, trust, flash)),
        (pages.password_link("{token}"), login.SetPasswordPage(renderer, config.clock, trust)),
        (pages.ACCOUNT, account.AccountPage(renderer, throttle, config.clock, config.mail_enabled)),
        (pages.TWO_FACTOR, account.TwoFactorPage(renderer, config.clock, config.secret_keys, trust, flash)),
        (pages.LOGOUT, login.ConsoleLogout()),
        (pages.LANGUAGE, account.ConsoleLanguage()),
        (pages.static("{name}"), assets.ConsoleStatic(rendering.HERE / "static")),
        (pages.SETTINGS, settings.SettingsIndex(renderer)),
        *[
            (page.path, page(renderer, config.secret_keys, config.clock, cache))
            for page in (
                settings.OfficeHoursPage,
                settings.CalendarsPage,
                settings.CallsPage,
                settings.RequestTypesPage,
                settings.RetentionPage,
            )
        ],
        # The API keys (a settings section) and the audit list.
        (pages.API_KEYS, keys.ApiKeys(renderer, config.clock)),
        (pages.api_key_rotation("{token_id}"), keys.ApiKeyRotation(renderer, config.clock)),
        (pages.api_key_revocation("{token_id}"), keys.ApiKeyRevocation(renderer, config.clock)),
        (pages.WEBHOOKS, webhooks.Webhooks(renderer, config, config.clock)),
        (pages.webhook_action("{endpoint_id}"), webhooks.WebhookAction(renderer, config, config.clock)),
        (pages.webhook_send_again("{delivery_id}"), webhooks.WebhookSendAgain(renderer, config, config.clock)),
        (
            pages.STAFF,
            team.StaffPage(
                renderer,
                config.clock,
                config.secret_keys,
                config.console_password_link_hours,
                trust,
                config.mail_enabled,
            ),
        ),
        (pages.AUDIT, audit.AuditList(renderer)),
        (pages.patient("{patient_id}"), patient.PatientPage(renderer, config.clock)),
        (pages.READS, reads.ReadsPage(renderer, config.clock)),
        (pages.patient_copy("{patient_id}"), patient.PatientCopy(storage, config.clock)),
        (pages.patient_erasure("{patient_id}"), patient.PatientErasure(storage, config.clock)),
        *[(path, guides.HelpPage(renderer, help_pages)) for path in (pages.HELP, pages.guide("{name}"))],
        (pages.guide_image("{name}"), guides.HelpImage()),
        ("/livez", meta.Liveness()),
        *[
            (path, meta.Readiness(database, queue_redis, lambda: migrations.pending(database), cache))
            for path in ("/readyz", "/healthz")
        ],
        ("/metrics", web_metrics.MetricsEndpoint(queue_redis, list(queueing.QUEUES), recorder, config.metrics_token)),
    ]
    if isinstance(storage, LocalStorage):  # S3 serves its own presigned URLs
        routes.append(
            (
                "/storage/{key:path}",
                StoredObject(storage, MedicalRecord.is_registered, read_seconds=config.upload_read_seconds),
            )
        )
    router = falcon.routing.CompiledRouter()
    prefixes = {path.split("/")[1] for path, _ in routes}  # "external", "console", ...: kept in unrouted paths

    # The request id and metrics come first (after the turn taking, which has no response
    # side): their process_response runs last, so every answer is numbered and timed.
    # The token checks (401/404/403), then the rate limits, then the body: a body is read
    # only once the token, the clinic and the scope are checked and the token is within its
    # rate (BodyLimit's declared-length refusal, in process_request, still comes first).
    middleware: list[Any] = [
        TakeTurns(),
        # The access line names a path by its route, also when the request is refused
        # before routing (the router's own `find`), and shows only the parameters named here.
        logs.RequestId(config.trusted_proxy_hops, logs.PathNames(router.find, LOGGED_PARAMETERS, prefixes)),
        web_metrics.RequestMetrics(flusher),
        # the security headers of every answer, errors included (web/security.py)
        SecurityHeaders(trust, pages.PREFIX),
        # Deprecation and Sunset on every answer of an operation going away (web/deprecations.py)
        deprecations.DeprecationHeaders(deprecations.DEPRECATED),
        NoNulInUrl(),
        # 503 "run manage.py migrate" until the schema is this release's (then never asked again)
        SchemaGate(lambda: migrations.pending(database)),
        DatabaseConnection(),
        # recording-complete's 4xx after authentication are recorded
        HandoffRefusals(recorder, config.clock),
        # /console only: the staff session (cookie) and CSRF; never the API's
        ConsoleSession(config.clock, session_lifetime, renderer, OnceOnly(queue_redis), flash),
        # The routing checks' database uses all end within ROUTING_DEADLINE_SECONDS of here
        AnswerBy(config.routing_deadline_seconds),
        TokenAuth(config.clock, cache),
        RateLimit(limiter),
        RetryAdvice(),
        BodyLimit(config.max_body_bytes, config.body_read_seconds),
        # After the body is read: a document write's Idempotency-Key (replay, 409, 422)
        idempotency,
    ]
    app = falcon.App(middleware=middleware, router=router)
    app.req_options.strip_url_path_trailing_slash = True
    # JSON only: a form body (curl -d's default) would parse as a confusing form key: 415.
    app.req_options.media_handlers = falcon.media.Handlers(
        {falcon.MEDIA_JSON: falcon.media.JSONHandler(loads=strict_json.loads)}
    )
    errors.install(app)
    app.add_error_handler(KeyTaken, idempotency.taken)

    for path, resource in routes:
        app.add_route(path, resource)
    # What a request's recording is now, for the console's script (`on_get_state`).
    app.add_route(pages.recording_state(_REQUEST), recording, suffix="state")
    return app
