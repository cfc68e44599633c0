"""Spec section 5 (authentication) and section 7 (errors), for every switchboard check,
plus the error conventions of docs/design.md: one `{error, code}` body for every failure."""

from __future__ import annotations

from datetime import timedelta

import pytest

import manage
from models import ApiToken
from plumbing.database import db
from tests.support import assert_error, bearer, issue_token, switchboard_url

CHECKS = [("is-clinic-opened", None), ("is-on-vacation", {}), ("has-active-request", {"callFrom": "+420601123456"})]


def post(app, slug, check, body, headers=None, status=None):
    url = switchboard_url(slug, check)
    if body is None:
        return app.post(url, headers=headers or {}, status=status)
    return app.post_json(url, body, headers=headers or {}, status=status)


@pytest.mark.parametrize("check, body", CHECKS)
class TestEveryCheck:
    def test_valid_read_token_gets_200(self, app, two_clinics, check, body):
        resp = post(app, "clinic-a", check, body, bearer(issue_token(["clinic-a"], ["read"])), status=200)
        assert next(iter(resp.json.values())) in (True, False)

    def test_missing_token_401(self, app, two_clinics, check, body):
        resp = post(app, "clinic-a", check, body, status=401)
        assert_error(resp, 401, "UNAUTHORIZED")
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")

    @pytest.mark.parametrize(
        "header",
        [
            "Bearer",
            "Bearer ",
            "Basic dXNlcjpwYXNz",
            "Token abc",
            "Bearer nonsense",
            "Bearer csk_00000000000000000000000000000000_secret",
            "Bearer csk_zz_secret",
        ],
    )
    def test_malformed_or_unknown_token_401(self, app, two_clinics, check, body, header):
        assert_error(post(app, "clinic-a", check, body, {"Authorization": header}, status=401), 401, "UNAUTHORIZED")

    def test_wrong_secret_for_a_real_token_id_401(self, app, two_clinics, check, body):
        token = issue_token(["clinic-a"], ["read"])
        forged = token[: token.rindex("_") + 1] + "A" * 43
        assert_error(post(app, "clinic-a", check, body, bearer(forged), status=401), 401, "UNAUTHORIZED")

    def test_revoked_token_refused_at_once(self, app, two_clinics, check, body):
        token = issue_token(["clinic-a"], ["read"])
        post(app, "clinic-a", check, body, bearer(token), status=200)
        token_id = token.split("_")[1]
        assert manage.main(["token", "revoke", str(__import__("uuid").UUID(token_id))], _config()) == 0
        assert_error(post(app, "clinic-a", check, body, bearer(token), status=401), 401, "UNAUTHORIZED")

    def test_expired_token_401(self, app, two_clinics, clock, check, body):
        issued = clock()
        token = issue_token(["clinic-a"], ["read"], expires_in=timedelta(days=1))  # by the service's one clock
        clock.set(issued + timedelta(hours=23))
        post(app, "clinic-a", check, body, bearer(token), status=200)
        clock.set(issued + timedelta(days=1, seconds=1))
        assert_error(post(app, "clinic-a", check, body, bearer(token), status=401), 401, "UNAUTHORIZED")

    def test_unknown_clinic_404(self, app, two_clinics, check, body):
        token = issue_token(["clinic-a"], ["read"])
        assert_error(post(app, "no-such-clinic", check, body, bearer(token), status=404), 404, "CLINIC_NOT_FOUND")

    def test_token_without_access_to_the_clinic_403(self, app, two_clinics, check, body):
        token = issue_token(["clinic-b"], ["read"])
        assert_error(post(app, "clinic-a", check, body, bearer(token), status=403), 403, "FORBIDDEN")

    def test_token_lacking_the_read_scope_403(self, app, two_clinics, check, body):
        token = issue_token(["clinic-a"], ["write"])
        assert_error(post(app, "clinic-a", check, body, bearer(token), status=403), 403, "FORBIDDEN")

    def test_one_token_can_cover_all_clinics(self, app, two_clinics, check, body):
        token = issue_token(["clinic-a", "clinic-b"], ["read"])
        for slug in ("clinic-a", "clinic-b"):
            post(app, slug, check, body, bearer(token), status=200)

    def test_wrong_method_405(self, app, two_clinics, check, body):
        token = issue_token(["clinic-a"], ["read"])
        for method in (app.get, app.delete):
            resp = method(switchboard_url("clinic-a", check), headers=bearer(token), status=405)
            assert_error(resp, 405, "METHOD_NOT_ALLOWED")
            assert "POST" in resp.headers["Allow"]


def _config():
    from config import Config
    from tests.conftest import PG_URL, REDIS_URL

    return Config(database_url=PG_URL, redis_url=REDIS_URL)


def test_check_order_token_then_clinic_then_access_then_body(app, two_clinics):
    url = switchboard_url("no-such-clinic", "has-active-request")
    # Bad body and unknown clinic, no token: 401 comes first.
    assert_error(app.post(url, "{bad", headers={"Content-Type": "application/json"}, status=401), 401, "UNAUTHORIZED")
    # Valid token but unknown clinic: 404 before 403 (the token covers no such clinic).
    other = issue_token(["clinic-b"], ["write"])
    assert_error(
        app.post(url, "{bad", headers={**bearer(other), "Content-Type": "application/json"}, status=404),
        404,
        "CLINIC_NOT_FOUND",
    )
    # Known clinic, no access, bad body: 403 before 400.
    url = switchboard_url("clinic-a", "has-active-request")
    assert_error(
        app.post(url, "{bad", headers={**bearer(other), "Content-Type": "application/json"}, status=403),
        403,
        "FORBIDDEN",
    )
    # Everything right but the body: 400.
    good = issue_token(["clinic-a"], ["read"])
    assert_error(
        app.post(url, "{bad", headers={**bearer(good), "Content-Type": "application/json"}, status=400),
        400,
        "VALIDATION_FAILED",
    )


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/nope",
        "/external/v1/clinics/clinic-a/switchboard/unknown-check",
        "/external/v2/clinics/clinic-a/switchboard/is-clinic-opened",
    ],
)
def test_unknown_route_is_a_json_404(app, path):
    assert_error(app.post(path, status=404), 404, "NOT_FOUND")
    assert_error(app.get(path, status=404), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    "raw", ["{bad", "[1, 2]", '"text"', "42", "null", '{"callFrom": "+420601123456"', b"\xff\xfe{}"]
)
def test_malformed_json_or_non_object_is_400(app, two_clinics, raw):
    token = issue_token(["clinic-a"], ["read"])
    resp = app.post(
        switchboard_url("clinic-a", "has-active-request"),
        raw,
        headers={**bearer(token), "Content-Type": "application/json"},
        status=400,
    )
    assert_error(resp, 400, "VALIDATION_FAILED")


def test_empty_body_where_fields_are_needed_is_400(app, two_clinics):
    token = issue_token(["clinic-a"], ["read"])
    resp = app.post(switchboard_url("clinic-a", "has-active-request"), headers=bearer(token), status=400)
    assert_error(resp, 400, "VALIDATION_FAILED")


def test_non_json_content_type_is_415(app, two_clinics):
    token = issue_token(["clinic-a"], ["read"])
    resp = app.post(
        switchboard_url("clinic-a", "is-on-vacation"),
        "calendarIds=x",
        headers={**bearer(token), "Content-Type": "application/x-www-form-urlencoded"},
        status=415,
    )
    assert_error(resp, 415, "UNSUPPORTED_MEDIA_TYPE")


def test_a_body_without_content_type_is_read_as_json(app, two_clinics):
    """README: a switchboard that omits the header is not refused (a hand-off refused
    for a missing header would be a voicemail lost); any other type is 415 (above)."""
    token = issue_token(["clinic-a"], ["read"])
    url = switchboard_url("clinic-a", "has-active-request")
    resp = app.request(url, method="POST", body=b'{"callFrom": "+420 777 000 111"}', headers=bearer(token))
    assert "Content-Type" not in resp.request.headers and resp.request.content_type == ""
    assert resp.status_int == 200 and resp.json == {"hasActiveRequest": False}
    bad = app.request(url, method="POST", body=b"callFrom=1", headers=bearer(token), expect_errors=True)
    assert_error(bad, 400, "VALIDATION_FAILED")  # read as JSON, and it is not JSON


def test_body_over_the_limit_is_413_before_reading(app, two_clinics):
    token = issue_token(["clinic-a"], ["read"])
    big = b'{"callFrom": "' + b"1" * 2_000_000 + b'"}'
    resp = app.post(
        switchboard_url("clinic-a", "has-active-request"),
        big,
        headers={**bearer(token), "Content-Type": "application/json"},
        status=413,
    )
    assert_error(resp, 413, "PAYLOAD_TOO_LARGE")


def test_unknown_fields_are_ignored(app, two_clinics):
    token = issue_token(["clinic-a"], ["read"])
    resp = post(app, "clinic-a", "is-on-vacation", {"somethingElse": [1, 2]}, bearer(token), status=200)
    assert set(resp.json) == {"isOnVacation"}


def test_tokens_are_stored_only_as_hashes(app, two_clinics):
    token = issue_token(["clinic-a"], ["read"])
    secret = token.split("_", 2)[2]
    with db.connection_context():
        row = ApiToken.get()
        stored = " ".join(str(v) for v in row.__data__.values())
    assert secret not in stored and token not in stored


def test_last_used_is_recorded(app, two_clinics):
    token = issue_token(["clinic-a"], ["read"])
    post(app, "clinic-a", "is-on-vacation", {}, bearer(token), status=200)
    with db.connection_context():
        assert ApiToken.get().last_used_at is not None
