"""The OpenAPI document, the health checks, and migrations on both databases."""

from __future__ import annotations

import falcon.inspect
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from app import create_app
from config import Config
from migrations import MIGRATIONS, migrate
from models import SchemaMigration
from plumbing.database import bind_database, db
from tests.support import assert_error, bearer, clinic, issue_token, load, organization, switchboard_url
from tests.support.databases import schema_of as _schema_of
from tests.support.documented import closed, response_schema
from web import openapi


def test_openapi_document_is_valid_and_served_without_auth(app):
    document = app.get("/openapi.json", status=200).json
    validate(document)
    assert document["openapi"].startswith("3.1")


def test_every_route_and_method_is_documented(wsgi_app, app):
    documented = app.get("/openapi.json").json["paths"]
    routes = falcon.inspect.inspect_routes(wsgi_app)
    assert routes
    for route in routes:
        if any(route.path == prefix or route.path.startswith(prefix + "/") for prefix in ("/console", "/docs")):
            continue  # the staff console and the API reference are HTML pages for browsers, not the contract
        path = openapi.public_path(route.path)
        assert path in documented, f"{route.path} is missing from /openapi.json"
        for method in route.methods:
            if method.internal:  # Falcon's own OPTIONS / 405 responders
                continue
            assert method.method.lower() in documented[path], f"{method.method} {path} is not documented"
            assert documented[path][method.method.lower()]["responses"]


def test_live_answers_match_their_documented_schemas(app):
    load(organization(clinic()))
    token = issue_token(["clinic-a"], ["read"])
    document = app.get("/openapi.json").json
    error_schema = document["components"]["schemas"]["Error"]
    for check, body in [
        ("is-clinic-opened", {}),
        ("is-on-vacation", {}),
        ("has-active-request", {"callFrom": "+420601123456"}),
    ]:
        path = openapi.public_path(switchboard_url("{clinic_slug}", check))
        schema = closed(response_schema(document, path, "post"))
        Draft202012Validator(schema).validate(
            app.post_json(switchboard_url("clinic-a", check), body, headers=bearer(token)).json
        )
        bad = app.post_json(switchboard_url("clinic-a", check), body, status=401).json
        Draft202012Validator(error_schema).validate(bad)


@pytest.mark.parametrize("path", ["/readyz", "/healthz"])
def test_readiness_reports_database_schema_and_redis(app, path):
    assert app.get(path, status=200).json == {"status": "ok", "database": "ok", "schema": "ok", "redis": "ok"}


def test_liveness_looks_at_nothing(app):
    assert app.get("/livez", status=200).json == {"status": "alive"}


def test_with_redis_unreachable_the_web_is_ready_degraded_and_alive(config, tmp_path):
    """Hand-offs and routing checks work without Redis: readiness says so (200, degraded),
    it does not take the process out of service; liveness looks at nothing."""
    # A port nothing listens on: a real refused connection, not a mock.
    broken = Config(database_url=f"sqlite:///{tmp_path}/h.db", redis_url="redis://127.0.0.1:1/0")
    import webtest

    try:
        client = webtest.TestApp(create_app(broken))
        migrate(db.obj)
        for path in ("/readyz", "/healthz"):
            assert client.get(path, status=200).json == {
                "status": "degraded",
                "database": "ok",
                "schema": "ok",
                "redis": "down",
            }
        assert client.get("/livez", status=200).json == {"status": "alive"}
    finally:
        bind_database(config.database_url, pool_size=config.db_pool_size)


def test_before_migrate_the_web_answers_503_says_why_once_and_serves_once_migrated(config, tmp_path, caplog):
    """A web process started before the release step: every request but the health checks
    is 503 (not a 500 with a traceback), the log says "run manage.py migrate" once, and the
    process serves as soon as the schema is there, without a restart."""
    import logging

    import webtest

    fresh = Config(database_url=f"sqlite:///{tmp_path}/early.db", redis_url=config.redis_url, clock=config.clock)
    try:
        client = webtest.TestApp(create_app(fresh))
        with caplog.at_level(logging.WARNING, logger="web.middleware"):
            for _ in range(3):
                early = client.post(
                    switchboard_url("clinic-a", "is-clinic-opened"), headers=bearer("clinic_x_y"), status=503
                )
                assert_error(early, 503, "SERVICE_UNAVAILABLE")
                assert "manage.py migrate" in early.json["error"] and early.headers["Retry-After"] == "5"
        said = [r.getMessage() for r in caplog.records if "run manage.py migrate" in r.getMessage()]
        assert len(said) == 1, said
        assert "Traceback" not in caplog.text
        ready = client.get("/readyz", status=503).json
        assert ready["schema"] == "behind" and ready["database"] == "ok"
        assert client.get("/livez", status=200).json == {"status": "alive"}
        migrate(db.obj)
        gate = next(m for m in client.app._unprepared_middleware if type(m).__name__ == "SchemaGate")
        gate._checked_at = -gate.recheck_every  # the next request looks again at once
        client.post(switchboard_url("clinic-a", "is-clinic-opened"), headers=bearer("clinic_x_y"), status=401)
        assert client.get("/readyz", status=200).json["schema"] == "ok"
    finally:
        bind_database(config.database_url, pool_size=config.db_pool_size)


def test_migrate_is_idempotent_on_postgresql(wsgi_app):
    with db.connection_context():
        assert migrate(db.obj) == []
        assert [r.version for r in SchemaMigration.select().order_by(SchemaMigration.version)] == [
            v for v, _, _ in MIGRATIONS
        ]


def test_sqlite_embedded_default_migrates_and_answers(config, tmp_path):
    """The embedded default: a fresh SQLite file, migrated twice, serving the checks."""
    import webtest

    sqlite = Config(database_url=f"sqlite:///{tmp_path}/app.db", redis_url=config.redis_url, clock=config.clock)
    try:
        sqlite_app = create_app(sqlite)
        assert migrate(db.obj) == [f"{v:04d}_{n}" for v, n, _ in MIGRATIONS]
        assert migrate(db.obj) == []
        load(organization(clinic(officeHours=[{"weekday": "wed", "opens": "08:00", "closes": "16:00"}])))
        token = issue_token(["clinic-a"], ["read"])
        client = webtest.TestApp(sqlite_app)
        assert client.post(switchboard_url("clinic-a", "is-clinic-opened"), headers=bearer(token)).json == {
            "isOpen": True
        }
        assert client.post_json(
            switchboard_url("clinic-a", "has-active-request"), {"callFrom": "+420601123456"}, headers=bearer(token)
        ).json == {"hasActiveRequest": False}
        assert client.get("/healthz").json["database"] == "ok"
    finally:
        bind_database(config.database_url, pool_size=config.db_pool_size)


def test_upgrade_from_version_1_adds_the_call_tables(config):
    """A PostgreSQL database left at migration 1 (no call table, no patient_request.call_id)
    is brought to the current schema by `migrate`, keeping its rows."""
    from tests.conftest import PG_URL
    from tests.support.databases import recreate_database

    url = PG_URL + "_upgrade_v1"  # beside the session's own database, never another suite's
    recreate_database(url)
    database = bind_database(url, pool_size=1)
    try:
        with database.connection_context():
            migrate(database)
            database.execute_sql(
                "INSERT INTO organization (id, slug, name, patient_sharing) VALUES (%s, %s, %s, %s)",
                ("00000000-0000-0000-0000-000000000001", "kept", "Kept", False),
            )
            database.execute_sql("ALTER TABLE patient_request DROP COLUMN call_id")
            database.execute_sql('DROP TABLE "call"')
            SchemaMigration.delete().where(SchemaMigration.version > 1).execute()
            assert migrate(database) == [f"{v:04d}_{n}" for v, n, _ in MIGRATIONS if v > 1]
            assert "call_id" in {c.name for c in database.get_columns("patient_request")}
            index = [i for i in database.get_indexes("patient_request") if i.name == "patient_request_call_id"]
            assert index and index[0].unique
            assert [fk.dest_table for fk in database.get_foreign_keys("patient_request") if fk.column == "call_id"] == [
                "call"
            ]
            assert database.execute_sql("SELECT slug FROM organization").fetchall() == [("kept",)]
            assert migrate(database) == []
    finally:
        database.close_all()
        bind_database(config.database_url, pool_size=config.db_pool_size)


def test_upgrade_from_version_6_adds_languages_transcript_fields_and_the_kind_index(wsgi_app, config):
    """A PostgreSQL database left at migration 6, with rows, gets migration 7 and ends up
    with the schema of a fresh database; its rows read as "not set"."""
    from urllib.parse import urlparse, urlunparse

    from models import Call, Clinic, Patient, PatientRequest
    from plumbing.database import open_database
    from tests.conftest import PG_URL
    from tests.support.databases import recreate_database

    tables = ("clinic", "call", "patient_request")
    fresh = open_database(PG_URL, pooled=False)  # the session's database, migrated from nothing
    try:
        with fresh.connection_context():
            want = _schema_of(fresh, tables)
    finally:
        fresh.close()
    assert {"languages"} <= {c[0] for c in want["clinic"][0]}
    assert {
        ("callback_number", "character varying", True),
        ("transcript_status", "character varying", True),
        ("transcript_issue", "character varying", True),
    } <= set(want["call"][0])
    assert ("patient_request_clinic_id_kind_created_at", ("clinic_id", "kind", "created_at"), False) in want[
        "patient_request"
    ][1]

    parts = urlparse(PG_URL)
    url = urlunparse(parts._replace(path=parts.path.rstrip("/") + "_upgrade_v6"))
    recreate_database(url)
    database = bind_database(url, pool_size=1)
    try:
        with database.connection_context():
            migrate(database)
            load(organization(clinic(language="cs")))
            with database.atomic():
                home = Clinic.by_slug("clinic-a")
                call = Call.create(
                    clinic=home,
                    call_sid="CA-old",
                    call_from="+420601123456",
                    call_to="+420222333444",
                    extra='{"flow": 1}',
                    transcript="Old transcript.",
                    transcript_language="cs",
                    state="done",
                    outcome="voice_message",
                )
                caller = Patient.create(organization=home.organization_id, phone="+420601123456")
                request = PatientRequest.create(clinic=home, patient=caller, kind="voice_message", call=call.id)
            # Back to version 6: what migration 7 adds, removed.
            database.execute_sql('ALTER TABLE "clinic" DROP COLUMN "languages"')
            for column in ("callback_number", "transcript_status", "transcript_issue"):
                database.execute_sql(f'ALTER TABLE "call" DROP COLUMN "{column}"')
            database.execute_sql('DROP INDEX "patient_request_clinic_id_kind_created_at"')
            SchemaMigration.delete().where(SchemaMigration.version >= 7).execute()
            assert migrate(database) == [f"{v:04d}_{n}" for v, n, _ in MIGRATIONS if v >= 7]
            assert _schema_of(database, tables) == want
            kept = Call.get_by_id(call.id)
            assert (kept.transcript, kept.extra, kept.transcript_language) == ("Old transcript.", '{"flow": 1}', "cs")
            assert (kept.callback_number, kept.transcript_status, kept.transcript_issue) == (None, None, None)
            assert (Clinic.by_slug("clinic-a").language, Clinic.by_slug("clinic-a").language_list) == ("cs", [])
            assert [r.id for r in PatientRequest.select().where(PatientRequest.kind == "voice_message")] == [request.id]
            assert migrate(database) == []
    finally:
        database.close_all()
        bind_database(config.database_url, pool_size=config.db_pool_size)


def test_sqlite_fresh_database_has_migration_7(config, tmp_path):
    database = bind_database(f"sqlite:///{tmp_path}/fresh.db")
    try:
        with database.connection_context():
            migrate(database)
            assert {"languages"} <= {c.name for c in database.get_columns("clinic")}
            assert {"callback_number", "transcript_status", "transcript_issue"} <= {
                c.name for c in database.get_columns("call")
            }
            assert "patient_request_clinic_id_kind_created_at" in {
                i.name for i in database.get_indexes("patient_request")
            }
            load(organization(clinic(language="cs", languages=["cs", "uk", "en"])))
            from models import Clinic

            assert Clinic.by_slug("clinic-a").language_list == ["cs", "uk", "en"]
    finally:
        database.close()
        bind_database(config.database_url, pool_size=config.db_pool_size)


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_upgrade_from_version_12_renames_the_platform_columns_keeping_the_credentials(config, tmp_path, kind):
    """A database left at migration 12 keeps a clinic's platform credentials in `pbx_*`
    columns; migration 13 renames them to `platform_*`, values kept, on both databases."""
    from models import Clinic
    from tests.conftest import PG_URL
    from tests.support.databases import recreate_database

    if kind == "postgresql":
        url = PG_URL + "_upgrade_v12"  # beside the session's own database
        recreate_database(url)
    else:
        url = f"sqlite:///{tmp_path}/v12.db"
    database = bind_database(url, pool_size=1)
    names = ("api_url", "username", "password_encrypted")
    try:
        with database.connection_context():
            migrate(database)
            load(organization(clinic()))
            Clinic.update(
                platform_api_url="https://platform.example.net/api",
                platform_username="clinic-api",
                platform_password_encrypted="sealed",
            ).execute()
            for name in names:  # back to version 12
                database.execute_sql(f'ALTER TABLE "clinic" RENAME COLUMN "platform_{name}" TO "pbx_{name}"')
            SchemaMigration.delete().where(SchemaMigration.version == 13).execute()
            assert migrate(database) == ["0013_platform_names"]
            columns = {c.name for c in database.get_columns("clinic")}
            assert {f"platform_{name}" for name in names} <= columns and not {f"pbx_{name}" for name in names} & columns
            home = Clinic.by_slug("clinic-a")
            assert (home.platform_api_url, home.platform_username, home.platform_password_encrypted) == (
                "https://platform.example.net/api",
                "clinic-api",
                "sealed",
            )
            assert migrate(database) == []
    finally:
        if kind == "postgresql":
            database.close_all()
        else:
            database.close()
        bind_database(config.database_url, pool_size=config.db_pool_size)
