"""Staff logins in the onboarding file (`users`): password hashes only, roles in the
document's clinics, the same file twice changes nothing, and no account of another
organization is taken over."""

from __future__ import annotations

import subprocess
import sys

import pytest

from models import Clinic, StaffMembership, StaffSession, StaffUser
from onboarding.writer import OnboardingError
from plumbing.database import db
from staff.passwords import hash_password
from tests.conftest import ROOT
from tests.support import clinic, load, organization
from tests.support.console import login

PASSWORD = "a long enough password"


def document(users: list[dict], slug: str = "org-a", clinics: tuple[str, ...] = ("clinic-a", "clinic-b")) -> dict:
    doc = organization(*(clinic(c) for c in clinics))
    doc["organization"]["slug"] = doc["organization"]["name"] = slug
    doc["users"] = users
    return doc


def eva(**changes) -> dict:
    """Eva's entry; a change to None leaves the field out."""
    user = {
        "email": "Eva@Example.cz",
        "name": "Eva Malá",
        "language": "en",
        "passwordHash": hash_password(PASSWORD),
        "clinics": [{"clinic": "clinic-a", "role": "admin"}, {"clinic": "clinic-b", "role": "staff"}],
        **changes,
    }
    return {k: v for k, v in user.items() if v is not None}


def roles(email: str) -> dict[str, str]:
    with db.connection_context():
        return {m.clinic.slug: m.role for m in StaffMembership.select().join(StaffUser).where(StaffUser.email == email)}


def test_a_user_from_the_file_logs_in_with_the_hashed_password_and_its_roles(app):
    doc = document([eva()])
    assert "1 user(s)" in load(doc)
    assert roles("eva@example.cz") == {"clinic-a": "admin", "clinic-b": "staff"}
    login(app, email="eva@example.cz", password=PASSWORD, status=303)
    assert "Inbox" in app.get("/console/").text, "the file's language"
    assert "0 change(s)" in load(doc), "the same file twice changes nothing"


def test_roles_follow_the_file_and_a_new_hash_or_a_disable_ends_the_sessions(app):
    load(document([eva()]))
    login(app, email="eva@example.cz", password=PASSWORD, status=303)
    load(document([eva(clinics=[{"clinic": "clinic-b", "role": "admin"}], passwordHash=None)]))
    assert roles("eva@example.cz") == {"clinic-b": "admin"}
    with db.connection_context():
        assert StaffSession.select().count() == 1, "no new hash: the session stays"
    load(
        document(
            [eva(clinics=[{"clinic": "clinic-b", "role": "admin"}], passwordHash=hash_password("another password"))]
        )
    )
    with db.connection_context():
        assert StaffSession.select().count() == 0
    app.get("/console/", status=303)
    load(document([eva(disabled=True, passwordHash=None)]))
    login(app, email="eva@example.cz", password="another password", status=401)


@pytest.mark.parametrize(
    "user, where",
    [
        ({"password": PASSWORD}, "users[0]"),  # a plain password is no field of the file
        ({"passwordHash": "plain text"}, "users[0].passwordHash"),
        ({"passwordHash": "$argon2id$v=19$m=1,t=1,p=1$garbage"}, "users[0].passwordHash"),
        ({"clinics": [{"clinic": "elsewhere", "role": "staff"}]}, "users[0].clinics[0].clinic"),
        ({"clinics": [{"clinic": "clinic-a", "role": "owner"}]}, "users[0].clinics[0].role"),
    ],
)
def test_bad_users_are_refused_with_the_field_named_and_nothing_written(app, user, where):
    with pytest.raises(OnboardingError) as refused:
        load(document([eva(**user)]))
    assert refused.value.path == where, str(refused.value)
    with db.connection_context():
        assert StaffUser.select().count() == 0 and Clinic.select().count() == 0


def test_a_new_user_needs_a_hash_and_emails_are_unique(app):
    with pytest.raises(OnboardingError, match=r"users\[0\]\.passwordHash: required"):
        load(document([eva(passwordHash=None)]))
    with pytest.raises(OnboardingError, match=r"users\[1\]\.email: duplicate"):
        load(document([eva(), eva(email="eva@EXAMPLE.cz")]))


def test_another_organizations_file_cannot_take_over_an_account(app):
    load(document([eva()]))
    with db.connection_context():
        before = StaffUser.get(StaffUser.email == "eva@example.cz").password_hash
    theirs = document(
        [eva(passwordHash=hash_password("the attacker's"), clinics=[{"clinic": "clinic-x", "role": "admin"}])],
        slug="org-x",
        clinics=("clinic-x",),
    )
    with pytest.raises(OnboardingError, match=r"users\[0\]\.email: eva@example.cz works for another organization"):
        load(theirs)
    with db.connection_context():
        assert StaffUser.get(StaffUser.email == "eva@example.cz").password_hash == before


def test_the_cli_prints_a_hash_the_file_accepts(app):
    done = subprocess.run(
        [sys.executable, "manage.py", "user", "hash-password", "--password-stdin"],
        cwd=ROOT,
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.strip()
    assert printed.startswith("$argon2id$") and PASSWORD not in done.stdout
    load(document([eva(passwordHash=printed)]))
    login(app, email="eva@example.cz", password=PASSWORD, status=303)
