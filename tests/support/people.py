"""A patient with a little of everything the service can hold about a person, seeded through
the paths that write it (the onboarding file, the API, a finished call), and the ways the
data-protection tests look for what is left of them: the database dumped, the bucket and
Redis read whole."""

from __future__ import annotations

import io
import subprocess
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import redis
import webtest

from models import Call, Clinic, PatientRequest
from onboarding.writer import stable_id
from plumbing import clock
from plumbing.clock import as_utc
from plumbing.database import db
from storage import LocalStorage
from switchboard import finished_calls
from tests.support import bearer, clinic, load, organization
from tests.support.live_service import api, type_id

STORAGE_DIR = Path("var/storage")  # the app fixture's STORAGE_DIR (Config's default)


@dataclass
class Person:
    """What was seeded, and every form in which a trace of it could be found."""

    first: str
    last: str
    phone: str  # E.164
    national: str  # as the person says it, spaced
    email: str
    note: str
    transcript: str
    document_text: str
    patient_id: str = ""
    requests: dict[str, str] = field(default_factory=dict)  # name -> request id
    calls: dict[str, str] = field(default_factory=dict)  # name -> call id
    document_keys: list[str] = field(default_factory=list)  # the sealed copies' object keys
    upload_keys: list[str] = field(default_factory=list)  # uploads never registered

    def traces(self) -> list[str]:
        """Every string that must be gone once the person is (documents kept aside)."""
        digits = self.phone.removeprefix("+420")
        return [
            self.last,
            self.email,
            self.note,
            self.transcript,
            self.phone,
            self.national,
            digits,
            f"{digits[:3]} {digits[3:6]} {digits[6:]}",
        ]


def new_person() -> Person:
    """Distinct values per call: a test's traces are never another test's."""
    n = uuid.uuid4().int
    digits = f"77{n % 10**7:07d}"
    marker = f"Zámečnická{n % 10**6:06d}"
    return Person(
        first="Kateřina",
        last=marker,
        phone=f"+420{digits}",
        national=f"{digits[:3]} {digits[3:6]} {digits[6:]}",
        email=f"katerina.{n % 10**6:06d}@example.cz",
        note=f"Alergie na penicilin, volat po 16. hodině ({marker})",
        transcript=f"Dobrý den, tady Kateřina {marker}, prosím o obnovení receptu na Euthyrox, děkuji.",
        document_text=f"%PDF-1.4 souhlas pacientky {marker}",
    )


def lifecycle_organization() -> dict[str, Any]:
    """clinic-a and clinic-b sharing patients, with a request type, a calendar and tags."""
    a = clinic(
        "clinic-a",
        calendars=[{"name": "Doctor"}],
        tags=[{"type": "patient", "name": "diabetic"}, {"type": "patient_request", "name": "urgent"}],
        requestTypes=[
            {"ecrfId": "SIGNED_CONSENT", "name": "Signed consent"},
            {"ecrfId": "PRESCRIPTION", "name": "Prescription"},
        ],
    )
    b = clinic(
        "clinic-b",
        tags=[{"type": "patient", "name": "b-tag"}],
        requestTypes=[{"ecrfId": "SIGNED_CONSENT", "name": "Signed consent B"}],
    )
    return organization(a, b, sharing=True)


def seed(app: webtest.TestApp, token: str, person: Person, now: datetime, *, documents: bool = True) -> Person:
    """Onboard the person (records in both clinics: notes, tags, external ids, a merged
    duplicate), import them again through the API with an Idempotency-Key (a stored answer
    names them), create two requests (one with a reservation, a tag, a note, a signed
    document and an upload never registered), and finish two calls from their number: a
    voice message request with a transcript, and a call that made none."""
    load(
        {
            **lifecycle_organization(),
            "patients": [
                {
                    "key": "kat",
                    "firstName": person.first,
                    "lastName": person.last,
                    "phone": person.national,
                    "email": person.email,
                    "birthDate": "1983-02-14",
                    "records": [
                        {
                            "clinic": "clinic-a",
                            "note": person.note,
                            "tags": ["diabetic"],
                            "externalIds": [{"source": "nis", "id": f"NIS-{person.last}"}],
                        },
                        {"clinic": "clinic-b", "note": person.note, "tags": ["b-tag"]},
                    ],
                },
                {
                    "key": "kat-dup",
                    "firstName": person.first,
                    "lastName": person.last + "-dup",
                    "mergedInto": "kat",
                    "records": [{"clinic": "clinic-a"}],
                },
            ],
        }
    )
    person.patient_id = str(stable_id("patient", "test-org", "kat"))
    headers = bearer(token)
    app.post_json(
        api() + "/patients/import",
        {
            "externalId": f"NIS-{person.last}",
            "externalIdSource": "nis",
            "firstName": person.first,
            "lastName": person.last,
            "phone": person.phone,
        },
        headers={**headers, "Idempotency-Key": f"import-{person.phone}"},
    )
    calendar = str(stable_id("calendar", "clinic-a", "Doctor"))
    slot = {"start": "2026-12-01T09:00:00+01:00", "end": "2026-12-01T09:30:00+01:00", "calendarId": calendar}
    booked = app.post_json(
        api() + "/patientRequests/create",
        {
            "patientId": person.patient_id,
            "userECRFId": type_id("PRESCRIPTION"),
            "userNote": person.note,
            "timeSlotInput": slot,
        },
        headers={**headers, "Idempotency-Key": f"create-{person.phone}"},
    ).json["data"]
    person.requests["booked"] = booked["id"]
    signed = app.post_json(
        api() + "/patientRequests/create",
        {"patientId": person.patient_id, "userECRFId": type_id("SIGNED_CONSENT"), "userNote": person.note},
        headers=headers,
    ).json["data"]
    person.requests["signed"] = signed["id"]
    tag = str(stable_id("tag", "clinic-a", "patient_request", "urgent"))
    app.patch_json(
        f"{api()}/patientRequests/{signed['id']}", {"addTagIds": [tag], "userNote": person.note}, headers=headers
    )
    storage = LocalStorage(STORAGE_DIR, signing_key=b"x" * 16, public_base_url="http://x")
    if documents:
        link = app.post_json(
            f"{api()}/patientRequests/{signed['id']}/attachments/upload-link",
            {"contentType": "application/pdf"},
            headers=headers,
        ).json["data"]
        body = person.document_text.encode()
        storage.write_stream(link["fileHash"], io.BytesIO(body), len(body), "application/pdf")
        app.post_json(
            f"{api()}/patientRequests/{signed['id']}/attachments",
            {
                "contentType": "application/pdf",
                "fileHash": link["fileHash"],
                "description": "souhlas.pdf",
                "categoryType": "CONSENT",
                "visibleToPatient": True,
            },
            headers=headers,
        )
        from models import MedicalRecord

        with db.connection_context():
            person.document_keys = [
                m.stored_key for m in MedicalRecord.select().where(MedicalRecord.request == signed["id"])
            ]
    pending = app.post_json(
        f"{api()}/patientRequests/{booked['id']}/attachments/upload-link",
        {"contentType": "application/pdf"},
        headers=headers,
    ).json["data"]
    storage.write_stream(
        pending["fileHash"],
        io.BytesIO(person.document_text.encode()),
        len(person.document_text.encode()),
        "application/pdf",
    )
    person.upload_keys = [pending["fileHash"]]
    person.calls["message"] = finish_call(
        "clinic-a",
        person.national,
        now,
        "voice_message",
        transcript=person.transcript,
        callback=person.phone,
        status="reliable",
        signals='{"avg_logprob": -0.31}',
        intelligibility="speech",
        heard_number=person.phone,
        callback_number_at=4.2,
    )
    person.calls["bare"] = finish_call("clinic-a", person.phone, now, "no_recording")
    with db.connection_context():
        request = Call.get_by_id(person.calls["message"]).requests.get()
        person.requests["message"] = str(request.id)
        # What the inbox read in the transcript, confirmed and cleared by staff.
        at = person.transcript.index("receptu")
        PatientRequest.update(
            suggested_type=type_id("PRESCRIPTION"),
            suggested_type_spans=f"[[{at}, {at + 7}]]",
            type_confirmed_at=as_utc(now),
            urgent=False,
            urgent_spans=f"[[{at}, {at + 7}]]",
            urgent_cleared_at=as_utc(now),
        ).where(PatientRequest.id == request.id).execute()
        # What staff who listened wrote down as really said, beside the machine's text.
        Call.update(
            corrected_transcript=f"{person.transcript} (opraveno: {person.last})",
            corrected_at=as_utc(now),
            corrected_by="anna@example.cz",
        ).where(Call.id == person.calls["message"]).execute()
    return person


def finish_call(slug: str, number: str, received_at: datetime, outcome: str, **results: Any) -> str:
    """A call stored as the hand-off stores it, finished as the ingest job finishes it."""
    with db.connection_context():
        clinic_row = Clinic.by_slug(slug)
        call = Call.create(
            clinic=clinic_row,
            call_sid=f"CA{uuid.uuid4().hex}",
            call_from=number,
            recording_sha256="ab" * 32,
            recording_bytes=48_000,
            call_to="+420222333444",
            status="completed",
            has_recording=outcome != "no_recording",
            recording_url=f"https://platform.example/rec/{uuid.uuid4().hex}.mp3",
            recording_sid=f"RE{uuid.uuid4().hex[:12]}",
            source="pbx",
            extra='{"flow": "voicemail"}',
            received_at=as_utc(received_at),
        )
        finished_calls.finish(call, outcome, clock.now(), language="cs" if "transcript" in results else None, **results)
    return str(call.id)


# --- where traces could be -------------------------------------------------------------------


def database_dump(url: str) -> str:
    """Every row of the database, as `pg_dump --data-only` writes it (bytea as hex), without
    the random key of its `\\restrict` lines and the sequences' positions (a rolled-back
    insert moves them): two dumps of the same rows are equal."""
    done = subprocess.run(
        ["pg_dump", "--data-only", "--no-owner", url], capture_output=True, text=True, timeout=120, check=True
    )
    return "".join(
        line
        for line in done.stdout.splitlines(keepends=True)
        if not line.startswith(("\\restrict", "\\unrestrict", "SELECT pg_catalog.setval("))
    )


def bucket_bytes(root: Path = STORAGE_DIR) -> bytes:
    """Every stored object's bytes, one after the other."""
    return b"\n".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())


def redis_values(url: str) -> bytes:
    """Every key and plain value of the Redis database (strings, hashes, lists, sets)."""
    client = redis.Redis.from_url(url)
    out: list[bytes] = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        out.append(key)
        if kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"hash":
            out += [v for pair in client.hgetall(key).items() for v in pair]
        elif kind == b"list":
            out += client.lrange(key, 0, -1)
        elif kind in (b"set", b"zset"):
            out += list(client.smembers(key)) if kind == b"set" else client.zrange(key, 0, -1)
    return b"\n".join(out)


def found(traces: list[str], *places: str | bytes) -> list[str]:
    """The traces present in any of the places (text, bytes, or bytea's hex in a dump)."""
    hits = []
    for trace in traces:
        forms = [trace.encode(), trace.encode().hex().encode()]
        for place in places:
            data = place.encode() if isinstance(place, str) else place
            if any(form in data for form in forms):
                hits.append(trace)
                break
    return hits
