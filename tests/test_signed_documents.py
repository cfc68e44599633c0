"""docs/spec/signed-documents.md: the section-7 checklist end to end over real HTTP against
both storage backends (local disk served by the service, S3 on a real SeaweedFS), and
every row of the error table."""

from __future__ import annotations

import hashlib
import io
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import peewee as pw
import pytest
import requests

from documents import attachments, file_types
from models import (
    MedicalRecord,
    PatientRecord,
    PatientRecordTag,
    PatientRequest,
    RequestTypeDefaultTag,
    Reservation,
    Tag,
)
from onboarding.writer import stable_id
from patient_requests import changes, queries
from plumbing.database import db
from storage import LocalStorage
from storage.links import LinkCache
from tests.support import assert_error, bearer, clinic, issue_token, load, organization
from tests.support.durability import record_fsyncs
from tests.support.live_service import api, patient_id, serve, signing_organization, tag_id, type_id
from tests.support.seaweed import SeaweedFS
from web import shapes

PDF_BYTES = b"%PDF-1.7\n" + bytes(range(256)) * 400 + b"\n%%EOF\n"
TIMEOUT = 30


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.seaweedfs)])
def service(request: pytest.FixtureRequest, app, tmp_path: Path) -> Iterator[str]:
    """Base URL of the whole service on a real HTTP server, over the chosen backend."""
    if request.param == "local":
        overrides = {"storage_backend": "local", "storage_dir": str(tmp_path / "storage")}
    else:
        sw: SeaweedFS = request.getfixturevalue("seaweedfs")
        overrides = {
            "storage_backend": "s3",
            "s3_endpoint_url": sw.s3_endpoint_url,
            "s3_bucket": sw.s3_bucket,
            "s3_region": sw.s3_region,
            "s3_access_key_id": sw.s3_access_key_id,
            "s3_secret_access_key": sw.s3_secret_access_key,
        }
    with serve(**overrides) as base_url:
        yield base_url


def _session(token: str) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    return session


def test_section_7_checklist_end_to_end(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    load(signing_organization())
    http = _session(issue_token(["clinic-a", "clinic-b"], ["read", "write"]))
    base = service + api()

    # The type: default patient tags, requiresReservation false; inactive types hidden.
    types = http.post(f"{base}/patientRequestTypes/search", json={}, timeout=TIMEOUT).json()["data"]
    assert [t["ecrfId"] for t in types] == ["SIGNED_CONSENT"]
    consent = types[0]
    assert consent == {
        "id": type_id("SIGNED_CONSENT"),
        "ecrfId": "SIGNED_CONSENT",
        "name": "Signed consent",
        "description": "",
        "requiresReservation": False,
        "requiresPayment": False,
        "requiresSignature": False,
        "reservationLength": 0,
        "remindDaysBefore": 0,
    }
    with db.connection_context():
        assert RequestTypeDefaultTag.select().where(RequestTypeDefaultTag.request_type == consent["id"]).count() == 1

    # An unfiltered search in the organization returns patients without a record here: skipped.
    everyone = http.post(f"{base}/patients/search", json={}, timeout=TIMEOUT).json()["data"]
    outside = [p for p in everyone if not p["isInClinic"]]
    assert [p["id"] for p in outside] == [patient_id("petr")]
    assert outside[0] | {"id": None} == outside[0] | {
        "id": None,
        "status": "WAITING",
        "note": "",
        "tags": [],
        "externalIds": [],
        "isInClinic": False,
    }
    usable = [p for p in everyone if p["isInClinic"]]
    assert [p["id"] for p in usable] == [patient_id("jana")]
    refused = http.post(
        f"{base}/patientRequests/create",
        timeout=TIMEOUT,
        json={"patientId": outside[0]["id"], "userECRFId": consent["id"]},
    )
    assert refused.status_code == 403 and refused.json()["code"] == "FORBIDDEN"

    # Step 2 the safe way, then step 3: create returns data.id; the tags land on the patient.
    lookup = {"filter": {"externalId": "EXT-1", "externalIdSource": "signing-system", "inClinic": True}}
    found = http.post(f"{base}/patients/search", json=lookup, timeout=TIMEOUT).json()["data"]
    assert [p["id"] for p in found] == [patient_id("jana")] and found[0]["tags"] == []
    created = http.post(
        f"{base}/patientRequests/create",
        timeout=TIMEOUT,
        json={"patientId": found[0]["id"], "userECRFId": consent["id"], "userNote": "consent v3"},
    )
    assert created.status_code == 200, created.text
    request = created.json()["data"]
    assert request["title"] == "Signed consent" and request["patientId"] == patient_id("jana")
    assert request["tags"] == request["medicalRecords"] == request["reservations"] == []
    assert "consent v3" not in created.text  # the create's userNote is never returned
    read_back = http.post(f"{base}/patients/search", json=lookup, timeout=TIMEOUT).json()["data"]
    assert [t["name"] for t in read_back[0]["tags"]] == ["signed-consent"]
    rid = request["id"]

    # Steps 4-5: an expired upload URL is refused (nothing stored); a new one works.
    monkeypatch.setattr(attachments, "UPLOAD_URL_SECONDS", 1)
    issued = time.time()
    stale = http.post(
        f"{base}/patientRequests/{rid}/attachments/upload-link",
        json={"contentType": "application/pdf"},
        timeout=TIMEOUT,
    ).json()["data"]
    monkeypatch.setattr(attachments, "UPLOAD_URL_SECONDS", 600)
    time.sleep(max(0.0, int(issued) + 2.2 - time.time()))
    late = requests.put(stale["url"], data=PDF_BYTES, headers={"Content-Type": "application/pdf"}, timeout=TIMEOUT)
    assert 400 <= late.status_code < 500
    not_uploaded = http.post(
        f"{base}/patientRequests/{rid}/attachments",
        timeout=TIMEOUT,
        json={"contentType": "application/pdf", "fileHash": stale["fileHash"], "description": "x.pdf"},
    )
    assert not_uploaded.status_code == 400 and not_uploaded.json()["code"] == "VALIDATION_FAILED"

    link = http.post(
        f"{base}/patientRequests/{rid}/attachments/upload-link",
        json={"contentType": "application/pdf"},
        timeout=TIMEOUT,
    ).json()["data"]
    assert link["fileHash"].endswith(".pdf") and link["fileHash"] != stale["fileHash"]
    put = requests.put(link["url"], data=PDF_BYTES, headers={"Content-Type": "application/pdf"}, timeout=TIMEOUT)
    assert put.status_code == 200

    # Registration checks the stored bytes against the type: an HTML page is no PDF (400).
    html = http.post(
        f"{base}/patientRequests/{rid}/attachments/upload-link",
        json={"contentType": "application/pdf"},
        timeout=TIMEOUT,
    ).json()["data"]
    assert (
        requests.put(
            html["url"],
            data=b"<!doctype html><p>not a pdf",
            headers={"Content-Type": "application/pdf"},
            timeout=TIMEOUT,
        ).status_code
        == 200
    )
    forged = http.post(
        f"{base}/patientRequests/{rid}/attachments",
        timeout=TIMEOUT,
        json={"contentType": "application/pdf", "fileHash": html["fileHash"], "description": "x.pdf"},
    )
    assert forged.status_code == 400 and forged.json() == {
        "error": "contentType: the uploaded file is not application/pdf",
        "code": "VALIDATION_FAILED",
        "param": "/contentType",
    }

    # Step 6: an unsupported contentType is 400; the right one registers.
    unsupported = http.post(
        f"{base}/patientRequests/{rid}/attachments",
        timeout=TIMEOUT,
        json={"contentType": "text/plain", "fileHash": link["fileHash"], "description": "x.txt"},
    )
    assert unsupported.status_code == 400 and unsupported.json()["code"] == "VALIDATION_FAILED"
    assert "contentType" in unsupported.json()["error"]
    registered = http.post(
        f"{base}/patientRequests/{rid}/attachments",
        timeout=TIMEOUT,
        json={
            "contentType": "application/pdf",
            "fileHash": link["fileHash"],
            "description": "Souhlas s léčbou v3.pdf",
            "categoryType": "CONSENT",
        },
    )
    assert registered.status_code == 200, registered.text
    attachment = registered.json()["data"]
    assert set(attachment) == {"id", "description", "contentType", "createdAt", "sha256"}
    assert attachment["contentType"] == "application/pdf" and attachment["createdAt"].endswith("Z")
    assert attachment["sha256"] == hashlib.sha256(PDF_BYTES).hexdigest()

    # Registered is final: the upload URL (minutes left) cannot change what was registered.
    # The local backend refuses the PUT; S3 cannot revoke a presigned URL, but the record
    # serves a copy no URL names, so the bytes stay the registered ones either way.
    overwrite = requests.put(
        link["url"], data=b"%PDF-1.4 forged", headers={"Content-Type": "application/pdf"}, timeout=TIMEOUT
    )
    if link["url"].startswith(service + "/storage/"):  # the local backend
        assert overwrite.status_code == 409 and overwrite.json()["code"] == "ALREADY_REGISTERED"
    again_registered = http.post(
        f"{base}/patientRequests/{rid}/attachments",
        timeout=TIMEOUT,
        json={"contentType": "application/pdf", "fileHash": link["fileHash"], "description": "Souhlas s léčbou v3.pdf"},
    )
    assert again_registered.json()["data"] == attachment  # idempotent, the same bytes and digest

    # Step 7: the detail lists it; downloadUrl returns the exact bytes.
    detail = http.get(f"{base}/patientRequests/{rid}", timeout=TIMEOUT).json()["data"]
    assert detail["id"] == rid and detail["doneAt"] is None
    [record] = detail["medicalRecords"]
    assert record["id"] == attachment["id"] and record["categoryType"] == "CONSENT"
    assert record["sha256"] == hashlib.sha256(PDF_BYTES).hexdigest()
    assert record["visibleToPatient"] is False
    download = requests.get(record["downloadUrl"], timeout=TIMEOUT)
    assert download.status_code == 200 and download.content == PDF_BYTES
    assert download.headers["Content-Type"] == "application/pdf"
    assert download.headers["Content-Disposition"].startswith('attachment; filename="Souhlas_s_lecbou_v3.pdf"')
    inline = requests.get(record["url"], timeout=TIMEOUT)
    assert inline.content == PDF_BYTES and inline.headers["Content-Disposition"].startswith("inline;")
    again = http.get(f"{base}/patientRequests/{rid}", timeout=TIMEOUT).json()["data"]
    assert again["medicalRecords"][0]["downloadUrl"] == record["downloadUrl"]  # cached

    # A request id of another clinic gives 404.
    other = http.post(
        service + api("clinic-b") + "/patientRequests/create",
        timeout=TIMEOUT,
        json={"patientId": patient_id("petr"), "userECRFId": type_id("SIGNED_CONSENT", "clinic-b")},
    )
    assert other.status_code == 200, other.text
    foreign = http.get(f"{base}/patientRequests/{other.json()['data']['id']}", timeout=TIMEOUT)
    assert foreign.status_code == 404 and foreign.json()["code"] == "PATIENT_REQUEST_NOT_FOUND"


def test_upload_larger_than_the_json_body_limit_goes_through_the_real_app(app, tmp_path: Path) -> None:
    """MAX_BODY_BYTES caps JSON bodies only; uploads to /storage/ have the storage cap."""
    load(signing_organization())
    http = _session(issue_token(["clinic-a"], ["read", "write"]))
    with serve(storage_backend="local", storage_dir=str(tmp_path / "storage"), max_body_bytes=10_000) as service:
        base = service + api()
        rid = http.post(
            f"{base}/patientRequests/create",
            timeout=TIMEOUT,
            json={"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT")},
        ).json()["data"]["id"]
        link = http.post(
            f"{base}/patientRequests/{rid}/attachments/upload-link",
            json={"contentType": "application/pdf"},
            timeout=TIMEOUT,
        ).json()["data"]
        assert len(PDF_BYTES) > 10_000
        put = requests.put(link["url"], data=PDF_BYTES, headers={"Content-Type": "application/pdf"}, timeout=TIMEOUT)
        assert put.status_code == 200, put.text
        big_json = http.post(f"{base}/patients/search", json={"filter": {"query": "x" * 20_000}}, timeout=TIMEOUT)
        assert big_json.status_code == 413


# --- the error table (WebTest, local storage) ---------------------------------------------------

CREATE = api() + "/patientRequests/create"


def _create(app, token: str, status: int = 200, **body):
    body = {"patientId": patient_id("jana"), "userECRFId": type_id("SIGNED_CONSENT"), **body}
    return app.post_json(CREATE, body, headers=bearer(token), status=status)


def test_400_validation_names_the_field(app, org):
    assert_error(_create(app, org["write"], 400, patientId="not-a-uuid"), 400, "VALIDATION_FAILED", param="/patientId")
    response = app.post_json(
        CREATE, {"userECRFId": type_id("SIGNED_CONSENT")}, headers=bearer(org["write"]), status=400
    )
    assert "patientId" in response.json["error"] and response.json["param"] == "/patientId"


def test_401_without_or_with_a_bad_token(app, org):
    assert_error(app.post_json(CREATE, {}, status=401), 401, "UNAUTHORIZED")
    assert_error(app.post_json(CREATE, {}, headers=bearer("csk_00_bad"), status=401), 401, "UNAUTHORIZED")


def test_403_scope_clinic_and_patient_without_record_here(app, org):
    assert_error(_create(app, org["read"], 403), 403, "FORBIDDEN")
    assert_error(_create(app, org["b"], 403), 403, "FORBIDDEN")  # token not bound to clinic-a
    assert_error(_create(app, org["write"], 403, patientId=patient_id("petr")), 403, "FORBIDDEN")


def test_404_unknown_patient_and_request_types(app, org):
    assert_error(_create(app, org["write"], 404, patientId=str(uuid.uuid4())), 404, "PATIENT_NOT_FOUND")
    assert_error(_create(app, org["write"], 404, userECRFId=str(uuid.uuid4())), 404, "USER_ECRF_NOT_FOUND")
    assert_error(_create(app, org["write"], 404, userECRFId=type_id("RETIRED")), 404, "USER_ECRF_NOT_FOUND")
    assert_error(
        _create(app, org["write"], 404, userECRFId=type_id("SIGNED_CONSENT", "clinic-b")), 404, "USER_ECRF_NOT_FOUND"
    )


def test_404_patient_of_another_organization(app, org):
    load(
        organization(
            clinic("other-clinic"),
            slug="other-org",
            sharing=True,
            patients=[{"key": "jana", "firstName": "Jana", "records": [{"clinic": "other-clinic"}]}],
        )
    )
    assert_error(_create(app, org["write"], 404, patientId=patient_id("jana", "other-org")), 404, "PATIENT_NOT_FOUND")


def test_404_request_of_another_clinic_on_every_request_endpoint(app, org):
    petr = {"patientId": patient_id("petr"), "userECRFId": type_id("SIGNED_CONSENT", "clinic-b")}
    rid = app.post_json(api("clinic-b") + "/patientRequests/create", petr, headers=bearer(org["b"])).json["data"]["id"]
    h = bearer(org["write"])
    base = f"{api()}/patientRequests/{rid}"
    assert_error(app.get(base, headers=h, status=404), 404, "PATIENT_REQUEST_NOT_FOUND")
    assert_error(app.patch_json(base, {"userNote": "x"}, headers=h, status=404), 404, "PATIENT_REQUEST_NOT_FOUND")
    assert_error(
        app.post_json(f"{base}/attachments/upload-link", {"contentType": "application/pdf"}, headers=h, status=404),
        404,
        "PATIENT_REQUEST_NOT_FOUND",
    )
    assert_error(
        app.post_json(
            f"{base}/attachments",
            {"contentType": "application/pdf", "fileHash": "x", "description": "x"},
            headers=h,
            status=404,
        ),
        404,
        "PATIENT_REQUEST_NOT_FOUND",
    )
    assert_error(
        app.get(f"{api()}/patientRequests/not-a-uuid", headers=h, status=404), 404, "PATIENT_REQUEST_NOT_FOUND"
    )


def test_410_merged_patient_carries_the_survivor_and_the_retry_works(app, org):
    gone = _create(app, org["write"], 410, patientId=patient_id("jana-dup"))
    assert_error(gone, 410, "PATIENT_MERGED", mergedInto=patient_id("jana"))
    assert gone.json["mergedInto"] == patient_id("jana")
    retried = _create(app, org["write"], patientId=gone.json["mergedInto"]).json
    assert retried["data"]["patientId"] == patient_id("jana")


def test_5xx_is_an_internal_error_without_details(app, org, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("database password is hunter2")

    monkeypatch.setattr(changes, "create", boom)
    response = _create(app, org["write"], 500).json
    assert response["code"] == "INTERNAL_ERROR" and "hunter2" not in response["error"]


def test_5xx_on_create_says_check_first_and_on_a_lookup_safe_to_retry(app, org, monkeypatch):
    """The spec's retry rules: create and registration are not idempotent."""

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    existing = _create(app, org["write"]).json["data"]["id"]
    monkeypatch.setattr(changes, "create", boom)
    monkeypatch.setattr(attachments, "register_attachment", boom)
    monkeypatch.setattr(queries, "search", boom)
    created = _create(app, org["write"], 500).json["error"]
    assert "check" in created and "safe to retry" not in created
    registered = app.post_json(
        f"{CREATE.rsplit('/', 1)[0]}/{existing}/attachments",
        {"contentType": "application/pdf", "fileHash": "x", "description": "x.pdf"},
        headers=bearer(org["write"]),
        status=500,
    ).json["error"]
    assert "check" in registered and "safe to retry" not in registered
    searched = app.post_json(f"{CREATE.rsplit('/', 1)[0]}/search", {}, headers=bearer(org["write"]), status=500)
    assert searched.json == {"error": "Internal error; safe to retry.", "code": "INTERNAL_ERROR"}


def test_a_create_whose_answer_fails_stores_nothing(app, org, monkeypatch):
    """The answer is read inside the create's transaction: a failure there rolls the
    request back, so a 5xx never stands for a committed request (no duplicate on retry)."""

    def boom(*args, **kwargs):
        raise pw.OperationalError("server closed the connection unexpectedly")

    with db.connection_context():
        before = PatientRequest.select().count()
    monkeypatch.setattr(shapes, "requests", boom)
    response = _create(app, org["write"], 503).json
    assert response["code"] == "SERVICE_UNAVAILABLE" and "check" in response["error"]
    with db.connection_context():
        assert PatientRequest.select().count() == before


# --- create rules ---------------------------------------------------------------------------


def test_default_tags_best_effort_deleted_skipped_other_failures_logged(app, org, caplog):
    with db.connection_context():
        for name in ("gone",):  # a deleted patient tag: skipped silently
            RequestTypeDefaultTag.create(request_type=type_id("SIGNED_CONSENT"), tag=tag_id("patient", name))
        # A request tag as a default patient tag cannot be applied: logged, create succeeds.
        RequestTypeDefaultTag.create(
            request_type=type_id("SIGNED_CONSENT"), tag=tag_id("patient_request", "needs-callback")
        )
    with caplog.at_level(logging.WARNING, logger="patient_requests.changes"):
        created = _create(app, org["write"]).json
    assert created["data"]["id"]
    assert len([r for r in caplog.records if r.name == changes.__name__]) == 1
    with db.connection_context():
        record = PatientRecord.get(
            (PatientRecord.patient == patient_id("jana")) & (PatientRecord.clinic == stable_id("clinic", "clinic-a"))
        )
        names = sorted(t.name for t in Tag.select().join(PatientRecordTag).where(PatientRecordTag.record == record))
    assert names == ["signed-consent"]
    assert _create(app, org["write"]).json["data"]["id"]  # tags already there: no error either


def test_time_slot_creates_a_reservation_and_closes_the_request(app, org):
    calendar = str(stable_id("calendar", "clinic-a", "Doctor"))
    slot = {"start": "2026-11-20T09:00:00+01:00", "end": "2026-11-20T09:30:00+01:00", "calendarId": calendar}
    data = _create(app, org["write"], timeSlotInput=slot).json["data"]
    assert data["doneAt"] is not None
    assert data["reservations"] == [
        {
            "id": data["reservations"][0]["id"],
            "start": "2026-11-20T08:00:00.000Z",
            "end": "2026-11-20T08:30:00.000Z",
            "calendarId": calendar,
        }
    ]
    with db.connection_context():
        request = PatientRequest.get_by_id(data["id"])
        assert request.created_by.name == "test-service" and request.clinic_note == ""
        assert Reservation.select().where(Reservation.request == request).count() == 1
    bad = dict(slot, calendarId=str(uuid.uuid4()))
    assert "calendarId" in _create(app, org["write"], 400, timeSlotInput=bad).json["error"]
    backwards = dict(slot, end="2026-11-20T08:00:00+01:00")
    assert_error(
        _create(app, org["write"], 400, timeSlotInput=backwards), 400, "VALIDATION_FAILED", param="/timeSlotInput/end"
    )


# --- attachments, detail, search, tags, patch ---------------------------------------------------


def test_register_only_own_uploaded_file_hashes_and_idempotent_per_hash(app, org, tmp_path):
    h = bearer(org["write"])
    rid = _create(app, org["write"]).json["data"]["id"]
    other = _create(app, org["write"]).json["data"]["id"]
    link = app.post_json(
        f"{api()}/patientRequests/{other}/attachments/upload-link", {"contentType": "image/png"}, headers=h
    ).json["data"]
    assert link["fileHash"].endswith(".png")
    body = {"contentType": "image/png", "fileHash": link["fileHash"], "description": "scan.png"}
    wrong = app.post_json(f"{api()}/patientRequests/{rid}/attachments", body, headers=h, status=400).json
    assert "fileHash" in wrong["error"]
    made_up = dict(body, fileHash=f"requests/{rid}/{'0' * 32}.png")
    app.post_json(f"{api()}/patientRequests/{rid}/attachments", made_up, headers=h, status=400)
    # Not uploaded yet -> 400; stored -> registered; registered again -> the same attachment.
    app.post_json(f"{api()}/patientRequests/{other}/attachments", body, headers=h, status=400)
    storage = LocalStorage("var/storage", signing_key=b"x" * 16, public_base_url="http://x")
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
    storage.write_stream(link["fileHash"], io.BytesIO(png), len(png), "image/png")
    try:
        first = app.post_json(f"{api()}/patientRequests/{other}/attachments", body, headers=h).json["data"]
        second = app.post_json(f"{api()}/patientRequests/{other}/attachments", body, headers=h).json["data"]
        assert first == second
    finally:
        storage.delete(link["fileHash"])


def test_registration_makes_the_sealed_copy_durable_before_it_deletes_the_upload(app, org, monkeypatch):
    """Registering seals a copy, commits the record, then deletes the upload: the copy's
    name is on disk (its directory fsynced) before the upload can be gone, so a power loss
    at any point leaves the registered bytes."""
    h = bearer(org["write"])
    rid = _create(app, org["write"]).json["data"]["id"]
    link = app.post_json(
        f"{api()}/patientRequests/{rid}/attachments/upload-link", {"contentType": "application/pdf"}, headers=h
    ).json["data"]
    storage = LocalStorage("var/storage", signing_key=b"x" * 16, public_base_url="http://x")  # the app's STORAGE_DIR
    storage.write_stream(link["fileHash"], io.BytesIO(PDF_BYTES), len(PDF_BYTES), "application/pdf")
    events = record_fsyncs(monkeypatch)
    body = {"contentType": "application/pdf", "fileHash": link["fileHash"], "description": "signed.pdf"}
    app.post_json(f"{api()}/patientRequests/{rid}/attachments", body, headers=h)
    with db.connection_context():
        sealed = MedicalRecord.get(MedicalRecord.file_hash == link["fileHash"]).object_key
    try:
        sealed_dir = str(storage.path_for(sealed).parent)
        assert ("fsync", sealed_dir) in events, events
        assert events.index(("fsync", sealed_dir)) < events.index(("delete", link["fileHash"])), events
        assert storage.path_for(sealed).read_bytes() == PDF_BYTES and not storage.exists(link["fileHash"])
    finally:
        storage.delete(sealed)


def test_detail_refuses_more_than_1000_attachments(app, org):
    rid = _create(app, org["write"]).json["data"]["id"]
    rows = [
        {
            "id": uuid.uuid4(),
            "request": rid,
            "file_hash": f"requests/{rid}/{i:032x}.pdf",
            "content_type": "application/pdf",
            "description": f"doc {i}.pdf",
        }
        for i in range(1001)
    ]
    with db.connection_context():
        MedicalRecord.insert_many(rows[:1000]).execute()
    detail = app.get(f"{api()}/patientRequests/{rid}", headers=bearer(org["read"])).json["data"]
    assert len(detail["medicalRecords"]) == 1000
    with db.connection_context():
        MedicalRecord.insert_many(rows[1000:]).execute()
    assert_error(
        app.get(f"{api()}/patientRequests/{rid}", headers=bearer(org["read"]), status=400), 400, "VALIDATION_FAILED"
    )


def test_link_cache_hands_out_links_with_at_least_30_minutes_left(tmp_path):
    now = [1_800_000_000.0]
    storage = LocalStorage(tmp_path, signing_key=b"k" * 32, public_base_url="http://x", clock=lambda: now[0])
    links = LinkCache(storage, clock=lambda: now[0])
    record = MedicalRecord(
        id=uuid.uuid4(), file_hash="requests/a/b.pdf", content_type="application/pdf", description="Zpráva.pdf"
    )
    first = links.url(record, "attachment")
    assert "filename=Zprava.pdf" in first and f"expires={int(now[0]) + 8 * 3600}" in first
    assert links.url(record, "inline") != first
    now[0] += 7 * 3600 + 29 * 60 - 1  # 31 minutes left: still handed out
    assert links.url(record, "attachment") == first
    now[0] += 2 * 60  # 29 minutes left: a fresh one
    fresh = links.url(record, "attachment")
    assert fresh != first and f"expires={int(now[0]) + 8 * 3600}" in fresh


def test_request_search_by_patient_with_pagination(app, org):
    ids = [_create(app, org["write"]).json["data"]["id"] for _ in range(3)]
    h = bearer(org["read"])
    url = api() + "/patientRequests/search"
    page = app.post_json(url, {"filter": {"patientId": patient_id("jana")}, "pagination": {"limit": 2}}, headers=h).json
    assert len(page["data"]) == 2 and page["pagination"]["nextCursor"]
    rest = app.post_json(
        url,
        {
            "filter": {"patientId": patient_id("jana")},
            "pagination": {"limit": 2, "cursor": page["pagination"]["nextCursor"]},
        },
        headers=h,
    ).json
    assert rest["pagination"]["nextCursor"] is None
    assert sorted(r["id"] for r in page["data"] + rest["data"]) == sorted(ids)
    assert all(r["medicalRecords"] == [] for r in page["data"])
    assert app.post_json(url, {"filter": {"patientId": patient_id("petr")}}, headers=h).json["data"] == []
    assert_error(
        app.post_json(url, {"pagination": {"cursor": "garbage"}}, headers=h, status=400),
        400,
        "VALIDATION_FAILED",
        param="/pagination/cursor",
    )


def test_tags_and_patch_add_request_tags_and_its_own_user_note(app, org):
    h = bearer(org["write"])
    tags = app.get(api() + "/tags?type=patient_request", headers=h).json["data"]
    assert [t["name"] for t in tags] == ["needs-callback"]
    assert {t["name"] for t in app.get(api() + "/tags?type=patient", headers=h).json["data"]} == {"signed-consent"}
    assert_error(app.get(api() + "/tags?type=other", headers=h, status=400), 400, "VALIDATION_FAILED", param="?type")
    rid = _create(app, org["write"], userNote="clinic note").json["data"]["id"]
    patched = app.patch_json(
        f"{api()}/patientRequests/{rid}", {"addTagIds": [tags[0]["id"]], "userNote": "mine"}, headers=h
    ).json["data"]
    assert [t["name"] for t in patched["tags"]] == ["needs-callback"] and patched["userNote"] == "mine"
    app.patch_json(f"{api()}/patientRequests/{rid}", {"addTagIds": [tags[0]["id"]]}, headers=h)  # idempotent
    for foreign in (tag_id("patient", "signed-consent"), tag_id("patient_request", "b-only", "clinic-b")):
        assert_error(
            app.patch_json(f"{api()}/patientRequests/{rid}", {"addTagIds": [foreign]}, headers=h, status=400),
            400,
            "VALIDATION_FAILED",
            param="/addTagIds",
        )
    with db.connection_context():
        request = PatientRequest.get_by_id(rid)
        assert (request.clinic_note, request.user_note) == ("clinic note", "mine")
    assert_error(
        app.patch_json(f"{api()}/patientRequests/{rid}", {"userNote": "x"}, headers=bearer(org["read"]), status=403),
        403,
        "FORBIDDEN",
    )


def test_live_answers_match_the_documented_schemas(app, org):
    from jsonschema import Draft202012Validator

    from tests.support.documented import closed, response_schema
    from web import openapi

    document = app.get("/openapi.json").json
    h = bearer(org["write"])

    def check(method: str, path: str, answer: dict) -> None:
        template = openapi.public_path("/external/v1/clinics/{clinic_slug}" + path)
        Draft202012Validator(closed(response_schema(document, template, method))).validate(answer)

    rid = _create(app, org["write"]).json["data"]["id"]
    check("post", "/patientRequests/create", _create(app, org["write"]).json)
    check(
        "post", "/patientRequestTypes/search", app.post_json(api() + "/patientRequestTypes/search", {}, headers=h).json
    )
    check("post", "/patients/search", app.post_json(api() + "/patients/search", {}, headers=h).json)
    check(
        "post",
        "/patients/import",
        app.post_json(
            api() + "/patients/import", {"externalId": "S1", "firstName": "A", "lastName": "B"}, headers=h
        ).json,
    )
    check(
        "post",
        "/patients/import-bulk",
        app.post_json(
            api() + "/patients/import-bulk",
            {"patients": [{"externalId": "S2", "firstName": "A", "lastName": "B"}, {}]},
            headers=h,
        ).json,
    )
    check("post", "/patientRequests/search", app.post_json(api() + "/patientRequests/search", {}, headers=h).json)
    check("get", "/patientRequests/{request_id}", app.get(f"{api()}/patientRequests/{rid}", headers=h).json)
    check(
        "patch",
        "/patientRequests/{request_id}",
        app.patch_json(f"{api()}/patientRequests/{rid}", {"userNote": "n"}, headers=h).json,
    )
    check(
        "post",
        "/patientRequests/{request_id}/attachments/upload-link",
        app.post_json(
            f"{api()}/patientRequests/{rid}/attachments/upload-link", {"contentType": "application/pdf"}, headers=h
        ).json,
    )
    check("get", "/tags", app.get(api() + "/tags", headers=h).json)


@pytest.mark.parametrize(
    "content_type,prefix,ok",
    [
        ("application/pdf", PDF_BYTES[:1024], True),
        ("application/pdf", b"\r\n" * 100 + b"%PDF-1.4", True),  # readers allow bytes before the header
        ("application/pdf", b"<!doctype html><html>", False),
        ("application/pdf", b" " * 1024 + b"%PDF-1.4", False),  # beyond the first KiB
        ("image/png", b"\x89PNG\r\n\x1a\n\x00", True),
        ("image/png", PDF_BYTES[:64], False),
        ("image/jpeg", b"\xff\xd8\xff\xe0JFIF", True),
        ("image/gif", b"GIF89a\x01\x00", True),
        ("image/webp", b"RIFF\x10\x00\x00\x00WEBPVP8 ", True),
        ("image/webp", b"RIFF\x10\x00\x00\x00WAVEfmt ", False),
        ("text/html", b"<html>", False),
        ("application/pdf", b"", False),
    ],
)
def test_stored_bytes_are_checked_against_the_registered_type(content_type, prefix, ok):
    assert file_types.matches(content_type, prefix) is ok
