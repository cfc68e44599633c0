"""Corrected transcripts (docs/staff/, "Oprava přepisu"): staff who listened write down what
was really said; the console shows it first with the machine's text beside it, the API
returns both, the machine's text is never overwritten, the correction is audited (its length,
never its words), and the suggested type and "may be urgent" are read again from it unless
staff already confirmed or cleared them."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from models import AuditEvent, Call, Clinic, PatientRequest, RequestType, StaffMembership, StaffUser
from plumbing.database import db
from staff.passwords import hash_password
from tests.support import bearer, clinic, issue_token, load, organization
from tests.support.console import PASSWORD, form_to, login
from tests.support.documented import documented
from tests.support.live_service import api
from tests.test_triage import TYPES, voice_message


@pytest.fixture
def receptionist(app):
    """clinic-a with the triage tests' request types; anna its admin. The types' ids by code."""
    load(organization(clinic("clinic-a", requestTypes=TYPES), clinic("clinic-b")))
    with db.connection_context():
        user = StaffUser.create(email="anna@example.cz", name="Anna Nováková", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.by_slug("clinic-a"), role="admin")
        return {t.ecrf_id: str(t.id) for t in RequestType.select()}


MACHINE = "Dobrý den, zavolejte mi prosím zpátky."
REALLY = "Dobrý den, potřebuji nový recept na léky na tlak, je to naléhavé."


def test_a_correction_is_shown_first_returned_with_the_original_audited_and_read_again(app, receptionist):
    rid = voice_message(MACHINE, name="Jitka")
    token = issue_token(["clinic-a"], ["read"])
    before = app.get(f"{api()}/patientRequests/{rid}", headers=bearer(token)).json["data"]
    assert before["call"]["correctedTranscript"] is None and before["requestTypeSuggestion"]["requestTypeId"] is None
    login(app, status=303)
    page = app.get(f"/console/requests/{rid}")
    form = form_to(page, "/transcript")
    form["transcript"] = REALLY
    assert form.submit(status=303).location.endswith(f"/console/requests/{rid}")

    page = app.get(f"/console/requests/{rid}")
    shown = page.html.select_one("blockquote.transcript")
    assert "corrected" in shown["class"] and "recept" in shown.text  # the correction first
    assert MACHINE in page.html.select_one("details.machine-transcript").text  # the machine's beside it
    assert "anna@example.cz" in page.html.select_one("details.machine-transcript summary").text

    answer = app.get(f"{api()}/patientRequests/{rid}", headers=bearer(token)).json
    Draft202012Validator(documented(app, "get", "/patientRequests/{request_id}")).validate(answer)
    call = answer["data"]["call"]
    assert (call["transcript"], call["correctedTranscript"]) == (MACHINE, REALLY)
    assert call["transcriptCorrectedAt"] == "2026-11-18T10:00:00.000Z"
    # Read again from what was really said: a prescription, may be urgent, its words the correction's.
    assert answer["data"]["requestTypeSuggestion"]["requestTypeId"] == receptionist["RX"]
    assert "recept" in answer["data"]["requestTypeSuggestion"]["words"]
    assert answer["data"]["urgent"]["flagged"] is True and answer["data"]["urgent"]["words"] == ["naléhavé"]

    with db.connection_context():
        assert Call.get(Call.transcript == MACHINE).corrected_transcript == REALLY  # never overwritten
        (event,) = AuditEvent.select().where(AuditEvent.action == "patient_request.correct_transcript")
    assert (event.actor_kind, event.actor_name, event.target_id) == ("staff", "anna@example.cz", rid)
    assert json.loads(event.details) == {"characters": len(REALLY), "withdrawn": False}
    assert "recept" not in event.details  # the words never reach the trail
    assert "Přepis opraven" in app.get("/console/audit").text


def test_a_confirmed_type_and_a_cleared_flag_stay_and_an_empty_correction_takes_it_back(app, receptionist):
    rid = voice_message("Prosím o recept na Euthyrox, je to naléhavé.", name="Jitka")
    login(app, status=303)
    form_to(app.get(f"/console/requests/{rid}"), "/type").submit(status=303)  # the suggestion confirmed
    form_to(app.get(f"/console/requests/{rid}"), "/urgent").submit(status=303)  # the flag cleared
    form = form_to(app.get(f"/console/requests/{rid}"), "/transcript")
    form["transcript"] = "Chci zrušit zítřejší termín, bolí mě to hrozně."
    form.submit(status=303)
    with db.connection_context():
        request = PatientRequest.get_by_id(rid)
        assert request.suggested_type_id is not None and str(request.request_type_id) == receptionist["RX"]
        assert request.urgent is False and request.urgent_cleared_at is not None
    form = form_to(app.get(f"/console/requests/{rid}"), "/transcript")
    form["transcript"] = "   "
    form.submit(status=303)
    page = app.get(f"/console/requests/{rid}")
    assert (
        not page.html.select("details.machine-transcript")
        and "Euthyrox" in page.html.select_one("blockquote.transcript").text
    )
    with db.connection_context():
        assert Call.get(Call.transcript.contains("Euthyrox")).corrected_transcript is None
        withdrawn = AuditEvent.select().where(AuditEvent.action == "patient_request.correct_transcript")
        assert [json.loads(e.details)["withdrawn"] for e in withdrawn.order_by(AuditEvent.id)] == [False, True]


def test_a_request_without_a_transcript_cannot_be_corrected(app, receptionist):
    from tests.support.console import csrf_of, make

    request = make("clinic-a", "missed_call")
    login(app, status=303)
    page = app.get(f"/console/requests/{request.id}")
    assert not page.html.select("textarea#transcript")
    app.post(f"/console/requests/{request.id}/transcript", {"csrf_token": csrf_of(page), "transcript": "x"}, status=400)
