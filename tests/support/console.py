"""pytest plugin: the staff console's WebTest helpers the console's test modules share:
the `staff` fixture (anna, a staff member of clinic-a), logging in, a page's CSRF token, an
inbox form, a request made from a call."""

from __future__ import annotations

from datetime import timedelta

import pytest

from models import Call, Clinic, Patient, PatientRequest, StaffMembership, StaffUser
from plumbing.clock import as_utc
from plumbing.database import db
from staff.passwords import hash_password
from tests.conftest import ROOT
from tests.support import clinic, load, organization
from tests.support.clocks import WEDNESDAY

PASSWORD = "correct horse battery"


@pytest.fixture
def staff(app):
    """clinic-a and clinic-b; anna works for clinic-a (`app` cleared the login counters)."""
    load(organization(clinic("clinic-a"), clinic("clinic-b")))
    with db.connection_context():
        user = StaffUser.create(email="anna@example.cz", name="Anna Nováková", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.get(Clinic.slug == "clinic-a"), role="staff")
    return user


def login(app, email: str = "anna@example.cz", password: str = PASSWORD, status: int | str = "*", **environ):
    page = app.get("/console/login", extra_environ=environ)
    form = page.forms[0]
    form["email"], form["password"] = email, password
    return form.submit(status=status, extra_environ=environ)


def csrf_of(page) -> str:
    return page.html.find("input", {"name": "csrf_token"})["value"]


def form_to(page, action_end: str):
    """The page's (first) form posting to a path ending with `action_end`."""
    return next(f for f in page.forms.values() if (f.action or "").endswith(action_end))


def make(
    slug: str,
    kind: str,
    *,
    name: tuple[str, str] = ("", ""),
    phone: str = "+420601123456",
    transcript: str | None = None,
    status: str | None = None,
    minutes: int = 0,
    **call_fields,
) -> PatientRequest:
    with db.connection_context():
        clinic = Clinic.get(Clinic.slug == slug)
        patient = Patient.create(
            organization=clinic.organization_id, first_name=name[0], last_name=name[1], phone=phone
        )
        call = Call.create(
            clinic=clinic,
            call_sid=f"CA{kind}{minutes}{slug}{phone}",
            call_from=phone,
            call_to="+420222000111",
            state="done",
            outcome=kind,
            transcript=transcript,
            transcript_status=status,
            transcript_language="cs" if transcript else None,
            received_at=as_utc(WEDNESDAY + timedelta(minutes=minutes)),
            **call_fields,
        )
        return PatientRequest.create(
            clinic=clinic,
            patient=patient,
            kind=kind,
            title=kind,
            call=call,
            created_at=as_utc(WEDNESDAY + timedelta(minutes=minutes)),
        )


PO = ROOT / "console" / "locale" / "cs" / "LC_MESSAGES" / "messages.po"


def cs(text: str) -> str:
    """Czech text as the console and the e-mails show it: a non-breaking space after each
    one-letter word (plumbing.catalogue.typeset), for comparing with what they say."""
    from plumbing.catalogue import typeset

    return typeset(text, "cs")
