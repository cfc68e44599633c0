"""PostgreSQL databases the tests and benchmarks own."""
from __future__ import annotations

from urllib.parse import urlparse

import psycopg2


def recreate_database(url: str) -> None:
    """Drop the database `url` names (its sessions ended: WITH (FORCE)) and create it
    empty, through the server's `postgres` database, as the URL's user (default
    `postgres`) with its password, if any."""
    parts = urlparse(url)
    name = parts.path.lstrip("/")
    admin = psycopg2.connect(host=parts.hostname, port=parts.port or 5432, user=parts.username or "postgres",
                             password=parts.password, dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    admin.close()
