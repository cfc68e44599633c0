"""The integrator's side, written against the Python client openapi-python-client
generates from the service's /openapi.json (tests/test_generated_clients.py generates it
as the package `clinic_client` and runs this file with the tools' virtualenv).

Typed end to end: answers are narrowed with isinstance, never cast, never re-parsed
from raw JSON. Storage URLs get a plain httpx client: the generated AuthenticatedClient
would send the bearer token to them too. Prints one line per step; exits non-zero on
the first surprise.

    drive_python.py BASE_URL TOKEN CLINIC PDF CALL_SID RECORDING_URL
"""

from __future__ import annotations

import math
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

import httpx
from clinic_client import AuthenticatedClient
from clinic_client.api.signed_documents import (
    create_patient_request,
    create_upload_link,
    get_patient_request,
    import_patient,
    import_patients_bulk,
    list_tags,
    register_attachment,
    search_patient_request_types,
    search_patient_requests,
    search_patients,
    update_patient_request,
)
from clinic_client.api.switchboard import (
    get_recording,
    has_active_request,
    is_clinic_opened,
    is_on_vacation,
    recording_complete,
)
from clinic_client.models import (
    ActiveRequest,
    ActiveRequestQuery,
    AttachmentRegistration,
    AttachmentRegistrationContentType,
    Call,
    CategoryType,
    ClinicOpened,
    CreatePatientRequestResponse200,
    CreateUploadLinkResponse200,
    Error,
    GetPatientRequestResponse200,
    ImportPatientResponse200,
    ImportPatientsBulkResponse200,
    ListTagsResponse200,
    OnVacation,
    PatientImport,
    PatientImportBulk,
    PatientRequestCreate,
    PatientRequestPatch,
    PatientRequestSearch,
    PatientRequestSearchFilter,
    PatientSearch,
    PatientSearchFilter,
    RateLimitStanding,
    RecordingAvailable,
    RecordingComplete,
    RegisterAttachmentResponse200,
    RequestKind,
    SearchPatientRequestsResponse200,
    SearchPatientRequestTypesResponse200,
    SearchPatientsResponse200,
    Success,
    TagType,
    UpdatePatientRequestResponse200,
    UploadLinkRequest,
    VacationQuery,
)


@dataclass(frozen=True)
class Budget:
    """Where the token stands on one budget, read off an answer's metadata: the generated
    client hands over the headers (`.sync_detailed(...).headers`), not parsed."""

    policy: str
    limit: int
    window: int
    remaining: int
    reset: int


def rate_limit(headers: Mapping[str, str]) -> Budget:
    """The RateLimit-Policy (`"writes";q=600;w=60`) and RateLimit (`"writes";r=597;t=1`)
    fields of an answer to a counted write."""
    policy, *quota = headers["RateLimit-Policy"].split(";")
    _, *left = headers["RateLimit"].split(";")
    n = {part[0]: int(part[2:]) for part in quota + left}
    return Budget(policy.strip('"'), n["q"], n["w"], n["r"], n["t"])


def remaining(headers: Mapping[str, str]) -> int:
    """The requests left, `r`, of a RateLimit field."""
    return rate_limit(headers).remaining


def fail(step: str, answer: object) -> NoReturn:
    sys.exit(f"{step}: unexpected answer {answer!r}")


def js(value: object) -> str:
    """As drive.ts prints it (JavaScript's template strings): true, null, a,b."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(js(v) for v in value)
    return str(value)


def main(base_url: str, token: str, clinic: str, pdf_path: str, call_sid: str, recording_url: str) -> None:
    api = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True)
    plain = httpx.Client(timeout=30)  # presigned storage URLs: no bearer token goes there

    # --- switchboard: the three routing checks and the hand-off -----------------------
    opened = is_clinic_opened.sync(clinic, client=api)
    if not isinstance(opened, ClinicOpened):
        fail("is-clinic-opened", opened)
    vacation = is_on_vacation.sync(clinic, client=api, body=VacationQuery())
    if not isinstance(vacation, OnVacation):
        fail("is-on-vacation", vacation)
    active = has_active_request.sync(clinic, client=api, body=ActiveRequestQuery(call_from="+420 601 123 456"))
    if not isinstance(active, ActiveRequest):
        fail("has-active-request", active)
    print(
        f"checks: open={js(opened.is_open)} vacation={js(vacation.is_on_vacation)} "
        f"active={js(active.has_active_request)}"
    )
    handed_answer = recording_complete.sync_detailed(
        clinic,
        client=api,
        body=RecordingComplete(
            call_sid=call_sid,
            call_from="+420 601 123 456",
            call_to="+420 200 000 000",
            has_recording=True,
            recording_url=recording_url,
            recording_sid=recording_url.rsplit("/", 1)[-1],
            source="generated-client",
        ),
    )
    handed = handed_answer.parsed
    if not isinstance(handed, Success):
        fail("recording-complete", handed)
    print(f"hand-off: success={js(handed.success)}")

    # --- signed documents, steps 1-7 ------------------------------------------------
    types = search_patient_request_types.sync(clinic, client=api)
    if not isinstance(types, SearchPatientRequestTypesResponse200):
        fail("1", types)
    consent = next(t for t in types.data if t.ecrf_id == "SIGNED_CONSENT")
    print(f"1. type: {consent.name} requiresSignature={js(consent.requires_signature)}")

    found = search_patients.sync(
        clinic,
        client=api,
        body=PatientSearch(filter_=PatientSearchFilter(external_id="EXT-1", external_id_source="signing-system")),
    )
    if not isinstance(found, SearchPatientsResponse200):
        fail("2", found)
    patient = next(p for p in found.data if p.is_in_clinic)
    print(
        f"2. patient: {patient.first_name} {patient.last_name} tags={js([t.name for t in patient.tags])} "
        f"externalIds={js([f'{e.source}:{e.id}' for e in patient.external_ids])} "
        f"next={js(found.pagination.next_cursor)}"
    )

    imported_answer = import_patient.sync_detailed(
        clinic,
        client=api,
        body=PatientImport(
            external_id="GEN-PY-1", external_id_source="signing-system", first_name="Eva", last_name="Dvořáková"
        ),
    )
    imported = imported_answer.parsed
    if not isinstance(imported, ImportPatientResponse200):
        fail("import", imported)
    bulk_answer = import_patients_bulk.sync_detailed(
        clinic,
        client=api,
        body=PatientImportBulk(
            patients=[
                PatientImport(external_id="GEN-PY-2", first_name="Adam", last_name="Beneš", phone="+420 603 111 222"),
                PatientImport(external_id="GEN-PY-3", first_name="Běla", last_name="Černá", phone="not a phone"),
            ]
        ),
    )
    bulk = bulk_answer.parsed
    if not isinstance(bulk, ImportPatientsBulkResponse200):
        fail("import-bulk", bulk)
    # The failed item's field, read from `param` (never from the message).
    failed = [f"{item.index}:{item.error.code}:{item.error.param}" for item in bulk.data if item.error is not None]
    print(
        f"import: created={js(imported.data.created)} bulk={js([item.status.value for item in bulk.data])} "
        f"failed={js(failed)}"
    )
    # Where the token stands on its budgets: the RateLimit fields of each counted write.
    left = [remaining(a.headers) for a in (imported_answer, bulk_answer)]
    print(
        f"rate limits: {handed_answer.headers['RateLimit-Policy']} {imported_answer.headers['RateLimit-Policy']} "
        f"counting down={js(left[1] < left[0])}"
    )

    # Every write sent with an Idempotency-Key: a retry with the same key (after a timeout,
    # say) is answered the first answer and writes nothing again.
    create_key = str(uuid.uuid4())
    creation = PatientRequestCreate(
        patient_id=patient.id, user_ecrf_id=consent.id, user_note="Signed consent, version 3"
    )
    created = create_patient_request.sync(clinic, client=api, body=creation, idempotency_key=create_key)
    if not isinstance(created, CreatePatientRequestResponse200):
        fail("3", created)
    request = created.data
    print(f"3. request: {request.title} kind={request.kind.value} doneAt={js(request.done_at)}")
    again = create_patient_request.sync(clinic, client=api, body=creation, idempotency_key=create_key)
    if not isinstance(again, CreatePatientRequestResponse200):
        fail("3 again", again)
    print(f"3. retried with its Idempotency-Key: same request={js(again.data.id == request.id)}")

    link = create_upload_link.sync(
        clinic, str(request.id), client=api, body=UploadLinkRequest(content_type="application/pdf")
    )
    if not isinstance(link, CreateUploadLinkResponse200):
        fail("4", link)
    print("4. upload link issued")

    with open(pdf_path, "rb") as f:
        pdf = f.read()
    put = plain.put(link.data.url, content=pdf, headers={"Content-Type": "application/pdf"})
    print(f"5. upload: {put.status_code}")
    put.raise_for_status()

    registration = AttachmentRegistration(
        content_type=AttachmentRegistrationContentType.APPLICATIONPDF,
        file_hash=link.data.file_hash,
        description="signed-consent.pdf",
        category_type=CategoryType.CONSENT,
    )
    register_key = str(uuid.uuid4())
    registered = register_attachment.sync(
        clinic, str(request.id), client=api, body=registration, idempotency_key=register_key
    )
    if not isinstance(registered, RegisterAttachmentResponse200):
        fail("6", registered)
    again_registered = register_attachment.sync(
        clinic, str(request.id), client=api, body=registration, idempotency_key=register_key
    )
    if (
        not isinstance(again_registered, RegisterAttachmentResponse200)
        or again_registered.data.id != registered.data.id
    ):
        fail("6 again", again_registered)
    print(f"6. attachment: {registered.data.content_type} sha256={registered.data.sha256}")

    detail = get_patient_request.sync(clinic, str(request.id), client=api)
    if not isinstance(detail, GetPatientRequestResponse200):
        fail("7", detail)
    [record] = detail.data.medical_records
    downloaded = plain.get(record.download_url)
    downloaded.raise_for_status()
    same = "identical" if downloaded.content == pdf else "DIFFERENT"
    print(f"7. read back: {len(downloaded.content)} bytes, {same}; category={js(record.category_type)}")
    if downloaded.content != pdf:
        sys.exit("the PDF read back differs from the one uploaded")

    tags = list_tags.sync(clinic, client=api, type_=TagType.PATIENT_REQUEST)
    if not isinstance(tags, ListTagsResponse200):
        fail("tags", tags)
    patched = update_patient_request.sync(
        clinic, str(request.id), client=api, body=PatientRequestPatch(add_tag_ids=[t.id for t in tags.data], done=True)
    )
    if not isinstance(patched, UpdatePatientRequestResponse200):
        fail("patch", patched)
    print(f"patch: tags={js([t.name for t in patched.data.tags])} done={js(patched.data.done_at is not None)}")

    # --- the hand-off's request, once the worker made it (bounded wait) ---------------
    deadline = time.monotonic() + 120
    while True:
        page = search_patient_requests.sync(
            clinic,
            client=api,
            body=PatientRequestSearch(filter_=PatientRequestSearchFilter(kind=RequestKind.MISSED_CALL)),
        )
        if not isinstance(page, SearchPatientRequestsResponse200):
            fail("search", page)
        if page.data or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    [from_call] = page.data
    call_detail = get_patient_request.sync(clinic, str(from_call.id), client=api)
    if not isinstance(call_detail, GetPatientRequestResponse200) or not isinstance(call_detail.data.call, Call):
        fail("call detail", call_detail)
    call = call_detail.data.call
    recording = call.recording
    print(
        f"call: sid={call.call_sid} kind={call_detail.data.kind.value} transcriptStatus={js(call.transcript_status)} "
        f"recording={recording.state}"
    )
    played = get_recording.sync_detailed(clinic, str(from_call.id), client=api)
    location = played.headers.get("location")
    linked = isinstance(recording, RecordingAvailable) and location == recording.url
    print(f"recording: {played.status_code} to the call's link={js(linked)}")

    # --- the writes' budget: whole again, counting down, spent, and back -----------------
    # A probe that is counted but writes nothing: an import whose phone is refused (400).
    def probe() -> tuple[int, object, Mapping[str, str]]:
        bad = PatientImport(external_id="GEN-PY-PROBE", first_name="Petr", last_name="Malý", phone="not a phone")
        answer = import_patient.sync_detailed(clinic, client=api, body=bad)
        return answer.status_code, answer.parsed, answer.headers

    waited = rate_limit(probe()[2]).reset
    time.sleep(waited)  # the seconds the service says the whole quota takes to come back
    burst, at = [], []
    for _ in range(3):
        burst.append(rate_limit(probe()[2]))
        at.append(time.monotonic())
    # Each probe takes one request; the bucket refills `limit` per `window` seconds evenly,
    # so a slow machine sees some back between two answers: at most the refill since the
    # previous answer, rounded up.
    rate = burst[0].limit / burst[0].window
    down = all(
        b.remaining <= a.remaining - 1 + math.ceil((t1 - t0) * rate)
        for a, b, t0, t1 in zip(burst, burst[1:], at, at[1:])
    )
    print(
        f"budget: {burst[0].policy} whole again after t={js(waited > 0)} "
        f"remaining=limit-1={js(burst[0].remaining == burst[0].limit - 1)} "
        f"counting down={js(down and burst[2].remaining < burst[0].limit)}"
    )
    for _ in range(2 * burst[0].limit):
        status, refusal, headers = probe()
        if status == 429:
            break
    if not isinstance(refusal, Error) or not isinstance(refusal.rate_limit, RateLimitStanding):
        fail("429", refusal)
    spent, fields = refusal.rate_limit, rate_limit(headers)
    same = (spent.policy, spent.limit, spent.window, spent.remaining, spent.reset) == (
        fields.policy,
        fields.limit,
        fields.window,
        fields.remaining,
        fields.reset,
    )
    retry_after = int(headers["Retry-After"])
    print(
        f"429: {refusal.code} policy={spent.policy} limit={spent.limit} remaining={spent.remaining} "
        f"reset>0={js(spent.reset > 0)} as its fields={js(same)} Retry-After>0={js(retry_after > 0)}"
    )
    time.sleep(retry_after)
    status, after, headers = probe()
    if not isinstance(after, Error):
        fail("after Retry-After", after)
    print(f"after Retry-After: {status} {after.code} {after.param} counted={js(rate_limit(headers).limit > 0)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
