"""SECRET_KEY as a key ring (plumbing/crypto.py): the new key signs and encrypts, the old
one in SECRET_KEY_FALLBACKS still verifies and decrypts, `manage.py reencrypt` moves the
stored secrets to the new key, and once the old key is retired what only it could open
is refused.

Three web apps stand for three deployments of the same database and Redis: `first`
(SECRET_KEY=K1), `rotated` (SECRET_KEY=K2, SECRET_KEY_FALLBACKS=K1) and `retired`
(SECRET_KEY=K2 alone). Console sessions are server-side random tokens, not derived from
the key: they survive both changes (a leaked key opens none of them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pyotp
import pytest
import redis
import webtest

import manage
from app import create_app
from config import Config, InsecureConfiguration
from console.flash import Flash
from models import Clinic, StaffMembership, StaffUser
from onboarding.writer import onboard
from plumbing import clock, crypto
from plumbing.database import db
from staff.passwords import hash_password
from storage import make_storage
from tests.conftest import REDIS_URL
from tests.support import clinic, organization
from voicemail import platform

K1 = "first-key-" + "1" * 40
K2 = "second-key-" + "2" * 40
PASSWORD = "correct horse battery"
PLATFORM = {"apiUrl": "https://pbx.example.net/api", "username": "clinic-a", "password": "platform-secret"}


class Deployment:
    def __init__(self, settings: Config) -> None:
        self.config = settings
        self.app = create_app(settings)

    def client(self, cookies_of: webtest.TestApp | None = None) -> webtest.TestApp:
        client = webtest.TestApp(self.app)
        if cookies_of is not None:
            client.cookiejar = cookies_of.cookiejar  # the same browser, on another deployment
        return client


@pytest.fixture
def deployments(app, config, tmp_path) -> Iterator[dict[str, Deployment]]:
    session_database = db.obj

    def deployment(**keys: str) -> Deployment:  # the storage's signing keys derived from the ring
        return Deployment(replace(config, storage_dir=str(tmp_path / "storage"), storage_signing_key="", **keys))

    made = {
        "first": deployment(secret_key=K1),
        "rotated": deployment(secret_key=K2, secret_key_fallbacks=K1),
        "retired": deployment(secret_key=K2),
    }
    try:
        with db.connection_context():
            onboard(organization(clinic("clinic-a", switchboard=PLATFORM)), secret_key=K1, now=clock.now())
            anna = StaffUser.create(email="anna@example.cz", name="Anna", password_hash=hash_password(PASSWORD))
            StaffMembership.create(user=anna, clinic=Clinic.get(Clinic.slug == "clinic-a"), role="admin")
        yield made
    finally:
        db.initialize(session_database)


def log_in(client: webtest.TestApp, status: int = 303) -> webtest.TestResponse:
    form = client.get("/console/login").forms[0]
    form["email"], form["password"] = "anna@example.cz", PASSWORD
    return form.submit(status=status)


def code_login(client: webtest.TestApp, code: str, status: int = 303) -> webtest.TestResponse:
    form = client.get("/console/login/code").forms[0]
    form["code"] = code
    return form.submit(status=status)


def platform_password(keys: crypto.Keys) -> str | None:
    with db.connection_context():
        found = platform.credentials_of(Clinic.get(Clinic.slug == "clinic-a"), keys)
    return found.password if found is not None else None


def reencrypt(settings: Config, *args: str) -> int:
    return manage.main(["reencrypt", *args], config=settings)


def test_a_rotated_key_keeps_sessions_messages_passwords_and_links_until_the_old_one_is_retired(
    deployments, clock, tmp_path
):
    first, rotated, retired = deployments["first"], deployments["rotated"], deployments["retired"]

    # Under K1: a session, a two-factor enrolment (its secret encrypted, its recovery codes a
    # one-time message), a platform password, a document's download link.
    browser = first.client()
    log_in(browser)
    page = browser.get("/console/account/two-factor")
    totp = page.html.find(id="secret").text.replace(" ", "")
    enrol = page.forms["enrol"]
    enrol["code"] = pyotp.TOTP(totp).at(clock())
    enrol.submit(status=303)  # the recovery codes wait as a one-time message, sealed with K1
    storage = make_storage(first.config)
    upload = storage.presign_put("clinic-a/doc.pdf", "application/pdf", 600)
    first.client().put(
        upload[upload.index("/storage/") :], b"%PDF-1.4 signed", content_type="application/pdf", status=200
    )
    link = storage.presign_get(
        "clinic-a/doc.pdf", 3600, content_type="application/pdf", disposition="attachment", filename="doc.pdf"
    )
    link = link[link.index("/storage/") :]

    # SECRET_KEY=K2, SECRET_KEY_FALLBACKS=K1: everything K1 made still works.
    same_browser = rotated.client(cookies_of=browser)
    shown = same_browser.get("/console/account/two-factor")
    assert len(shown.html.select("ol.codes code")) == 10, "the message sealed with K1 is read once"
    assert platform_password(rotated.config.secret_keys) == "platform-secret"
    assert rotated.client().get(link, status=200).body == b"%PDF-1.4 signed"
    clock.set(clock() + timedelta(seconds=30))
    fresh = rotated.client()
    assert log_in(fresh).headers["Location"].endswith("/console/login/code")
    assert code_login(fresh, pyotp.TOTP(totp).at(clock())).headers["Location"].endswith("/console/")
    # What it makes now is under K2 alone.
    new_link = make_storage(rotated.config).presign_get(
        "clinic-a/doc.pdf", 3600, content_type="application/pdf", disposition="attachment", filename="doc.pdf"
    )
    assert retired.client().get(new_link[new_link.index("/storage/") :], status=200)
    sealed = rotated.config.secret_keys.encrypt("x")
    assert crypto.KeyRing(K2).decrypt(sealed) == "x"

    # K1 retired before the stored secrets were moved: they are refused, and so are K1's
    # link and messages; the sessions are not the key's (server-side random tokens).
    assert platform_password(retired.config.secret_keys) is None
    clock.set(clock() + timedelta(seconds=30))
    refused = retired.client()
    log_in(refused)
    code_login(refused, pyotp.TOTP(totp).at(clock()), status=401)
    assert retired.client().get(link, status=403).json["code"] == "FORBIDDEN"
    retired.client(cookies_of=browser).get("/console/", status=200)

    # manage.py reencrypt moves them (with the ring), and then K2 alone opens them.
    assert reencrypt(rotated.config, "--check") == 1
    assert reencrypt(rotated.config) == 0
    assert reencrypt(retired.config, "--check") == 0
    assert platform_password(retired.config.secret_keys) == "platform-secret"
    clock.set(clock() + timedelta(seconds=30))
    again = retired.client()
    log_in(again)
    assert code_login(again, pyotp.TOTP(totp).at(clock())).headers["Location"].endswith("/console/")
    retired.client().get(link, status=403)  # links are not stored: K1's end with K1


def test_a_one_time_message_sealed_with_the_old_key_is_read_with_the_ring_and_refused_without_it():
    client = redis.Redis.from_url(REDIS_URL)
    Flash(client, K1).bound("cookie-token", "session-1").put("keys", {"secret": "shown once"})
    Flash(client, K1).bound("cookie-token", "session-2").put("keys", {"secret": "shown once"})
    assert Flash(client, crypto.KeyRing(K2, [K1])).bound("cookie-token", "session-1").take("keys") == {
        "secret": "shown once"
    }
    assert Flash(client, crypto.KeyRing(K2)).bound("cookie-token", "session-2").take("keys") is None


def test_reencrypt_leaves_a_secret_no_key_opens_and_says_so(deployments, capsys):
    rotated = deployments["rotated"]
    with db.connection_context():
        Clinic.update(platform_password_encrypted=crypto.encrypt("lost", "another-key-" + "3" * 40)).execute()
    assert reencrypt(rotated.config) == 1
    said = capsys.readouterr().err
    assert "platform password(s): 0 re-encrypted, 0 already under SECRET_KEY, 1 under no key" in said
    assert "set them again" in said


@pytest.mark.parametrize("fallbacks", ["short", f"{K1},", f"{K1[:20]},{K1[20:]}"])
def test_a_fallback_key_too_short_to_be_one_stops_a_production_process(fallbacks):
    """A key holding a comma would be split into pieces: each too short, refused loudly
    rather than silently failing to decrypt."""
    settings = Config(database_url="postgresql://x@127.0.0.1/x", secret_key=K2, secret_key_fallbacks=fallbacks)
    if fallbacks == f"{K1},":
        settings.require_production_secrets()  # an empty item is no key: nothing to refuse
        assert settings.fallback_keys == [K1]
        return
    with pytest.raises(InsecureConfiguration, match="SECRET_KEY_FALLBACKS"):
        settings.require_production_secrets()


def test_the_fallbacks_are_masked_where_settings_are_printed():
    described = Config(secret_key=K2, secret_key_fallbacks=K1).describe()
    assert described["secret_key_fallbacks"] == "***" and K1 not in str(described)
