"""Every answer the API can give, provoked on purpose: each error code of web/error_codes.py
that an endpoint answers, each reason a recording is gone, each value of every enumeration
an answer carries, through the real app (WebTest) and the real database and Redis.

`every_answer` returns them as `Provoked`, in the order provoked; tests/test_contract.py
checks each against the OpenAPI document (the contract plugin does too, at each request),
and tests/test_generated_clients.py hands them to the generated clients, which must read
every one. A few answers need settings of their own (a body deadline of a twentieth of a
second, one hand-off a minute, one open upload link, Redis or the database down): those come from apps
built for the purpose with `create_app`, on the same database.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import time
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import webtest

from tests.support import bearer, issue_token, load

SLUG = "demo-clinic"
BASE = f"/external/v1/clinics/{SLUG}"
SB = f"{BASE}/switchboard"
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"
#: A port nothing listens on: the "Redis down" app's.
DEAD_REDIS = "redis://127.0.0.1:1/0"
DEAD_DATABASE = "postgresql://postgres@127.0.0.1:1/nothing"


@dataclass
class Provoked:
    """One answer: the request that provoked it and what came back."""

    method: str
    path: str
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str]

    @property
    def data(self) -> Any:
        return json.loads(self.body) if self.content_type == "application/json" and self.body else None


class Recorder:
    """Sends requests through a WebTest app and keeps every answer."""

    def __init__(self) -> None:
        self.answers: list[Provoked] = []

    def keep(self, req: webtest.TestRequest, res: webtest.TestResponse) -> webtest.TestResponse:
        self.answers.append(
            Provoked(req.method, req.path, res.status_int, res.content_type or "", res.body, dict(res.headers))
        )
        return res

    def send(
        self,
        app: webtest.TestApp,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        content_type: str = "application/json",
        status: int | None = None,
    ) -> webtest.TestResponse:
        sent = {**(bearer(token) if token else {}), **(headers or {})}
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        if data:
            sent.setdefault("Content-Type", content_type)
        req = webtest.TestRequest.blank(path, method=method, headers=sent, body=data if data else None)
        res = app.do_request(req, status="*", expect_errors=True)
        if status is not None:
            assert res.status_int == status, f"{method} {path}: {res.status_int} {res.body[:300]!r}"
        return self.keep(req, res)


def _ids() -> dict[str, str]:
    """The demo clinic's rows the requests name (other tests' organizations may be there too)."""
    from models import Clinic, Patient, RequestType, Tag
    from plumbing.database import db

    with db.connection_context():
        clinic = Clinic.get(Clinic.slug == SLUG)
        ours = Patient.organization == clinic.organization_id
        return {
            "jana": str(Patient.get(ours & (Patient.last_name == "Nováková")).id),
            "jana-dup": str(Patient.get(ours & Patient.merged_into.is_null(False)).id),
            "type": str(RequestType.get((RequestType.clinic == clinic) & (RequestType.ecrf_id == "SIGNED_CONSENT")).id),
            "needs-callback": str(Tag.get((Tag.clinic == clinic) & (Tag.name == "needs-callback")).id),
        }


def _call_request(kind: str, sid: str, clock: Any, **fields: Any) -> str:
    """A request made from a call, as the ingest job leaves it (the call stored as given)."""
    from models import Call, Clinic, Patient, PatientRequest
    from plumbing.clock import as_utc
    from plumbing.database import db

    with db.connection_context():
        clinic = Clinic.get(Clinic.slug == SLUG)
        patient = Patient.get((Patient.organization == clinic.organization_id) & (Patient.last_name == "Nováková"))
        call = Call.create(
            clinic=clinic,
            call_sid=sid,
            call_from="+420601123456",
            call_to="+420222000111",
            state="done",
            outcome=kind,
            received_at=as_utc(clock()),
            **fields,
        )
        return str(
            PatientRequest.create(
                clinic=clinic, patient=patient, kind=kind, title=kind, call=call, created_at=as_utc(clock())
            ).id
        )


def every_answer(app: webtest.TestApp, config: Any, clock: Any, example: dict[str, Any]) -> list[Provoked]:
    from app import create_app
    from models import Clinic
    from plumbing.database import db
    from voicemail.recordings import GONE_REASONS

    load(example)
    rw = issue_token([SLUG], ["read", "write"])
    read = issue_token([SLUG], ["read"])
    brno = issue_token(["demo-clinic-brno"], ["read", "write"])
    ids = _ids()
    r = Recorder()
    send = r.send

    # --- the service's own endpoints
    send(app, "GET", "/openapi.json", status=200)
    send(app, "GET", "/healthz", status=200)
    send(app, "GET", "/readyz", status=200)
    send(app, "GET", "/livez", status=200)
    send(app, "GET", "/metrics", status=200)

    # --- the switchboard
    send(app, "POST", f"{SB}/is-clinic-opened", token=read, status=200)
    send(app, "POST", f"{SB}/is-on-vacation", {}, token=read, status=200)
    send(app, "POST", f"{SB}/has-active-request", {"callFrom": "+420 601 123 456"}, token=read, status=200)
    handoff = {"CallSid": "CA-contract", "CallFrom": "+420601123456", "CallTo": "+420222000111"}
    send(app, "POST", f"{SB}/recording-complete", handoff, token=rw, status=200)
    send(
        app,
        "POST",
        f"{SB}/recording-complete",
        raw=b"CallSid=CA-form&CallFrom=%2B420601123456",
        content_type="application/x-www-form-urlencoded",
        token=rw,
        status=200,
    )  # a form: read, never 415
    send(
        app,
        "POST",
        "/external/v1/clinics/demo-clinic-brno/switchboard/recording-complete",
        handoff,
        token=brno,
        status=409,
    )  # CALL_SID_CONFLICT
    send(app, "POST", f"{SB}/has-active-request", {}, token=read, status=400)  # VALIDATION_FAILED
    send(app, "POST", f"{SB}/is-clinic-opened", status=401)  # UNAUTHORIZED
    send(app, "POST", f"{SB}/recording-complete", handoff, token=read, status=403)  # FORBIDDEN (scope)
    send(app, "POST", "/external/v1/clinics/no-such-clinic/switchboard/is-clinic-opened", token=read, status=404)
    send(app, "POST", f"{SB}/no-such-check", token=read, status=404)  # NOT_FOUND
    send(app, "GET", f"{SB}/is-clinic-opened", token=read, status=405)  # METHOD_NOT_ALLOWED
    send(
        app,
        "POST",
        f"{SB}/has-active-request",
        raw=b"callFrom=1",
        content_type="application/x-www-form-urlencoded",
        token=read,
        status=415,
    )
    send(
        app, "POST", f"{SB}/has-active-request", raw=b"{" + b" " * config.max_body_bytes + b"}", token=read, status=413
    )
    chunked = webtest.TestRequest.blank(
        f"{SB}/has-active-request",
        method="POST",
        headers={**bearer(read), "Content-Type": "application/json", "Transfer-Encoding": "chunked"},
    )
    chunked.environ["wsgi.input"] = io.BytesIO(b'{"callFrom": "1"}')
    chunked.environ.pop("CONTENT_LENGTH", None)
    r.keep(chunked, app.do_request(chunked, status=411, expect_errors=True))  # LENGTH_REQUIRED

    # --- the signed documents
    send(app, "POST", f"{BASE}/patientRequestTypes/search", {}, token=read, status=200)
    send(app, "POST", f"{BASE}/patients/search", {"pagination": {"limit": 2}}, token=read, status=200)
    send(app, "POST", f"{BASE}/patients/search", {"pagination": {"limit": 0}}, token=read, status=400)
    person = {"externalIdSource": "signing-system", "firstName": "Marie", "lastName": "Dvořáková"}
    send(app, "POST", f"{BASE}/patients/import", {**person, "externalId": "EXT-9"}, token=rw, status=200)
    send(
        app,
        "POST",
        f"{BASE}/patients/import-bulk",
        {"patients": [{**person, "externalId": "EXT-9"}, {**person, "externalId": "EXT-10"}, {"externalId": "EXT-11"}]},
        token=rw,
        status=200,
    )  # updated, created, failed
    create = {"patientId": ids["jana"], "userECRFId": ids["type"]}
    key = str(uuid.uuid4())
    made = send(
        app, "POST", f"{BASE}/patientRequests/create", create, token=rw, headers={"Idempotency-Key": key}, status=200
    )
    send(
        app, "POST", f"{BASE}/patientRequests/create", create, token=rw, headers={"Idempotency-Key": key}, status=200
    )  # replayed
    send(
        app,
        "POST",
        f"{BASE}/patientRequests/create",
        {**create, "userNote": "other"},
        token=rw,
        headers={"Idempotency-Key": key},
        status=422,
    )  # IDEMPOTENCY_KEY_REUSED
    send(
        app, "POST", f"{BASE}/patientRequests/create", create, token=rw, headers={"Idempotency-Key": ""}, status=400
    )  # IDEMPOTENCY_KEY_INVALID
    running = str(uuid.uuid4())
    claim = "idempotency:{}:{}".format(
        uuid.UUID(rw.split("_")[1]), hashlib.sha256(f"createPatientRequest\0{running}".encode()).hexdigest()
    )
    queue = redis.Redis.from_url(config.redis_url)
    queue.set(claim, "another request", ex=30)
    try:
        send(
            app,
            "POST",
            f"{BASE}/patientRequests/create",
            create,
            token=rw,
            headers={"Idempotency-Key": running},
            status=409,
        )  # IDEMPOTENCY_KEY_IN_PROGRESS
    finally:
        queue.delete(claim)
    send(
        app, "POST", f"{BASE}/patientRequests/create", {**create, "patientId": str(uuid.uuid4())}, token=rw, status=404
    )  # PATIENT_NOT_FOUND
    send(
        app, "POST", f"{BASE}/patientRequests/create", {**create, "userECRFId": str(uuid.uuid4())}, token=rw, status=404
    )  # USER_ECRF_NOT_FOUND
    send(
        app, "POST", f"{BASE}/patientRequests/create", {**create, "patientId": ids["jana-dup"]}, token=rw, status=410
    )  # PATIENT_MERGED
    request_id = made.json["data"]["id"]
    one = f"{BASE}/patientRequests/{request_id}"
    send(app, "GET", f"{BASE}/patientRequests/{uuid.uuid4()}", token=read, status=404)  # PATIENT_REQUEST_NOT_FOUND
    categories = [
        "CONSENT",
        "ANAMNESIS",
        "MEDICAL_REPORT",
        "LAYOFF_REPORT",
        "TEST_RESULTS",
        "LABORATORY_RESULTS",
        "OPINION",
        "REFERRAL",
        "OTHER",
    ]
    upload_paths = []
    for category in categories:
        link = send(
            app, "POST", f"{one}/attachments/upload-link", {"contentType": "application/pdf"}, token=rw, status=200
        ).json["data"]
        url = urlsplit(link["url"])
        upload_paths.append(f"{url.path}?{url.query}")
        put = webtest.TestRequest.blank(
            upload_paths[-1], method="PUT", body=PDF, headers={"Content-Type": "application/pdf"}
        )
        r.keep(put, app.do_request(put, status=200))
        send(
            app,
            "POST",
            f"{one}/attachments",
            {
                "contentType": "application/pdf",
                "fileHash": link["fileHash"],
                "description": f"{category.lower()}.pdf",
                "categoryType": category,
            },
            token=rw,
            status=200,
        )
    again = webtest.TestRequest.blank(
        upload_paths[0], method="PUT", body=PDF, headers={"Content-Type": "application/pdf"}
    )
    r.keep(again, app.do_request(again, status=409, expect_errors=True))  # ALREADY_REGISTERED
    detail = send(app, "GET", one, token=read, status=200).json["data"]
    download = urlsplit(detail["medicalRecords"][0]["downloadUrl"])
    for method, headers, status in (
        ("GET", {}, 200),
        ("HEAD", {}, 200),
        ("GET", {"Range": "bytes=0-3"}, 206),
        ("GET", {"Range": f"bytes={len(PDF) + 10}-"}, 416),
    ):
        got = webtest.TestRequest.blank(f"{download.path}?{download.query}", method=method, headers=headers)
        r.keep(got, app.do_request(got, status=status, expect_errors=True))
    forged = webtest.TestRequest.blank(f"{download.path}?{download.query.replace('signature=', 'signature=0')}")
    r.keep(forged, app.do_request(forged, status=403, expect_errors=True))  # FORBIDDEN (a storage URL)
    send(app, "PATCH", one, {"addTagIds": [ids["needs-callback"]], "done": True}, token=rw, status=200)
    send(app, "POST", f"{BASE}/patientRequests/search", {"filter": {"kind": "standard"}}, token=read, status=200)
    for kind in ("patient", "patient_request"):
        send(app, "GET", f"{BASE}/tags?type={kind}", token=read, status=200)
    send(app, "GET", f"{BASE}/tags?type=nonsense", token=read, status=400)
    send(app, "GET", f"{one}/recording", token=read, status=404)  # NOT_FOUND: not made from a call
    with pytest.MonkeyPatch.context() as patched:
        import peewee

        from patient_requests import changes, queries

        def collide(*args: Any, **kwargs: Any) -> Any:  # a unique key another write took at the same moment
            raise peewee.IntegrityError("duplicate key value violates unique constraint")

        patched.setattr(changes, "update", collide)
        send(app, "PATCH", one, {"userNote": "x"}, token=rw, status=409)  # CONFLICT

        def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("an unexpected fault")

        patched.setattr(queries, "search", fail)
        send(app, "POST", f"{BASE}/patientRequests/search", {}, token=read, status=500)  # INTERNAL_ERROR

    # --- requests made from calls: every transcript status, every state of the recording
    now = clock()
    link = "https://recordings.example.net/calls/RE1.mp3"
    made_from_calls = [
        _call_request(
            "voice_message",
            "CA-available",
            clock,
            recording_url=link,
            transcript="Dobrý den.",
            transcript_status="reliable",
            transcript_language="cs",
            callback_number="+420601123456",
            callback_number_at=3.5,
        ),
        _call_request("missed_call", "CA-none", clock),
    ]
    for _number, status in enumerate(("check", "unreliable", "failed")):
        made_from_calls.append(
            _call_request(
                "voice_message",
                f"CA-{status}",
                clock,
                recording_url=link,
                transcript="…",
                transcript_status=status,
                transcript_issue="low_confidence",
                heard_number="+420700123456",
            )
        )
    for reason in GONE_REASONS:
        if reason in ("no_recording", "expired"):
            continue  # what the call itself says: no link at all, or an old one and no re-fetch
        made_from_calls.append(
            _call_request("voice_message", f"CA-gone-{reason}", clock, recording_url=link, recording_gone_reason=reason)
        )
    clock.set(now - timedelta(hours=2))
    made_from_calls.append(_call_request("voice_message", "CA-expired", clock, recording_url=link))
    made_from_calls.append(
        _call_request(
            "voice_message",
            "CA-refetchable",
            clock,
            recording_url=link,
            source="examplepbx voicemail",
            recording_sid="RE1",
        )
    )
    clock.set(now)
    with db.connection_context():
        Clinic.update(platform_source_markers=json.dumps(["examplepbx"])).where(Clinic.slug == SLUG).execute()
    for request in made_from_calls:
        send(app, "GET", f"{BASE}/patientRequests/{request}", token=read, status=200)
        answer = send(app, "GET", f"{BASE}/patientRequests/{request}/recording", token=read)
        assert answer.status_int in (302, 410, 503), answer.status_int
    send(app, "POST", f"{BASE}/patientRequests/search", {"pagination": {"limit": 500}}, token=read, status=200)
    send(
        app,
        "POST",
        f"{BASE}/patientRequests/search",
        {"filter": {"updatedSince": "2000-01-01T00:00:00Z"}, "pagination": {"limit": 500}},
        token=read,
        status=200,
    )
    send(app, "POST", f"{BASE}/patients/search", {"filter": {"updatedSince": "2000-01-01T00:00:00Z"}}, token=read)

    # --- the event log: every type, every source, every change
    _every_change(made_from_calls, ids, clock)
    send(app, "GET", f"{BASE}/events?limit=500", token=read, status=200)
    send(app, "GET", f"{BASE}/events?after=nonsense", token=read, status=400)

    # --- what needs settings of its own
    previous = db.obj
    try:
        tight = webtest.TestApp(
            create_app(
                replace(config, body_read_seconds=0.05, rate_limit_handoffs_per_minute=1, upload_links_per_clinic=1)
            )
        )
        for sid in ("CA-tight-1", "CA-tight-2"):
            send(tight, "POST", f"{SB}/recording-complete", {**handoff, "CallSid": sid}, token=rw)
        assert r.answers[-1].status == 429, "RATE_LIMITED"
        for _ in range(2):
            send(tight, "POST", f"{one}/attachments/upload-link", {"contentType": "application/pdf"}, token=rw)
        assert r.answers[-1].status == 429, "TOO_MANY_UPLOAD_LINKS"
        slow = webtest.TestRequest.blank(
            f"{SB}/has-active-request", method="POST", headers={**bearer(read), "Content-Type": "application/json"}
        )
        trickle = Trickle(b'{"callFrom": "+420601123456"}', pause=0.08)
        slow.environ["wsgi.input"], slow.environ["CONTENT_LENGTH"] = trickle, str(len(trickle.data))
        r.keep(slow, tight.do_request(slow, status=408, expect_errors=True))  # REQUEST_TIMEOUT
        down = webtest.TestApp(create_app(replace(config, redis_url=DEAD_REDIS, provider_marker_words="examplepbx")))
        send(down, "GET", "/healthz", status=200)  # degraded: Redis is down, the service still serves
        send(
            down, "GET", f"{BASE}/patientRequests/{made_from_calls[-1]}/recording", token=read, status=503
        )  # the re-fetch cannot be queued
        nothing = webtest.TestApp(create_app(replace(config, database_url=DEAD_DATABASE)))
        send(nothing, "GET", "/readyz", status=503)  # SERVICE_UNAVAILABLE: the database down, nothing known
    finally:
        db.initialize(previous)
    return r.answers


def _every_change(requests: list[str], ids: dict[str, str], clock: Any) -> None:
    """The changes the API cannot make, made as the console and the workers make them."""
    from models import Actor, ChangeEvent, Patient, PatientRequest
    from patient_requests import changes
    from plumbing.database import db
    from privacy import erasure
    from storage import LocalStorage
    from voicemail import recordings

    who = Actor("operator", "contract")
    now = clock()
    with db.connection_context():
        for request_id in requests[:2]:  # a voice message's and a missed call's
            request = PatientRequest.get_by_id(request_id)
            with db.atomic():  # as switchboard/finished_calls.py records it (this helper stores the call's request)
                source = "voicemail" if request.kind == "voice_message" else "missed_call"
                ChangeEvent.record(
                    request.clinic_id,
                    "request.created",
                    {
                        "requestId": str(request.id),
                        "patientId": str(request.patient_id),
                        "kind": request.kind,
                        "source": source,
                    },
                    now,
                )
        first = PatientRequest.get_by_id(requests[0])
        changes.set_note(first, "contract", who, now)
        changes.confirm_type(first, None, who, now)
        PatientRequest.update(urgent=True).where(PatientRequest.id == first.id).execute()
        changes.clear_urgent(PatientRequest.get_by_id(first.id), who, now)
        recordings.remember_gone(first.call_id, "deleted", now)
        storage = LocalStorage("var/storage", signing_key=b"x" * 16, public_base_url="http://x")
        imported = Patient.select().where(Patient.last_name == "Dvořáková").order_by(Patient.created_at).first()
        erasure.erase(imported.id, who, now, storage)


class Trickle:
    """A request body that arrives a few bytes at a time, `pause` seconds apart."""

    def __init__(self, data: bytes, pause: float) -> None:
        self.data, self.pause, self.sent = data, pause, 0

    def read(self, size: int = -1) -> bytes:
        if self.sent:
            time.sleep(self.pause)
        piece = self.data[self.sent : self.sent + 4]
        self.sent += len(piece)
        return piece

    # What a WSGI input has besides (WebTest's checks ask for them).
    def readline(self, size: int = -1) -> bytes:
        return self.read(size)

    def readlines(self, hint: int = -1) -> list[bytes]:
        return [self.read()]

    def __iter__(self) -> Any:
        return iter(self.readlines())


def as_records(answers: list[Provoked]) -> list[dict[str, Any]]:
    """The answers as JSON-able records (for the generated clients' drivers)."""
    return [{**dataclasses.asdict(a), "body": a.body.decode("utf-8", "replace")} for a in answers]
