"""Migrations that cannot drift: a database built by every migration in order is the same as
one built by each earlier release of the service (its own code, from the repository's
history) and then upgraded, on PostgreSQL and on SQLite. The same: the schema as
`pg_dump --schema-only` writes it (and SQLite's own description of its tables, indexes and
foreign keys), the order of a table's columns aside (an upgrade adds a column at the end)."""

from __future__ import annotations

import io
import re
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from migrations import MIGRATIONS, migrate
from plumbing.database import bind_database
from tests.conftest import PG_URL, ROOT
from tests.support.databases import recreate_database

# A database per earlier release, each built by that release's own code: the full suite's,
# not the fast tier's.
pytestmark = pytest.mark.slow

_VERSION = re.compile(r'\(\s*(\d+),\s*"([a-z0-9_]+)"')

# Builds a database with the migrations of the tree it runs in: argv[1] is the tree, argv[2]
# the database's URL. Old trees bound their database in different places over time.
_BUILD = """
import importlib, sys
sys.path.insert(0, sys.argv[1])
import peewee as pw
url = sys.argv[2]
if url.startswith("sqlite:///"):
    database = pw.SqliteDatabase(url[len("sqlite:///"):], pragmas={"foreign_keys": 1})
else:
    from playhouse.db_url import parse
    params = parse(url)
    database = pw.PostgresqlDatabase(params.pop("database"), **params)
try:
    proxy = importlib.import_module("plumbing.database").db
except (ImportError, AttributeError):
    proxy = importlib.import_module("models").db
proxy.initialize(database)
importlib.import_module("migrations").migrate(database)
"""


def releases() -> list[tuple[int, str]]:
    """(the highest migration, the newest commit that had it) for every earlier release:
    each state of the schema the service has shipped, from the repository's history."""
    log = subprocess.run(
        ["git", "log", "--format=%H", "--", "migrations.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    newest: dict[int, str] = {}
    for commit in log:  # newest first
        text = subprocess.run(
            ["git", "show", f"{commit}:migrations.py"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        top = max(int(v) for v, _ in _VERSION.findall(text))
        newest.setdefault(top, commit)
    current = max(version for version, _, _ in MIGRATIONS)
    return sorted((v, c) for v, c in newest.items() if v < current)


def extract(commit: str, into: Path) -> Path:
    """The service's Python files and frozen schema at `commit`."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.endswith((".py", ".sql")) and not m.name.startswith(("tests/", "bench/", "tools/"))
        ]
        tar.extractall(into, members=members, filter="data")
    return into


def build_at(commit: str, url: str, tmp: Path) -> None:
    tree = extract(commit, tmp / commit[:12])
    done = subprocess.run(
        [sys.executable, "-c", _BUILD, str(tree), url], cwd=tree, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]


def pg_schema(url: str) -> str:
    """`pg_dump --schema-only`, each table's columns sorted, without its random
    `\\restrict` key."""
    text = subprocess.run(
        ["pg_dump", "--schema-only", "--no-owner", url], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    lines = [line for line in text.splitlines() if not line.startswith(("\\restrict", "\\unrestrict"))]
    out, columns, in_table = [], [], False
    for line in lines:
        if line.startswith("CREATE TABLE "):
            in_table, columns = True, []
            out.append(line)
        elif in_table and line.startswith(");"):
            out += [*sorted(columns), line]
            in_table = False
        elif in_table:
            columns.append(line.strip().rstrip(","))
        else:
            out.append(line)
    return "\n".join(out)


def sqlite_schema(path: Path) -> list[tuple]:
    """Every table's columns (sorted), indexes with their columns, and foreign keys."""
    conn = sqlite3.connect(path)
    try:
        found: list[tuple] = []
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            columns = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            found.append(("table", table, sorted(column[1:] for column in columns)))  # not its position
            found.append(
                (
                    "fks",
                    table,
                    sorted(row[2:] for row in conn.execute(f'PRAGMA foreign_key_list("{table}")').fetchall()),
                )
            )
            for index in sorted(conn.execute(f'PRAGMA index_list("{table}")').fetchall(), key=lambda i: i[1]):
                info = conn.execute(f'PRAGMA index_info("{index[1]}")').fetchall()
                partial = conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", (index[1],)
                ).fetchone()
                where = (partial[0] or "").partition(" WHERE ")[2] if partial else ""
                found.append(("index", table, index[1], index[2], [c[2] for c in info], where))
        return found
    finally:
        conn.close()


def test_the_migrations_name_the_channels_the_service_listens_on():
    """The frozen triggers NOTIFY on the channels the row caches and the call relay listen on."""
    import migrations
    from models import Call
    from plumbing import row_cache

    assert migrations.CHANNELS == (row_cache.CHANNEL, Call.NEW_CALL_CHANNEL, row_cache.REQUESTS_CHANNEL)
    frozen = "".join(path.read_text("utf-8") for path in migrations.FROZEN.glob("*.postgresql.sql"))
    for channel in migrations.CHANNELS:
        assert f"pg_notify('{channel}', '')" in frozen, channel


def test_every_step_is_in_the_table_at_the_top_of_migrations_py():
    """The table a newcomer reads names every step, by its number and name, in order."""
    import migrations

    rows = re.findall(r"^\| (\d+) \| ([a-z0-9_]+) \| .+ \|$", migrations.__doc__ or "", re.M)
    assert [(int(v), n) for v, n in rows] == [(v, n) for v, n, _ in MIGRATIONS]


def test_every_release_upgraded_on_postgresql_is_a_fresh_database(config, tmp_path):
    fresh_url = PG_URL + "_drift_fresh"
    recreate_database(fresh_url)
    fresh = bind_database(fresh_url, pooled=False)
    try:
        migrate(fresh)
    finally:
        fresh.close()
    want = pg_schema(fresh_url)
    assert "CREATE TABLE public.patient_request" in want
    upgraded = PG_URL + "_drift_upgraded"
    seen = releases()
    assert len(seen) >= 10, "the history holds the earlier releases"
    try:
        for version, commit in seen:
            recreate_database(upgraded)
            build_at(commit, upgraded, tmp_path)
            database = bind_database(upgraded, pooled=False)
            try:
                assert migrate(database), version
                assert migrate(database) == [], "an upgraded database is up to date"
            finally:
                database.close()
            assert pg_schema(upgraded) == want, f"the release at migration {version} ({commit[:10]}) upgraded"
    finally:
        bind_database(config.database_url, pool_size=config.db_pool_size)


def test_every_release_upgraded_on_sqlite_is_a_fresh_database(config, tmp_path):
    fresh = bind_database(f"sqlite:///{tmp_path}/fresh.db")
    try:
        migrate(fresh)
        fresh.close()
        want = sqlite_schema(tmp_path / "fresh.db")
        for version, commit in releases():
            path = tmp_path / f"release-{version}.db"
            build_at(commit, f"sqlite:///{path}", tmp_path)
            database = bind_database(f"sqlite:///{path}")
            try:
                migrate(database)
            finally:
                database.close()
            assert sqlite_schema(path) == want, f"the release at migration {version} ({commit[:10]}) upgraded"
    finally:
        bind_database(config.database_url, pool_size=config.db_pool_size)
