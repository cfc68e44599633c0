"""Configuration: the one place that reads the environment (12-factor).

Every setting is a field of `Config`; `Config.from_env()` maps environment variables
onto it. Tests build a `Config` directly, so nothing else may look at `os.environ`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from plumbing import smtp
from plumbing.clock import Clock
from plumbing.clock import wall as wall_clock
from plumbing.crypto import MIN_SECRET_KEY_BYTES, KeyRing


def _bool(value: str) -> bool:
    if value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if value.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


# env var -> (field name, parser); documented one by one in docs/operations.md (tests/test_docs.py
# holds the two together).
_ENV: dict[str, tuple[str, Callable[[str], object]]] = {
    "DATABASE_URL": ("database_url", str),
    "DB_POOL_SIZE": ("db_pool_size", int),
    "DB_POOL_WAIT_SECONDS": ("db_pool_wait_seconds", float),
    "REDIS_URL": ("redis_url", str),
    "LOG_LEVEL": ("log_level", str),
    "LOG_FORMAT": ("log_format", str),
    "METRICS_TOKEN": ("metrics_token", str),
    "METRICS_FLUSH_SECONDS": ("metrics_flush_seconds", float),
    "SECRET_KEY": ("secret_key", str),
    "SECRET_KEY_FALLBACKS": ("secret_key_fallbacks", str),
    "MAX_BODY_BYTES": ("max_body_bytes", int),
    "BODY_READ_SECONDS": ("body_read_seconds", float),
    "UPLOAD_READ_SECONDS": ("upload_read_seconds", float),
    "PUBLIC_BASE_URL": ("public_base_url", str),
    "STORAGE_BACKEND": ("storage_backend", str),
    "STORAGE_DIR": ("storage_dir", str),
    "STORAGE_SIGNING_KEY": ("storage_signing_key", str),
    "UPLOAD_MAX_BYTES": ("upload_max_bytes", int),
    "UPLOAD_PURGE_GRACE_SECONDS": ("upload_purge_grace_seconds", int),
    "UPLOAD_PURGE_EVERY_SECONDS": ("upload_purge_every_seconds", float),
    "UPLOAD_LINKS_PER_CLINIC": ("upload_links_per_clinic", int),
    "REFUSED_HANDOFF_RETENTION_DAYS": ("refused_handoff_retention_days", int),
    "IDEMPOTENCY_KEY_HOURS": ("idempotency_key_hours", int),
    "RETENTION_AUDIT_DETAILS_DAYS": ("retention_audit_details_days", int),
    "RETENTION_DISABLED_STAFF_DAYS": ("retention_disabled_staff_days", int),
    "S3_ENDPOINT_URL": ("s3_endpoint_url", str),
    "S3_PUBLIC_ENDPOINT_URL": ("s3_public_endpoint_url", str),
    "S3_BUCKET": ("s3_bucket", str),
    "S3_REGION": ("s3_region", str),
    "S3_ACCESS_KEY_ID": ("s3_access_key_id", str),
    "S3_SECRET_ACCESS_KEY": ("s3_secret_access_key", str),
    "TRANSCRIBER": ("transcriber", str),
    "WHISPER_MODEL": ("whisper_model", str),
    "WHISPER_MODEL_EN": ("whisper_model_en", str),
    "WHISPER_VAD": ("whisper_vad", _bool),
    "RECORDING_RETRY_DELAYS": ("recording_retry_delays", str),
    "JOB_TIMEOUT": ("job_timeout", int),
    "INGEST_MAX_ATTEMPTS": ("ingest_max_attempts", int),
    "WHISPER_THREADS": ("whisper_threads", int),
    "RECORDING_MAX_BYTES": ("recording_max_bytes", int),
    "RECORDING_MAX_SECONDS": ("recording_max_seconds", float),
    "RECORDING_FETCH_TIMEOUT": ("recording_fetch_timeout", float),
    "RECORDING_URL_LIFETIME_MINUTES": ("recording_url_lifetime_minutes", int),
    "PROVIDER_MARKER_WORDS": ("provider_marker_words", str),
    "PLATFORM_TOKEN_PATH": ("platform_token_path", str),
    "PLATFORM_RECORDING_PATH": ("platform_recording_path", str),
    "PLATFORM_FETCH_TIMEOUT": ("platform_fetch_timeout", float),
    "PLATFORM_RETRY_DELAYS": ("platform_retry_delays", str),
    "PLATFORM_PLAY_WAIT_SECONDS": ("platform_play_wait_seconds", float),
    "FETCH_CA_BUNDLE": ("fetch_ca_bundle", str),
    "UNSAFE_ALLOW_LOOPBACK_FETCH": ("unsafe_allow_loopback_fetch", _bool),
    "RELAY_PER_CLINIC": ("relay_per_clinic", int),
    "WORKER_STOP_SECONDS": ("worker_stop_seconds", float),
    "ROUTING_LAST_KNOWN_SECONDS": ("routing_last_known_seconds", float),
    "ROUTING_DEADLINE_SECONDS": ("routing_deadline_seconds", float),
    "HANDOFF_DEADLINE_SECONDS": ("handoff_deadline_seconds", float),
    "RATE_LIMIT_HANDOFFS_PER_MINUTE": ("rate_limit_handoffs_per_minute", int),
    "RATE_LIMIT_WRITES_PER_MINUTE": ("rate_limit_writes_per_minute", int),
    "CONSOLE_SESSION_IDLE_HOURS": ("console_session_idle_hours", float),
    "CONSOLE_SESSION_MAX_HOURS": ("console_session_max_hours", float),
    "CONSOLE_LOGIN_MAX_FAILURES": ("console_login_max_failures", int),
    "CONSOLE_LOGIN_WINDOW_SECONDS": ("console_login_window_seconds", int),
    "CONSOLE_PASSWORD_LINK_HOURS": ("console_password_link_hours", float),
    "TRUST_FORWARDED_PROTO": ("trust_forwarded_proto", _bool),
    "TRUSTED_PROXY_HOPS": ("trusted_proxy_hops", int),
    "SMTP_URL": ("smtp_url", str),
    "SMTP_CA_BUNDLE": ("smtp_ca_bundle", str),
    "MAIL_FROM": ("mail_from", str),
    "MAIL_RETRY_DELAYS": ("mail_retry_delays", str),
    "OPERATOR_EMAIL": ("operator_email", str),
    "URGENT_NOTICE_GATHER_SECONDS": ("urgent_notice_gather_seconds", float),
    "WEBHOOK_WORKERS": ("webhook_workers", int),
    "WEBHOOK_TIMEOUT_SECONDS": ("webhook_timeout_seconds", float),
    "WEBHOOK_RETRY_DELAYS": ("webhook_retry_delays", str),
    "WEBHOOK_POLL_SECONDS": ("webhook_poll_seconds", float),
    "WEBHOOK_DISABLE_AFTER_DAYS": ("webhook_disable_after_days", float),
    "URGENT_NOTICE_EVERY_MINUTES": ("urgent_notice_every_minutes", float),
    "CONSOLE_RESET_LINK_MINUTES": ("console_reset_link_minutes", float),
}
# Current name -> the name it had before; the former is still read when the current one is
# unset, so a deployment's environment keeps working across the rename (with a warning at
# start naming the new name). Both set to different values: refused at start.
_FORMER_NAMES: dict[str, str] = {
    "UPLOAD_MAX_BYTES": "STORAGE_MAX_UPLOAD_BYTES",
    **{
        f"PLATFORM_{name}": f"PBX_{name}"
        for name in ("TOKEN_PATH", "RECORDING_PATH", "FETCH_TIMEOUT", "RETRY_DELAYS", "PLAY_WAIT_SECONDS")
    },
}
# Variables a deployment may still set that the service no longer reads, with what to do
# instead: finding one, every process refuses to start (a setting silently ignored would
# change what a running deployment does). A variable is never dropped from `_ENV` without
# an entry here.
RETIRED: dict[str, str] = {}


# How long whisper.cpp's OpenMP threads spin at a barrier before they sleep: libgomp's
# GOMP_SPINCOUNT, which it reads from the process's environment once, when the binding
# loads. libgomp's default spins about 3 ms; a decoder step has hundreds of barriers, so on
# cores shared with other processes a spinning thread burns the time slice its partner
# needs (docs/transcription.md has the measurements). Same words either way: it changes
# when a thread sleeps, not what it computes. An operator's GOMP_SPINCOUNT or
# OMP_WAIT_POLICY wins.
OPENMP_SPIN_COUNT = "10000"


def prepare_process_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """What the libraries a process loads later read from its environment, set before they
    load: the entry points (`create_app`, `manage.py`) call it, so nothing else writes it."""
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT


def _signing_key(secret_key: str) -> str:
    return hashlib.sha256(b"storage-signing\0" + secret_key.encode()).hexdigest()


class RetiredSetting(ValueError):
    """The environment sets a variable the service no longer reads (see `RETIRED`), or a
    variable under both its current and its former name with different values."""


#: The built-in SECRET_KEY. It is public (it is in this file), so only the embedded run
#: (SQLite under var/) may use it; production processes refuse it (`require_production_secrets`).
DEVELOPMENT_SECRET_KEY = "insecure-development-key-change-me"

#: The address of the local storage backend's signed URLs when PUBLIC_BASE_URL is unset: the
#: embedded run's (a deployment with the local backend sets PUBLIC_BASE_URL).
LOCAL_BASE_URL = "http://127.0.0.1:8000"

#: The least IDEMPOTENCY_KEY_HOURS: the integrator documentation promises a day.
MIN_IDEMPOTENCY_KEY_HOURS = 24


class InsecureConfiguration(ValueError):
    """A production process would start with a secret anyone can know; the message names
    the variable and says how to make a good one."""


def _embedded_secret_key(database_url: str) -> str | None:
    """The SECRET_KEY the embedded run made beside its SQLite database (`secret_key`, written
    by `bin/run` through plumbing/local_secret.py), if there is one."""
    if not database_url.startswith("sqlite:///") or database_url == "sqlite:///:memory:":
        return None
    try:
        key = (Path(database_url[len("sqlite:///") :]).parent / "secret_key").read_text("utf-8").strip()
    except (OSError, ValueError):
        return None
    return key or None


@dataclass
class Config:
    database_url: str = "sqlite:///var/app.db"
    db_pool_size: int = 10
    # How long a request waits for a pooled connection when all are in use; then 503 +
    # Retry-After. Nothing holds one while waiting on a client or another service, so
    # the pool runs dry only when queries are slow or more run at once than it holds.
    db_pool_wait_seconds: float = 10.0
    redis_url: str = "redis://127.0.0.1:6379/0"
    log_level: str = "INFO"
    # "json": one JSON object per line (production); "text": plain lines for reading locally.
    log_format: str = "json"
    # Empty: /metrics is open (it carries no tenant data); set: scrapes send it as a bearer token.
    metrics_token: str = ""
    # How often each web process adds its request metrics to Redis (a scrape flushes its own first).
    metrics_flush_seconds: float = 5.0
    # Encrypts provider passwords at rest (Fernet key derived from it). Must be set in
    # production: its processes refuse the default (require_production_secrets).
    secret_key: str = DEVELOPMENT_SECRET_KEY
    # The keys SECRET_KEY replaced, comma separated, newest first: they still decrypt what
    # they encrypted and still verify the local storage's links, until `manage.py
    # reencrypt` has moved the stored secrets to SECRET_KEY and they are removed (retired).
    secret_key_fallbacks: str = ""
    max_body_bytes: int = 1_000_000
    # Whole-body deadlines, counted from when the service starts reading the body: an API
    # (JSON) body, then an upload through the local backend's presigned URLs. A client
    # trickling past them gets 408; without them each would keep its connection (and a
    # gevent greenlet, a socket, a partial file) for as long as it liked.
    body_read_seconds: float = 10.0
    upload_read_seconds: float = 60.0
    # The service's external address. Empty: the OpenAPI document names the address each
    # request reached (as a trusted proxy reports it; else "/", the document's own origin),
    # and the local backend's signed storage URLs `LOCAL_BASE_URL`, as before this was optional.
    public_base_url: str = ""
    storage_backend: str = "local"
    storage_dir: str = "var/storage"
    storage_signing_key: str = ""
    # Cap of one uploaded document. The local backend refuses a larger PUT while streaming
    # it (413); a presigned S3 PUT cannot carry a size limit, so registration refuses an
    # object over it (and deletes it). The spec asks documents to stay under 5 MB.
    upload_max_bytes: int = 25 * 1024 * 1024
    # Unregistered uploads are deleted this long after their upload link expired
    # (documents/uploads.py, run by every worker and `manage.py storage purge`).
    upload_purge_grace_seconds: int = 3600
    # How often each worker runs that purge (workers purging at once take disjoint rows).
    upload_purge_every_seconds: float = 600.0
    # Upload links of one clinic issued within a link's lifetime and not registered yet;
    # one more answers 429 TOO_MANY_UPLOAD_LINKS until the oldest expires.
    upload_links_per_clinic: int = 500
    # Refused hand-offs (`manage.py calls --refused`) are kept this many days; the workers'
    # periodic purge (the upload purge's rounds) deletes older ones.
    refused_handoff_retention_days: int = 30
    # A document write's answer stored for its Idempotency-Key is replayed this many hours
    # (the workers' periodic purge deletes it after); integrators are promised at least 24.
    idempotency_key_hours: int = 24
    # Audit events of no clinic (the operator's commands, failed logins of unknown e-mails)
    # lose their client address after this many days; a clinic's own events follow that
    # clinic's retention (docs/data-protection.md). The workers' purge rounds apply both.
    retention_audit_details_days: int = 180
    # A staff account disabled this many days ago is deleted, with its memberships (the audit
    # and read trails keep the e-mail it acted under): a year covers a leaver's questions.
    retention_disabled_staff_days: int = 365
    s3_endpoint_url: str = ""
    # Endpoint written into presigned S3 URLs when clients reach the bucket under another
    # address than the service does; empty: s3_endpoint_url.
    s3_public_endpoint_url: str = ""
    s3_bucket: str = ""
    s3_region: str = "us-east-1"
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""
    transcriber: str = "pywhispercpp"
    # The multilingual model for every clinic. WHISPER_MODEL_EN, when set, serves clinics
    # whose only language is English (measured: tiny.en has twice base's error on phone lines).
    whisper_model: str = "var/models/ggml-base.bin"
    whisper_model_en: str = ""
    whisper_threads: int = 2
    whisper_vad: bool = True
    # Seconds between download attempts of a recording; one more try than delays.
    recording_retry_delays: str = "10,60,300"
    # An ingest job's limit; whisper.cpp is stopped from inside before it (jobs/calls.py).
    job_timeout: int = 600
    # Tries of one call's ingest, crashes and download retries included; after the last the
    # call still becomes a voice message request, its transcript marked as failed.
    ingest_max_attempts: int = 6
    recording_max_bytes: int = 25 * 1024 * 1024
    # A longer recording is not decoded (a voice message, transcript failed `too_long`):
    # 25 MiB of 8 kbps MP3 is seven hours, 2.5 GB decoded whole. 20 minutes decode to 77 MB
    # and transcribe in about 6 min with base, inside JOB_TIMEOUT.
    recording_max_seconds: float = 1200.0
    recording_fetch_timeout: float = 30.0
    recording_url_lifetime_minutes: int = 25
    # The switchboard platform family's marker words (comma separated, any case): a call
    # whose Source contains one has its expired recording link re-fetched from the platform
    # with its clinic's credentials. The spec withholds the real words, so they are the
    # deployment's to set; a clinic's own onboarding `sourceMarkers` add to them.
    provider_marker_words: str = ""
    # The platform's API (re-fetching expired recording links), relative to a clinic's
    # `platform_api_url`; `{recording}` is the recording reference (RecordingSid).
    platform_token_path: str = "/auth/token"
    platform_recording_path: str = "/recordings/{recording}/url"
    platform_fetch_timeout: float = 10.0
    platform_retry_delays: str = "2,10,60"
    platform_play_wait_seconds: float = 5.0
    fetch_ca_bundle: str = ""
    # Test-only: lets server-side fetches reach 127.0.0.1 (never private ranges).
    unsafe_allow_loopback_fetch: bool = False
    # Fair share (jobs/relay.py): calls of one clinic queued and not finished at a time, so
    # a burst from one clinic delays the others' by a few transcriptions, not by the burst.
    # One clinic alone keeps at most this many workers busy. 0: oldest first, no share.
    relay_per_clinic: int = 2
    # A worker asked to stop (SIGTERM) is gone within this: a transcription running then
    # stops at a checkpoint and its job is handed back to another worker (jobs/calls.py).
    # Within the 30 s most platforms allow between their SIGTERM and SIGKILL.
    worker_stop_seconds: float = 20.0
    # While the database is unreachable, the routing checks and their token check answer
    # from the last state each web process knew, if it was current at most this long ago
    # (plumbing/row_cache.py); older, they answer 503. 0: never from memory.
    routing_last_known_seconds: float = 600.0
    # How long a routing check may wait on the database in all (its key and schedule
    # reads, has-active-request's query, a key's last use): past it the check answers from
    # the last known state, or has-active-request 503. Each check then answers within 1 s
    # through a lost network or a stalled database (plumbing/row_cache.py, web.middleware.AnswerBy).
    routing_deadline_seconds: float = 0.6
    # How long a hand-off waits for its call to be stored: past it, 503 "safe to retry"
    # (the CallSid keeps a retry one call), never a hang (switchboard/intake.py).
    handoff_deadline_seconds: float = 3.0
    # Per-token request rates (web/rate_limit.py; 0: no limit), counted in Redis for every
    # web process. Far above a switchboard's normal traffic with its retries: one token may
    # serve a whole clinic group, hundreds of calls a minute.
    rate_limit_handoffs_per_minute: int = 1200
    rate_limit_writes_per_minute: int = 600
    # Staff console sessions: ended after this long without a page, and this long after login
    # whatever the activity (a shared clinic computer must not stay logged in for days).
    console_session_idle_hours: float = 12.0
    console_session_max_hours: float = 24.0
    # Logins refused for the window after this many failures, per account and per address.
    console_login_max_failures: int = 5
    console_login_window_seconds: int = 900
    # A set-password link (a new staff account, a reset an admin made) works once, for this long.
    console_password_link_hours: float = 24.0
    # Behind the operator's TLS-terminating proxy: believe its X-Forwarded-Proto for the
    # session cookie's Secure flag. Off by default: a client could send the header itself.
    trust_forwarded_proto: bool = False
    # How many proxies in front of the web processes append the address they saw to
    # X-Forwarded-For (a PaaS router: 1). The client's address, for the login throttle, the
    # sessions, the audit trail and the logs, is then the entry that many from the right;
    # 0: the connection's own address (a client could write the header itself). Behind a
    # router left at 0, every client has the router's address: one office's failed logins
    # would lock every clinic's staff out.
    trusted_proxy_hops: int = 0
    # E-mail (notices, staff password links), sent by the workers: empty, no e-mail at all
    # (the console hands set-password links over as before). smtp:// uses STARTTLS (required;
    # `?starttls=off` only for a loopback server), smtps:// TLS; the certificate is verified
    # (against SMTP_CA_BUNDLE when set). user:password@ logs in. Needs MAIL_FROM and
    # PUBLIC_BASE_URL (the links in the e-mails).
    smtp_url: str = ""
    smtp_ca_bundle: str = ""
    mail_from: str = ""
    # Seconds between the tries of one e-mail while the server is down or says "later";
    # after the last, a try every ten minutes until two days have passed (jobs/outbox.py).
    mail_retry_delays: str = "10,30,60,120,300"
    # The operator's own address: told of keys about to expire, as the clinics' admins are.
    operator_email: str = ""
    # A message flagged "may be urgent" waits this long for others of its clinic before its
    # e-mail goes, so that a burst is one e-mail; and one recipient gets at most one such
    # e-mail this often (what is flagged meanwhile goes in the next one).
    urgent_notice_gather_seconds: float = 30.0
    urgent_notice_every_minutes: float = 5.0
    # The "forgot password" link by e-mail works once, for this long.
    console_reset_link_minutes: float = 60.0
    # Webhooks (jobs/webhooks.py): the processes each worker starts to deliver them (one
    # endpoint's delivery at a time each: an endpoint that never answers holds one of them at
    # most), the time a receiver has to answer, the pauses between the tries of an endpoint
    # that fails (seconds; about a day and a half in all, the last repeated until then), how
    # often the relay looks for due deliveries, and after how long failing an endpoint is
    # disabled (its administrators told).
    webhook_workers: int = 2
    webhook_timeout_seconds: float = 10.0
    webhook_retry_delays: str = "5,300,1800,7200,18000,36000,36000,36000"
    webhook_poll_seconds: float = 0.2
    webhook_disable_after_days: float = 5.0
    # Not from the environment: the wall clock, replaceable in tests.
    clock: Clock = field(default=wall_clock, repr=False, compare=False)
    # Not from the environment: what `from_env` found worth a warning at start (a former
    # variable name still in use); every process logs them once it has its logging.
    notices: list[str] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in (
            "upload_max_bytes",
            "upload_links_per_clinic",
            "upload_purge_every_seconds",
            "refused_handoff_retention_days",
            "retention_audit_details_days",
            "retention_disabled_staff_days",
            "console_password_link_hours",
            "console_reset_link_minutes",
            "urgent_notice_every_minutes",
            "webhook_timeout_seconds",
            "webhook_poll_seconds",
            "webhook_disable_after_days",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name.upper()} must be positive")
        if self.webhook_workers < 1:
            raise ValueError("WEBHOOK_WORKERS must be at least 1")
        try:
            hooks = self.webhook_retry_intervals
        except ValueError:
            raise ValueError("WEBHOOK_RETRY_DELAYS: seconds separated by commas, such as 5,300,1800") from None
        if not hooks or any(d <= 0 for d in hooks):
            raise ValueError("WEBHOOK_RETRY_DELAYS: at least one delay, each positive")
        if self.urgent_notice_gather_seconds < 0:
            raise ValueError("URGENT_NOTICE_GATHER_SECONDS must not be negative")
        try:
            delays = self.mail_retry_intervals
        except ValueError:
            raise ValueError("MAIL_RETRY_DELAYS: seconds separated by commas, such as 10,30,60") from None
        if not delays or any(d <= 0 for d in delays):
            raise ValueError("MAIL_RETRY_DELAYS: at least one delay, each positive")
        if self.smtp_url:
            try:
                smtp.Server.parse(self.smtp_url)
            except ValueError as exc:
                raise ValueError(f"SMTP_URL {exc}") from None
            if "@" not in self.mail_from:
                raise ValueError(
                    "MAIL_FROM: the sender's address is required with SMTP_URL (such as ordinace@example.cz)"
                )
            if not self.public_base_url:
                raise ValueError(
                    "PUBLIC_BASE_URL is required with SMTP_URL: the e-mails' links lead there (such as "
                    "https://clinic.example.cz); a link built from a request's Host header could be steered"
                )
        elif self.mail_from or self.operator_email:
            raise ValueError(
                ("MAIL_FROM" if self.mail_from else "OPERATOR_EMAIL")
                + " is set, but SMTP_URL is not: no e-mail would be sent. Set SMTP_URL, or remove it."
            )
        if self.idempotency_key_hours < MIN_IDEMPOTENCY_KEY_HOURS:
            raise ValueError(
                f"IDEMPOTENCY_KEY_HOURS must be at least {MIN_IDEMPOTENCY_KEY_HOURS}: integrators are "
                "told a key's answer is kept that long, and a shorter time would let a retry duplicate a write"
            )
        if self.trusted_proxy_hops < 0:
            raise ValueError("TRUSTED_PROXY_HOPS must be 0 or more")
        if self.upload_purge_grace_seconds < 0:
            raise ValueError("UPLOAD_PURGE_GRACE_SECONDS must not be negative")
        if self.worker_stop_seconds <= 0:
            raise ValueError("WORKER_STOP_SECONDS must be positive")
        if self.routing_last_known_seconds < 0:
            raise ValueError("ROUTING_LAST_KNOWN_SECONDS must not be negative")
        if not 0 < self.routing_deadline_seconds <= 0.9:
            raise ValueError("ROUTING_DEADLINE_SECONDS must be over 0 and at most 0.9 (a check answers within 1 s)")
        if self.handoff_deadline_seconds <= 0:
            raise ValueError("HANDOFF_DEADLINE_SECONDS must be positive")
        if not self.storage_signing_key:
            # Derived, so one SECRET_KEY is enough; set it apart to rotate it alone.
            self.storage_signing_key = _signing_key(self.secret_key)

    def require_production_secrets(self) -> None:
        """Raise `InsecureConfiguration` if this configuration is a production one (any
        database but SQLite: the embedded run is the only SQLite one) with the built-in
        SECRET_KEY or one shorter than `MIN_SECRET_KEY_BYTES`.

        The entry points of the web, worker and release processes call it, not `Config`
        itself: tests and tools build a `Config` for PostgreSQL directly. With a known key a
        database dump decrypts the platform passwords, and the storage signing key (derived
        from it) lets one download link be turned into forged ones."""
        if self.database_url.strip().lower().startswith("sqlite:"):
            return
        for n, fallback in enumerate(self.fallback_keys, 1):
            size = len(fallback.encode("utf-8"))
            if fallback == DEVELOPMENT_SECRET_KEY or size < MIN_SECRET_KEY_BYTES:
                raise InsecureConfiguration(
                    f"SECRET_KEY_FALLBACKS: key {n} (of the comma separated list) is "
                    + ("the built-in development value" if fallback == DEVELOPMENT_SECRET_KEY else f"{size} bytes long")
                    + f"; every previous key is at least {MIN_SECRET_KEY_BYTES} bytes. A key holding a comma "
                    "cannot be a fallback: re-encrypt under the new SECRET_KEY at once (manage.py reencrypt)."
                )
        size = len(self.secret_key.encode("utf-8"))
        if self.secret_key == DEVELOPMENT_SECRET_KEY:
            problem = "is the built-in development value, which anyone can read in config.py"
        elif size < MIN_SECRET_KEY_BYTES:
            problem = f"is {size} bytes long; at least {MIN_SECRET_KEY_BYTES} are required"
        else:
            return
        raise InsecureConfiguration(
            f"SECRET_KEY {problem}. Outside the embedded run (a database other than SQLite) the "
            "web process, the worker and manage.py migrate/onboard refuse to start with it: it "
            "encrypts the switchboard platform passwords and the storage URL signing key is derived "
            "from it. Set SECRET_KEY "
            "to a random value of your own (to change it later, the old one goes to SECRET_KEY_FALLBACKS: "
            "docs/operations.md, Secrets), for example the output of: "
            "python -c 'import secrets; print(secrets.token_urlsafe(48))'"
        )

    @property
    def fallback_keys(self) -> list[str]:
        """SECRET_KEY_FALLBACKS as a list (newest first)."""
        return [key.strip() for key in self.secret_key_fallbacks.split(",") if key.strip()]

    @property
    def storage_signing_fallbacks(self) -> list[str]:
        """The signing keys that still verify the local storage's links: those derived from
        SECRET_KEY_FALLBACKS, when the signing key is derived too (one set apart rotates
        alone, and its links end with it)."""
        if self.storage_signing_key != _signing_key(self.secret_key):
            return []
        return [_signing_key(key) for key in self.fallback_keys]

    @property
    def secret_keys(self) -> KeyRing:
        """SECRET_KEY (encrypts) and its fallbacks (still decrypt)."""
        return KeyRing(self.secret_key, self.fallback_keys)

    @property
    def mail_enabled(self) -> bool:
        """Whether the service sends e-mail (SMTP_URL is set)."""
        return bool(self.smtp_url)

    @property
    def webhook_retry_intervals(self) -> list[int]:
        return [int(x) for x in self.webhook_retry_delays.split(",") if x.strip()]

    @property
    def mail_retry_intervals(self) -> list[int]:
        return [int(x) for x in self.mail_retry_delays.split(",") if x.strip()]

    @property
    def retry_delays(self) -> list[int]:
        return [int(x) for x in self.recording_retry_delays.split(",") if x.strip()]

    @property
    def marker_words(self) -> list[str]:
        """`PROVIDER_MARKER_WORDS` as a list of lower-case words."""
        return [w.strip().lower() for w in self.provider_marker_words.split(",") if w.strip()]

    @property
    def platform_retry_intervals(self) -> list[int]:
        return [int(x) for x in self.platform_retry_delays.split(",") if x.strip()]

    def whisper_model_for(self, language: str | None) -> str:
        if language == "en" and self.whisper_model_en:
            return self.whisper_model_en
        return self.whisper_model

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Config:
        env = os.environ if environ is None else environ
        retired = sorted(name for name in RETIRED if name in env)
        if retired:
            raise RetiredSetting(
                "; ".join(f"{name} is no longer read: {RETIRED[name]}" for name in retired)
                + ". Remove it from the environment to start."
            )
        values: dict[str, object] = {}
        notices: list[str] = []
        for name, (attr, parse) in _ENV.items():
            former = _FORMER_NAMES.get(name)
            if former is not None and former in env:
                if name in env and env[name] != env[former]:
                    raise RetiredSetting(
                        f"{name} and its former name {former} are both set, to different values; remove {former}."
                    )
                if name not in env:
                    notices.append(f"{former} is the former name of {name}: it is still read, but rename it to {name}.")
            source = name if name in env else former
            if source is not None and source in env:
                try:
                    values[attr] = parse(env[source])
                except ValueError as exc:
                    raise ValueError(f"{source}: {exc}") from None
        values["notices"] = notices
        if "secret_key" not in values:
            # Unset on the embedded run's database: the key bin/run keeps beside it, so that
            # manage.py commands run by hand (onboard) encrypt with what the service decrypts with.
            embedded = _embedded_secret_key(str(values.get("database_url", cls.database_url)))
            if embedded:
                values["secret_key"] = embedded
        return cls(**values)  # type: ignore[arg-type]  # each value parsed for its field above

    def describe(self) -> dict[str, object]:
        """Settings safe to print (secrets masked)."""
        secret = {
            "secret_key",
            "secret_key_fallbacks",
            "storage_signing_key",
            "s3_secret_access_key",
            "metrics_token",
            "smtp_url",  # it may carry the server's password
        }
        return {
            f.name: ("***" if f.name in secret and getattr(self, f.name) else getattr(self, f.name))
            for f in fields(self)
            if f.name not in ("clock", "notices")
        }
