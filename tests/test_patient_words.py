"""The service's own patients and notes (stored as fixed English markers: the clinic's
unknown caller, the erased patient, the note on a record a call created) are said in the
reader's language wherever a person reads them: the console's inbox, request, patient and
read-trail pages, and the patient's copy. The API answers them as stored (a contract
integrators may read), and an existing deployment's rows, written before, are recognised
as they are."""

from __future__ import annotations

import io
import json
import uuid
import zipfile

import pytest

from console.patient_words import marker_words
from models import Actor, Clinic, Patient, PatientRecord, PatientRequest, StaffMembership, StaffUser
from patients.callers import patient_for_caller
from plumbing.database import db
from privacy import patient_copy
from staff.passwords import hash_password
from storage.local import LocalStorage
from tests.support import bearer, clinic, issue_token, load, organization
from tests.support.console import PASSWORD, login

ENGLISH = (Patient.UNKNOWN_CALLER, Patient.ERASED_NAME, PatientRecord.FROM_A_CALL)
WORDS = {
    "cs": ("neznámý volající", "vymazaný pacient", "Založeno z telefonního hovoru."),
    "en": ("unknown caller", "erased patient", "Created from a phone call."),
}


@pytest.fixture
def rows(app, clock):
    """clinic-a with an admin (Anna); the unknown caller (a call from a withheld number),
    the erased patient (as an erasure that kept a signed document leaves it) and a caller a
    call created, each with a request."""
    load(organization(clinic("clinic-a")))
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        user = StaffUser.create(email="anna@example.cz", name="Anna Nováková", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=a, role="admin")
        unknown = patient_for_caller(a, "anonymous", clock())
        erased = Patient.create(
            id=Patient.erased_id(a.organization_id), organization=a.organization_id, last_name=Patient.ERASED_NAME
        )
        caller = patient_for_caller(a, "+420601123456", clock())
        made = {
            p: PatientRequest.create(clinic=a, patient=p, kind="missed_call", title="missed_call")
            for p in (unknown, erased, caller)
        }
    return {"unknown": unknown, "erased": erased, "caller": caller, "requests": made}


def set_language(language: str) -> None:
    with db.connection_context():
        StaffUser.update(language=language).where(StaffUser.email == "anna@example.cz").execute()


def pages_read(app, rows) -> list[str]:
    """The pages that name these patients, as the admin reads them."""
    unknown = rows["unknown"]
    texts = [app.get("/console/").text]
    texts += [app.get(f"/console/requests/{r.id}").text for r in rows["requests"].values()]
    texts.append(app.get(f"/console/patients/{unknown.id}?clinic=clinic-a").text)
    texts.append(app.get("/console/reads?clinic=clinic-a&who=anna@example.cz").text)
    return texts


@pytest.mark.parametrize("language", ["cs", "en"])
def test_the_console_names_the_services_own_patients_in_the_readers_language(app, rows, language):
    set_language(language)
    login(app, status=303)
    texts = pages_read(app, rows)
    unknown, erased, _ = WORDS[language]
    everything = "\n".join(texts)
    for marker in (Patient.UNKNOWN_CALLER, Patient.ERASED_NAME):
        assert marker not in everything, f"{marker!r} shown as stored"
    assert unknown in texts[0] and erased in texts[0], "the inbox"
    assert unknown in texts[-2].split("<h1>")[1], "the patient's page's heading"
    # The read trail lists the requests and the patient's page just opened, by name.
    reads = texts[-1]
    assert reads.count(unknown) >= 2 and erased in reads


def test_a_person_with_a_markers_name_is_a_person(app, rows):
    """A patient someone imported as "Unknown caller" with a number is not the service's own."""
    with db.connection_context():
        a = Clinic.by_slug("clinic-a")
        named = Patient.create(organization=a.organization_id, last_name=Patient.UNKNOWN_CALLER, phone="+420602000000")
        PatientRequest.create(clinic=a, patient=named, kind="missed_call", title="missed_call")
        assert named.marker is None and rows["unknown"].marker == Patient.MARKER_UNKNOWN_CALLER
    login(app, status=303)
    named_rows = [r for r in app.get("/console/").html.select("li.row") if Patient.UNKNOWN_CALLER in r.text]
    assert len(named_rows) == 1 and "+420 602 000 000" in named_rows[0].text.replace("\u00a0", " ")


@pytest.mark.parametrize("language", ["cs", "en"])
def test_the_patients_copy_says_the_services_words_in_its_language(app, rows, clock, tmp_path, language):
    archive = io.BytesIO()
    with db.connection_context():
        patient_copy.write_copy(
            rows["caller"].id,
            archive,
            LocalStorage(tmp_path, signing_key=b"x" * 16, public_base_url="http://x"),
            _operator(),
            clock(),
            language=language,
        )
        unknown = io.BytesIO()
        patient_copy.write_copy(
            rows["unknown"].id,
            unknown,
            LocalStorage(tmp_path, signing_key=b"x" * 16, public_base_url="http://x"),
            _operator(),
            clock(),
            language=language,
        )
    with zipfile.ZipFile(archive) as z:
        data = json.loads(z.read("patient-data.json"))
    with zipfile.ZipFile(unknown) as z:
        of_unknown = json.loads(z.read("patient-data.json"))
    assert [r["note"] for r in data["records"]] == [WORDS[language][2]]
    assert [p["lastName"] for p in of_unknown["patients"]] == [WORDS[language][0]]
    if language == "cs":
        assert not any(m in json.dumps(d, ensure_ascii=False) for d in (data, of_unknown) for m in ENGLISH)


def test_the_copys_words_are_the_consoles():
    for language, words in patient_copy.MARKER_WORDS.items():
        for marker, said in words.items():
            assert marker_words(marker, language).replace("\u00a0", " ") == said, (language, marker)


def test_the_api_answers_the_markers_as_stored(app, rows):
    """The integrators' contract: the stored values, which they are told to recognise."""
    token = issue_token(["clinic-a"], ["read"])
    found = app.post_json("/external/v1/clinics/clinic-a/patients/search", {"filter": {}}, headers=bearer(token)).json[
        "data"
    ]
    by_id = {uuid.UUID(p["id"]): p for p in found}
    assert by_id[rows["unknown"].id]["lastName"] == Patient.UNKNOWN_CALLER
    assert by_id[rows["caller"].id]["note"] == PatientRecord.FROM_A_CALL


def _operator() -> Actor:
    return Actor("operator", "dpo-test")
