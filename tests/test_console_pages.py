"""The console's addresses come from one place (console/pages.py): the templates, the
middleware and the responders use it, and the routes are built from it; and the header
every page draws asks the database nothing of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playhouse.pool import PooledDatabase

from console import pages
from models import Clinic, StaffMembership, StaffUser
from plumbing.database import db
from staff.passwords import hash_password
from tests.conftest import ROOT
from tests.support import clinic, load, organization

PASSWORD = "correct horse battery"
CONSOLE_CODE = [ROOT / "app.py", *(ROOT / "console").rglob("*.py"), *(ROOT / "resources" / "console").rglob("*.py")]


def test_no_console_address_is_written_out_but_in_console_pages():
    written = []
    for path in sorted((ROOT / "console" / "templates").rglob("*.html")):
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if re.search(r"""(href|action|src|data-[a-z]+)=["']/""", line) or '"/console' in line:
                written.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    for path in CONSOLE_CODE:
        if path.name == "pages.py":
            continue
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            # a string that starts a console address (docstrings name pages in words, not in quotes)
            if re.search(r"""(?<!["'])["']/console|f["']/console|\}/console""", code):
                written.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not written, "\n".join(written)


def test_the_settings_index_names_every_settings_page_in_one_declared_order(wsgi_app):
    """Every settings page the router serves is a section of the index, in the order the
    settings module declares, whatever modules a process happened to import (a fresh
    interpreter importing the settings module alone sees them all)."""
    import json
    import subprocess
    import sys

    served = {
        route.uri_template
        for route in _routes(wsgi_app._router._roots)
        if re.fullmatch(re.escape(pages.SETTINGS) + r"/[a-z-]+", route.uri_template)
    }
    alone = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from console import settings; print(json.dumps(settings.SECTIONS))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    sections = json.loads(alone.stdout)
    assert [s["url"] for s in sections] == [
        pages.OFFICE_HOURS,
        pages.CALENDARS,
        pages.CALLS,
        pages.REQUEST_TYPES,
        pages.RETENTION,
        pages.API_KEYS,
        pages.WEBHOOKS,
        pages.STAFF,
    ]
    assert {s["url"] for s in sections} == served
    assert all(s["title"] for s in sections)


def test_every_console_route_is_an_address_of_console_pages(wsgi_app):
    """The router's console templates are exactly what console/pages.py builds."""
    routes = {
        route.uri_template for route in _routes(wsgi_app._router._roots) if route.uri_template.startswith("/console")
    }
    built = {
        pages.PREFIX,
        pages.ROWS,
        pages.LOGIN,
        pages.LOGIN_CODE,
        pages.FORGOT,
        pages.LOGOUT,
        pages.LANGUAGE,
        pages.ACCOUNT,
        pages.TWO_FACTOR,
        pages.SETTINGS,
        pages.OFFICE_HOURS,
        pages.CALENDARS,
        pages.CALLS,
        pages.REQUEST_TYPES,
        pages.API_KEYS,
        pages.STAFF,
        pages.AUDIT,
        pages.READS,
        pages.HELP,
        pages.request("{request_id}"),
        pages.request_note("{request_id}"),
        pages.request_tags("{request_id}"),
        pages.request_resolution("{request_id}"),
        pages.request_type("{request_id}"),
        pages.request_transcript("{request_id}"),
        pages.request_urgent("{request_id}"),
        pages.recording("{request_id}"),
        pages.recording_state("{request_id}"),
        pages.document("{request_id}", "{document_id}"),
        pages.password_link("{token}"),
        pages.api_key_rotation("{token_id}"),
        pages.api_key_revocation("{token_id}"),
        pages.WEBHOOKS,
        pages.webhook_action("{endpoint_id}"),
        pages.webhook_send_again("{delivery_id}"),
        pages.guide("{name}"),
        pages.guide_image("{name}"),
        pages.static("{name}"),
        pages.RETENTION,
        pages.patient("{patient_id}"),
        pages.patient_copy("{patient_id}"),
        pages.patient_erasure("{patient_id}"),
    }
    assert routes == built, (routes - built, built - routes)


def _routes(nodes):
    for node in nodes:
        if node.resource is not None:
            yield node
        yield from _routes(node.children)


@pytest.fixture
def admin(app):
    load(organization(clinic("clinic-a")))
    with db.connection_context():
        user = StaffUser.create(email="eva@example.cz", name="Eva Dvořáková", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == "clinic-a"), role="admin")
    page = app.get(pages.LOGIN).forms[0]
    page["email"], page["password"] = "eva@example.cz", PASSWORD
    page.submit(status=303)
    return user


class Counted:
    """Counts the statements the app's pooled database runs."""

    def __init__(self, database: PooledDatabase) -> None:
        self.database, self.statements = database, []
        self._execute = database.execute_sql

    def __enter__(self) -> Counted:
        def execute_sql(sql, params=None, *args, **kwargs):
            self.statements.append(sql)
            return self._execute(sql, params, *args, **kwargs)

        self.database.execute_sql = execute_sql
        return self

    def __exit__(self, *exc) -> None:
        del self.database.execute_sql


def test_the_header_asks_the_database_nothing_of_its_own(admin, app):
    """The help page reads no row of its own: what it asks is the session (with the admin
    role, for the header's links) and nothing per render."""
    app.get(pages.HELP)  # the session's once-a-minute touch out of the way
    with Counted(db.obj) as counted:
        page = app.get(pages.HELP)
    assert page.html.find("a", href=pages.SETTINGS) is not None, "an admin's header links the settings"
    selects = [sql for sql in counted.statements if sql.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1 and "staff_session" in selects[0], counted.statements


def test_the_admin_role_comes_with_the_session(admin, app):
    with db.connection_context():
        StaffMembership.update(role="staff").execute()
    page = app.get(pages.HELP)
    assert page.html.find("a", href=pages.SETTINGS) is None, "no longer an admin: no settings link"
    assert page.html.find("a", href=pages.AUDIT) is None


def test_the_split_modules_stay_under_600_lines():
    for path in [*CONSOLE_CODE, *Path(ROOT / "web").rglob("*.py"), *Path(ROOT / "staff").rglob("*.py")]:
        assert len(path.read_text("utf-8").splitlines()) <= 600, path
