"""The request's kind as a field (create, search, detail), `filter.kind` on the request
search, and what the detail's `call` shows about a voicemail (DESIGN: "The request's
kind ... is a field of the request"; docs/integrators/switchboard.md).

Requests made from calls are inserted as rows (Call + PatientRequest), as the ingest job
writes them; the ingest itself is exercised end to end in test_call_handoff.py.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
import webtest
from jsonschema import Draft202012Validator
from playhouse.pool import PooledDatabase

from models import Call, Clinic, Patient, PatientRecord, PatientRequest
from plumbing.clock import as_utc
from plumbing.database import db
from tests.support import bearer
from tests.support.documented import documented, inlined
from tests.support.live_service import api, patient_id, type_id
from web import openapi

SEARCH = "/patientRequests/search"
EXTRA = '{"flow": "voicemail", "ivr": [1, 2], "note": "Ž"}'


def _now(clock) -> datetime:
    return as_utc(clock())


def call_request(
    slug: str, kind: str, *, patient: str | None = None, created_at: datetime | None = None, **call_fields: Any
) -> str:
    """A request made from a call, as the ingest job leaves it; returns the request id.
    Without `patient`, a new caller patient with a record in the clinic."""
    with db.connection_context():
        clinic = Clinic.by_slug(slug)
        if patient is None:
            caller = Patient.create(organization=clinic.organization_id, phone="+420777000111")
            PatientRecord.create(patient=caller, clinic=clinic)
            patient = str(caller.id)
        fields = {
            "call_sid": f"CA-{uuid.uuid4().hex[:12]}",
            "call_from": "+420 777 000 111",
            "call_to": "+420222333444",
            "status": "completed",
            "state": "done",
            "outcome": kind,
            **call_fields,
        }
        call = Call.create(clinic=clinic, **fields)
        request = PatientRequest.create(
            clinic=clinic,
            patient=patient,
            kind=kind,
            title=kind,
            call=call.id,
            **({"created_at": created_at} if created_at else {}),
        )
    return str(request.id)


def search(
    app: webtest.TestApp, token: str, body: dict[str, Any], slug: str = "clinic-a", status: int = 200
) -> dict[str, Any]:
    return app.post_json(api(slug) + SEARCH, body, headers=bearer(token), status=status).json


def all_pages(app: webtest.TestApp, token: str, flt: dict[str, Any], limit: int, slug: str = "clinic-a") -> list[str]:
    """Every id the search finds, page by page; each page but the last is full."""
    ids: list[str] = []
    pagination: dict[str, Any] = {"limit": limit}
    while True:
        page = search(app, token, {"filter": flt, "pagination": pagination}, slug)
        ids += [r["id"] for r in page["data"]]
        cursor = page["pagination"]["nextCursor"]
        if cursor is None:
            return ids
        assert len(page["data"]) == limit
        pagination = {"limit": limit, "cursor": cursor}


# --- kind in every answer --------------------------------------------------------------------


def test_kind_in_create_detail_search_and_patch(app, org):
    h = bearer(org["write"])
    created = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT")},
        headers=h,
    ).json
    assert created["data"]["kind"] == "standard"
    rid = created["data"]["id"]
    voice = call_request("clinic-a", "voice_message", patient=patient_id("jana"))
    missed = call_request("clinic-a", "missed_call")
    assert app.get(f"{api()}/patientRequests/{rid}", headers=h).json["data"]["kind"] == "standard"
    assert app.get(f"{api()}/patientRequests/{voice}", headers=h).json["data"]["kind"] == "voice_message"
    assert app.get(f"{api()}/patientRequests/{missed}", headers=h).json["data"]["kind"] == "missed_call"
    assert (
        app.patch_json(f"{api()}/patientRequests/{voice}", {"userNote": "called back"}, headers=h).json["data"]["kind"]
        == "voice_message"
    )
    found = search(app, org["write"], {})
    assert {r["id"]: r["kind"] for r in found["data"]} == {
        rid: "standard",
        voice: "voice_message",
        missed: "missed_call",
    }
    Draft202012Validator(documented(app, "post", SEARCH)).validate(found)
    Draft202012Validator(documented(app, "post", "/patientRequests/create")).validate(created)


# --- filter.kind --------------------------------------------------------------------------------


def test_filter_kind_narrows_paginates_and_combines_with_patient(app, org, clock):
    h = bearer(org["write"])
    standard = [
        app.post_json(
            api() + "/patientRequests/create",
            {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT")},
            headers=h,
        ).json["data"]["id"]
        for _ in range(3)
    ]
    start = _now(clock)
    # Two created in the same instant: the page boundary falls between them (id breaks the tie).
    same = start - timedelta(minutes=5)
    voice_jana = [
        call_request("clinic-a", "voice_message", patient=patient_id("jana"), created_at=at)
        for at in (start - timedelta(minutes=1), same, same)
    ]
    voice_other = [call_request("clinic-a", "voice_message", created_at=start - timedelta(minutes=m)) for m in (2, 7)]
    missed = call_request(
        "clinic-a", "missed_call", patient=patient_id("jana"), created_at=start - timedelta(minutes=3)
    )
    foreign = call_request("clinic-b", "voice_message", patient=patient_id("petr"))

    voice = voice_jana + voice_other
    for limit in (1, 2, 50):
        ids = all_pages(app, org["write"], {"kind": "voice_message"}, limit)
        assert sorted(ids) == sorted(voice) and len(ids) == len(set(ids)), limit
    # Newest first, the tie in id order (descending).
    by_time = search(app, org["write"], {"filter": {"kind": "voice_message"}})["data"]
    created = [r["createdAt"] for r in by_time]
    assert created == sorted(created, reverse=True)
    assert [r["id"] for r in by_time if r["id"] in voice_jana[1:]] == sorted(voice_jana[1:], reverse=True)

    assert sorted(all_pages(app, org["write"], {"kind": "standard"}, 2)) == sorted(standard)
    assert all_pages(app, org["write"], {"kind": "missed_call"}, 1) == [missed]
    # With patientId: both must hold.
    jana = {"patientId": patient_id("jana")}
    assert sorted(all_pages(app, org["write"], {**jana, "kind": "voice_message"}, 1)) == sorted(voice_jana)
    assert sorted(all_pages(app, org["write"], {**jana, "kind": "standard"}, 2)) == sorted(standard)
    assert all_pages(app, org["write"], {**jana, "kind": "missed_call"}, 5) == [missed]
    assert sorted(all_pages(app, org["write"], jana, 3)) == sorted(standard + voice_jana + [missed])
    # Another clinic's request of that kind never appears, with or without its patient.
    assert foreign not in all_pages(app, org["write"], {"kind": "voice_message"}, 50)
    assert all_pages(app, org["write"], {"kind": "voice_message", "patientId": patient_id("petr")}, 50) == []
    assert all_pages(app, org["b"], {"kind": "voice_message"}, 50, "clinic-b") == [foreign]
    assert all_pages(app, org["b"], {"kind": "missed_call"}, 50, "clinic-b") == []


@pytest.mark.parametrize("kind", ["unknown", "VOICE_MESSAGE", "", "voice message", 5, None, ["voice_message"]])
def test_unknown_kind_is_400_validation_failed(app, org, kind):
    answer = search(app, org["write"], {"filter": {"kind": kind}}, status=400)
    assert set(answer) == {"error", "code", "param"} and answer["code"] == "VALIDATION_FAILED"
    assert answer["error"].startswith("filter.kind: ") and answer["param"] == "/filter/kind"


def test_openapi_documents_kind_and_the_filter(app):
    document = inlined(app.get("/openapi.json").json)
    path = document["paths"][openapi.public_path(openapi.CLINIC + SEARCH)]["post"]
    flt = path["requestBody"]["content"]["application/json"]["schema"]["properties"]["filter"]["properties"]
    assert flt["kind"]["type"] == "string" and flt["kind"]["enum"] == ["standard", "voice_message", "missed_call"]
    item = path["responses"]["200"]["content"]["application/json"]["schema"]["properties"]["data"]["items"]
    assert "kind" in item["required"] and item["properties"]["kind"]["enum"] == list(PatientRequest.KINDS)
    detail = document["paths"][openapi.public_path(openapi.CLINIC + "/patientRequests/{request_id}")]["get"]
    call = detail["responses"]["200"]["content"]["application/json"]["schema"]["properties"]["data"]["properties"]
    call = call["call"]["properties"]
    assert {
        "callbackNumber",
        "unconfirmedCallbackNumber",
        "callbackNumberAt",
        "language",
        "transcriptLanguage",
        "transcriptStatus",
        "transcriptIssue",
        "extra",
    } <= set(call)
    status, null = call["transcriptStatus"]["anyOf"]
    assert status["enum"] == ["reliable", "check", "unreliable", "failed"] and null == {"type": "null"}
    assert "UNCONFIRMED" in call["unconfirmedCallbackNumber"]["description"]


# --- the detail's call --------------------------------------------------------------------------


def test_detail_shows_callback_number_language_transcript_status_issue_and_extra(app, org, clock):
    received = _now(clock)
    rid = call_request(
        "clinic-a",
        "voice_message",
        received_at=received,
        call_from="+420 601 123 456",
        recording_url="https://files.example.com/r/CA-1.mp3",
        has_recording=True,
        extra=EXTRA,
        transcript="Dobrý den, zavolejte mi prosím na 602 987 654.",
        transcript_language="cs",
        transcript_status="unreliable",
        transcript_issue="low_confidence",
        callback_number="+420602987654",
        callback_number_at=4.2,
    )
    answer = app.get(f"{api()}/patientRequests/{rid}", headers=bearer(org["write"])).json
    call = answer["data"]["call"]
    assert list(call)[:3] == ["callSid", "callFrom", "callbackNumber"]  # the two numbers side by side
    assert {k: v for k, v in call.items() if k not in ("callSid", "recording")} == {
        "callFrom": "+420 601 123 456",
        "callbackNumber": "+420602987654",
        "callTo": "+420222333444",
        "unconfirmedCallbackNumber": None,
        "callbackNumberAt": 4.2,
        "status": "completed",
        "receivedAt": received.isoformat(timespec="milliseconds") + "Z",
        "transcript": "Dobrý den, zavolejte mi prosím na 602 987 654.",
        "transcriptStatus": "unreliable",
        "transcriptIssue": "low_confidence",
        "language": "cs",
        "transcriptLanguage": "cs",
        "extra": EXTRA,
        "correctedTranscript": None,  # nobody corrected it
        "transcriptCorrectedAt": None,
    }
    assert call["recording"]["state"] == "available"
    Draft202012Validator(documented(app, "get", "/patientRequests/{request_id}")).validate(answer)


def test_an_unconfirmed_number_is_never_the_callback_number(app, org, clock):
    """Digits the decoder wrote but the second look did not confirm: apart, marked, with
    where they were said."""
    rid = call_request(
        "clinic-a",
        "voice_message",
        received_at=_now(clock),
        transcript_status="check",
        transcript_issue="low_confidence",
        transcript="Zavolejte mi na 700 1 2 3 4 5 6.",
        transcript_language="cs",
        heard_number="+420700123456",
        callback_number_at=13.3,
    )
    answer = app.get(f"{api()}/patientRequests/{rid}", headers=bearer(org["write"])).json
    call = answer["data"]["call"]
    assert (call["callbackNumber"], call["unconfirmedCallbackNumber"], call["callbackNumberAt"]) == (
        None,
        "+420700123456",
        13.3,
    )
    Draft202012Validator(documented(app, "get", "/patientRequests/{request_id}")).validate(answer)


@pytest.mark.parametrize(
    "status, issue",
    [("reliable", None), ("check", "low_confidence"), ("failed", "timeout"), ("failed", "engine_error")],
)
def test_detail_shows_each_transcript_status(app, org, clock, status, issue):
    rid = call_request(
        "clinic-a",
        "voice_message",
        received_at=_now(clock),
        transcript_status=status,
        transcript_issue=issue,
        transcript="" if status == "failed" else "Hello.",
        transcript_language="en",
    )
    call = app.get(f"{api()}/patientRequests/{rid}", headers=bearer(org["write"])).json["data"]["call"]
    assert (call["transcriptStatus"], call["transcriptIssue"], call["language"]) == (status, issue, "en")


def test_a_call_without_transcript_shows_nulls(app, org, clock):
    """A missed call (no speech) or a call without Extra: every field is there, null."""
    rid = call_request("clinic-a", "missed_call", received_at=_now(clock))
    answer = app.get(f"{api()}/patientRequests/{rid}", headers=bearer(org["write"])).json
    call = answer["data"]["call"]
    empty = (
        "callbackNumber",
        "unconfirmedCallbackNumber",
        "callbackNumberAt",
        "transcript",
        "transcriptStatus",
        "transcriptIssue",
        "language",
        "transcriptLanguage",
        "extra",
    )
    assert {k: call[k] for k in empty} == dict.fromkeys(empty)
    assert (call["recording"]["state"], call["recording"]["reason"]) == ("unavailable", "no_recording")
    Draft202012Validator(documented(app, "get", "/patientRequests/{request_id}")).validate(answer)


def test_another_clinics_call_detail_is_404(app, org, clock):
    foreign = call_request(
        "clinic-b",
        "voice_message",
        patient=patient_id("petr"),
        received_at=_now(clock),
        extra=EXTRA,
        callback_number="+420602987654",
    )
    answer = app.get(f"{api()}/patientRequests/{foreign}", headers=bearer(org["write"]), status=404).json
    assert answer == {"error": answer["error"], "code": "PATIENT_REQUEST_NOT_FOUND"}
    assert "+420602987654" not in str(answer)


# --- the operator's listing ----------------------------------------------------------------------


def test_manage_calls_lists_callback_number_and_transcript_status_issue_language(app, org, config, clock, capsys):
    import manage

    call_request(
        "clinic-a",
        "voice_message",
        received_at=_now(clock),
        transcript="Zavolejte mi.",
        transcript_language="cs",
        transcript_status="unreliable",
        transcript_issue="low_confidence",
        callback_number="+420602987654",
    )
    call_request("clinic-a", "missed_call", received_at=_now(clock) - timedelta(minutes=1))
    assert manage.main(["calls", "--last", "5"], config) == 0
    assert isinstance(db.obj, PooledDatabase), "the command bound its database for its run only"
    out = capsys.readouterr().out
    assert "    callback: +420602987654\n" in out
    assert "    transcript [unreliable (low_confidence), cs]: Zavolejte mi.\n" in out
    assert out.count("transcript [") == 1  # the missed call attempted none
    assert "(voice_message)" in out and "(missed_call)" in out


def test_manage_calls_shows_control_characters_from_callers_as_escapes(app, org, config, clock, capsys):
    """A switchboard's CallSid or transcript cannot drive the operator's terminal."""
    import manage

    call_request(
        "clinic-a",
        "voice_message",
        received_at=_now(clock),
        call_sid="CA-\x1b[2J\x1b]0;pwned\x07",
        transcript="Dobrý den,\r\nzavolejte mi.\x9b31m",
    )
    assert manage.main(["calls", "--last", "1"], config) == 0
    out = capsys.readouterr().out
    assert "CA-\\x1b[2J\\x1b]0;pwned\\x07" in out
    assert "Dobrý den,\\r\\nzavolejte mi.\\x9b31m" in out  # Czech letters stay as they are
    assert not any(c in out for c in "\x1b\x07\r\x9b") and out.count("\n") == 2  # two lines, none injected
