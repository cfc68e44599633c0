"""Per-token rate limits: `recording-complete` and the document writes.

Over its budget a token gets 429 `RATE_LIMITED` with `Retry-After`, after the token,
clinic and scope checks and before the body's; the count is in Redis, shared by every
web process (here: two app instances); other tokens, reads and traffic below the limit
are untouched; with Redis down every request passes. Every answer to a counted request
carries `RateLimit-Policy` and `RateLimit` (the IETF httpapi draft): the requests left
count down, are 0 on the 429, and are whole again once the window has passed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import pytest
import redis
import webtest

from app import create_app
from config import Config
from models import Call
from plumbing.database import db
from tests.conftest import REDIS_URL
from tests.support import bearer, bodies, clinic, issue_token, load, organization, switchboard_url
from tests.support.servers import wait_until
from web import openapi
from web.rate_limit import PAUSE_SECONDS, RateLimiter, Standing

HANDOFF = switchboard_url("clinic-a", "recording-complete")
IMPORT = "/external/v1/clinics/clinic-a/patients/import"
SEARCH = "/external/v1/clinics/clinic-a/patients/search"


@pytest.fixture
def limited_config(config: Config) -> Config:
    return replace(config, rate_limit_handoffs_per_minute=3, rate_limit_writes_per_minute=2)


@pytest.fixture
def web(app, limited_config) -> webtest.TestApp:
    """An app with 3 hand-offs and 2 document writes a minute per token, over the clean
    database of `app`."""
    load(organization(clinic("clinic-a", tz="America/New_York", country="US")))
    return webtest.TestApp(create_app(limited_config))


@pytest.fixture
def token(web) -> str:
    return issue_token(["clinic-a"], ["read", "write"])


def hand_off(client: webtest.TestApp, token: str, sid: str, status: int = 200, **body: Any) -> webtest.TestResponse:
    return client.post_json(HANDOFF, {**bodies.call_body(sid), **body}, headers=bearer(token), status=status)


def import_patient(client: webtest.TestApp, token: str, external_id: str, status: int = 200) -> webtest.TestResponse:
    return client.post_json(
        IMPORT,
        {"externalId": external_id, "externalIdSource": "signing", "firstName": "Jana", "lastName": "Nováková"},
        headers=bearer(token),
        status=status,
    )


def stored_calls() -> int:
    with db.connection_context():
        return Call.select().count()


def assert_limited(answer: webtest.TestResponse) -> None:
    assert answer.status_int == 429
    assert answer.json["code"] == "RATE_LIMITED" and set(answer.json) == {"error", "code", "rateLimit"}, answer.json
    assert 1 <= int(answer.headers["Retry-After"]) <= 60, answer.headers
    # The body's standing is the fields' numbers: a generated client reads it off the error object.
    policy, left = answer.json["rateLimit"], answer.headers["RateLimit"]
    assert answer.headers["RateLimit-Policy"] == f'"{policy["policy"]}";q={policy["limit"]};w={policy["window"]}'
    assert left == f'"{policy["policy"]}";r={policy["remaining"]};t={policy["reset"]}' and policy["remaining"] == 0


def test_hand_offs_over_the_limit_are_429_with_retry_after_and_not_stored(web, token):
    for i in range(3):
        hand_off(web, token, f"CA-limit-{i}")
    assert_limited(hand_off(web, token, "CA-limit-3", status=429))
    assert stored_calls() == 3, "a refused hand-off stores nothing"
    # The same token's retry of a stored call counts too: the budget is requests, not calls.
    assert_limited(hand_off(web, token, "CA-limit-0", status=429))


def test_429_comes_after_the_token_checks_and_before_the_body(web, token):
    for i in range(3):
        hand_off(web, token, f"CA-order-{i}")
    assert hand_off(web, "csk_nope_nope", "CA-x", status=401).json["code"] == "UNAUTHORIZED"
    read_only = issue_token(["clinic-a"], ["read"])
    assert hand_off(web, read_only, "CA-x", status=403).json["code"] == "FORBIDDEN"
    assert (
        web.post_json(
            switchboard_url("no-such-clinic", "recording-complete"),
            bodies.call_body("CA-x"),
            headers=bearer(token),
            status=404,
        ).json["code"]
        == "CLINIC_NOT_FOUND"
    )
    # Over the limit, an invalid body is not even read: 429, not 400.
    assert_limited(hand_off(web, token, "CA-x", status=429, CallFrom=None))


def test_other_tokens_reads_and_the_other_budget_are_untouched(web, token):
    for i in range(3):
        hand_off(web, token, f"CA-own-{i}")
    hand_off(web, token, "CA-own-3", status=429)
    other = issue_token(["clinic-a"], ["write"])
    hand_off(web, other, "CA-other-0")
    web.post_json(SEARCH, {}, headers=bearer(token), status=200)  # reads are not limited
    import_patient(web, token, "EXT-1")  # document writes have their own budget
    import_patient(web, token, "EXT-2")
    assert_limited(import_patient(web, token, "EXT-3", status=429))


def test_every_document_write_counts_against_one_budget(web, token):
    import_patient(web, token, "EXT-1")
    bulk = "/external/v1/clinics/clinic-a/patients/import-bulk"
    web.post_json(bulk, {"patients": []}, headers=bearer(token), status=400)  # refused bodies count as well
    assert_limited(web.post_json(bulk, {"patients": []}, headers=bearer(token), status=429))
    for path, method in (
        ("/patientRequests/create", "post_json"),
        ("/patientRequests/" + "0" * 32, "patch_json"),
        ("/patientRequests/" + "0" * 32 + "/attachments/upload-link", "post_json"),
        ("/patientRequests/" + "0" * 32 + "/attachments", "post_json"),
    ):
        answer = getattr(web, method)("/external/v1/clinics/clinic-a" + path, {}, headers=bearer(token), status=429)
        assert_limited(answer)


def test_a_second_web_process_shares_the_count(web, token, limited_config):
    """Two app instances, as two gunicorn processes or dynos: one budget in Redis."""
    second = webtest.TestApp(create_app(limited_config))
    hand_off(web, token, "CA-shared-0")
    hand_off(second, token, "CA-shared-1")
    hand_off(web, token, "CA-shared-2")
    assert_limited(hand_off(second, token, "CA-shared-3", status=429))
    assert_limited(hand_off(web, token, "CA-shared-4", status=429))


def test_a_switchboards_normal_traffic_never_meets_the_defaults(app):
    """The defaults (1200 hand-offs, 600 writes a minute per token): a busy group's
    burst of 300 calls, each sent twice (its retry), and 100 document writes all pass."""
    load(organization(clinic("clinic-a", tz="America/New_York", country="US")))
    client, token = app, issue_token(["clinic-a"], ["read", "write"])
    for i in range(300):
        hand_off(client, token, f"CA-busy-{i}")
        hand_off(client, token, f"CA-busy-{i}")
    for i in range(100):
        import_patient(client, token, f"EXT-{i}")
    assert stored_calls() == 300


def test_with_redis_down_every_request_passes(app, limited_config):
    down = replace(limited_config, redis_url="redis://127.0.0.1:1/0")
    load(organization(clinic("clinic-a", tz="America/New_York", country="US")))
    client, token = webtest.TestApp(create_app(down)), issue_token(["clinic-a"], ["write"])
    for i in range(6):
        hand_off(client, token, f"CA-down-{i}")
    for i in range(4):
        import_patient(client, token, f"EXT-{i}")
    assert stored_calls() == 6


def test_after_a_redis_error_the_limiter_does_not_ask_redis_again_for_a_while():
    """A Redis that hangs would cost every request a timeout; one per pause instead."""
    now = [100.0]
    limiter = RateLimiter(redis.Redis(host="127.0.0.1", port=1), {"handoffs": 1}, clock=lambda: now[0])
    limiter._script = mock.Mock(side_effect=redis.ConnectionError("down"))
    assert [limiter.retry_after("handoffs", "t") for _ in range(10)] == [None] * 10
    assert limiter._script.call_count == 1
    now[0] += PAUSE_SECONDS + 0.1
    assert limiter.retry_after("handoffs", "t") is None and limiter._script.call_count == 2


def test_the_openapi_document_lists_429_on_every_write_and_only_there():
    document = openapi.document()
    for path, item in document["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            writes = op.get("security") == [{"bearerAuth": ["write"]}]
            assert ("429" in op["responses"]) == writes, (method, path)
            if writes:
                assert "Retry-After" in op["responses"]["429"]["headers"]
                for status, answer in op["responses"].items():
                    if status not in ("401", "403", "404"):  # refused before the count
                        assert {"RateLimit", "RateLimit-Policy"} <= set(answer.get("headers", {})), (path, status)


def standing(answer: webtest.TestResponse) -> tuple[str, str]:
    return answer.headers["RateLimit-Policy"], answer.headers["RateLimit"]


def test_every_counted_answer_says_the_policy_and_the_requests_left_counting_down(web, token):
    first = hand_off(web, token, "CA-count-0")
    assert standing(first) == ('"handoffs";q=3;w=60', '"handoffs";r=2;t=20')
    # A refused body was counted before it was read: its 400 says so too.
    refused = hand_off(web, token, "CA-count-1", status=400, CallSid=None)
    assert refused.headers["RateLimit"].startswith('"handoffs";r=1;t=')
    third = hand_off(web, token, "CA-count-2")
    assert third.headers["RateLimit"] == '"handoffs";r=0;t=60'
    limited = hand_off(web, token, "CA-count-3", status=429)
    assert_limited(limited)
    assert standing(limited) == ('"handoffs";q=3;w=60', '"handoffs";r=0;t=60')
    assert limited.json["rateLimit"] == {"policy": "handoffs", "limit": 3, "window": 60, "remaining": 0, "reset": 60}
    # The document writes are their own budget, with their own policy.
    assert standing(import_patient(web, token, "EXT-1")) == ('"writes";q=2;w=60', '"writes";r=1;t=30')
    # Reads are not counted, and say nothing of a budget.
    read = web.post_json(SEARCH, {}, headers=bearer(token), status=200)
    assert "RateLimit" not in read.headers and "RateLimit-Policy" not in read.headers


def test_the_requests_left_are_whole_again_once_the_window_has_passed():
    """A budget of 3 in a 2-second window: counted down to 0, refused, then whole again."""
    connection = redis.Redis.from_url(REDIS_URL)
    connection.delete("clinic:rate:handoffs:window-token")
    limiter = RateLimiter(connection, {"handoffs": 3}, period_ms=2000)
    counted = [limiter.count("handoffs", "window-token") for _ in range(4)]
    assert [(s.wait, s.remaining) for s in counted if s] == [(None, 2), (None, 1), (None, 0), (1, 0)]
    last = counted[-1]
    assert (
        isinstance(last, Standing)
        and last.reset == 2
        and last.headers()
        == {
            "RateLimit-Policy": '"handoffs";q=3;w=2',
            "RateLimit": '"handoffs";r=0;t=2',
        }
    )
    # The bucket's key expires when it is full again: then the whole quota is back.
    assert wait_until(lambda: not connection.exists("clinic:rate:handoffs:window-token"), timeout=10)
    again = limiter.count("handoffs", "window-token")
    assert again is not None and (again.wait, again.remaining) == (None, 2)


def test_with_redis_down_no_budget_is_claimed(app, limited_config):
    down = replace(limited_config, redis_url="redis://127.0.0.1:1/0")
    load(organization(clinic("clinic-a", tz="America/New_York", country="US")))
    client, token = webtest.TestApp(create_app(down)), issue_token(["clinic-a"], ["write"])
    assert "RateLimit" not in hand_off(client, token, "CA-uncounted").headers
