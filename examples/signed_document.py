#!/usr/bin/env python3
"""Store an externally signed PDF through the public REST API (docs/spec/signed-documents.md).

Runs steps 1-7: find the request type and the patient, create a patient request, get
an upload link, PUT the file to storage, register it, read it back and compare bytes.

Retry rules followed here:
- lookups and the detail GET are retried on 5xx / timeouts;
- every write (create, registration) carries an Idempotency-Key of its own: after a 5xx,
  a timeout or a lost connection the client sends it again with the same key, and the
  service answers what the first attempt did (or does it now), never twice; a 409
  IDEMPOTENCY_KEY_IN_PROGRESS waits its Retry-After;
- a refused upload (4xx from storage, e.g. an expired link) gets a fresh upload link.

Presigned URLs and the token are credentials: they are never printed.

    python examples/signed_document.py --token csk_... [--base-url http://127.0.0.1:8000]
        [--clinic demo-clinic] [--external-id EXT-1001 --external-id-source signing-system]
        [--ecrf-id SIGNED_CONSENT] [--file signed.pdf] [--description "Signed consent v1.pdf"]

The token may come from CLINIC_API_TOKEN instead. Without --file a small demo PDF is sent.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import requests

TIMEOUT = 30
ATTEMPTS = 3
DEMO_PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 100]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
)


class Unsure(Exception):
    """A write whose outcome is unknown (5xx or no answer)."""


class ApiError(Exception):
    def __init__(self, response: requests.Response) -> None:
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text[:200], "code": ""}
        super().__init__(f"{response.status_code} {body.get('code', '')}: {body.get('error', '')}")
        self.status, self.body = response.status_code, body


class Client:
    def __init__(self, base_url: str, clinic: str, token: str) -> None:
        self.base = f"{base_url.rstrip('/')}/external/v1/clinics/{clinic}"
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> Any:
        try:
            response = self.http.request(method, self.base + path, json=body, headers=headers, timeout=TIMEOUT)
        except (requests.Timeout, requests.ConnectionError) as exc:
            raise Unsure(f"{method} {path}: {type(exc).__name__}") from None
        if response.status_code >= 500 or (
            response.status_code == 409 and response.json().get("code") == "IDEMPOTENCY_KEY_IN_PROGRESS"
        ):
            raise Unsure(f"{method} {path}: {response.status_code}", response.headers.get("Retry-After"))
        if response.status_code != 200:
            raise ApiError(response)
        return response.json()["data"]

    def read(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A lookup: safe to retry."""
        for attempt in range(ATTEMPTS):
            try:
                return self._call(method, path, body)
            except Unsure:
                if attempt == ATTEMPTS - 1:
                    raise
                time.sleep(0.5 * 2**attempt)

    def write(self, path: str, body: dict[str, Any]) -> Any:
        """A write, with a key of its own that its retries send again: whatever became of an
        attempt whose answer was lost, the retry gets its answer and nothing is written twice."""
        key = str(uuid.uuid4())
        for attempt in range(ATTEMPTS):
            try:
                return self._call("POST", path, body, {"Idempotency-Key": key})
            except Unsure as exc:
                print(f"  unsure ({exc.args[0]}); retrying with the same Idempotency-Key", file=sys.stderr)
                wait = exc.args[1] if len(exc.args) > 1 and exc.args[1] else 0.5 * 2**attempt
                time.sleep(float(wait))
        raise SystemExit(f"giving up on POST {path}")

    # -- the flow --------------------------------------------------------------------------

    def request_type(self, ecrf_id: str) -> dict[str, Any]:
        types = self.read("POST", "/patientRequestTypes/search", {})
        for t in types:
            if t["ecrfId"] == ecrf_id:
                return t
        raise SystemExit(f"no active request type {ecrf_id!r}")

    def patient(self, external_id: str, source: str) -> dict[str, Any]:
        flt = {"externalId": external_id, "externalIdSource": source, "inClinic": True}
        found = [p for p in self.read("POST", "/patients/search", {"filter": flt}) if p["isInClinic"]]
        if not found:
            raise SystemExit(f"no patient with external id {source}:{external_id} in this clinic; import it first")
        return found[0]

    def create(self, patient_id: str, type_id: str, note: str) -> dict[str, Any]:
        body = {"patientId": patient_id, "userECRFId": type_id, "userNote": note}
        while True:
            try:
                return self.write("/patientRequests/create", body)
            except ApiError as exc:
                if exc.status == 410 and exc.body.get("mergedInto"):
                    # Another body: a new write, with a key of its own (write() makes one).
                    print(f"  patient merged; retrying with {exc.body['mergedInto']} (store it)", file=sys.stderr)
                    body["patientId"] = exc.body["mergedInto"]
                    continue
                raise

    def upload(self, request_id: str, content: bytes, content_type: str) -> str:
        """Steps 4-5; a refused upload gets a fresh link. Returns the fileHash."""
        for _ in range(ATTEMPTS):
            link = self.read(
                "POST", f"/patientRequests/{request_id}/attachments/upload-link", {"contentType": content_type}
            )
            try:
                stored = requests.put(
                    link["url"], data=content, headers={"Content-Type": content_type}, timeout=TIMEOUT
                )
            except (requests.Timeout, requests.ConnectionError):
                continue
            if stored.status_code == 200:
                return str(link["fileHash"])
            if stored.status_code == 413:  # a new link cannot help
                raise SystemExit(f"upload refused: the file ({len(content)} bytes) is over the storage size cap")
            print(f"  upload refused ({stored.status_code}); requesting a new link", file=sys.stderr)
        raise SystemExit("upload failed")

    def register(self, request_id: str, file_hash: str, content_type: str, description: str) -> dict[str, Any]:
        body = {
            "contentType": content_type,
            "fileHash": file_hash,
            "description": description,
            "categoryType": "CONSENT",
            "visibleToPatient": False,
        }
        return self.write(f"/patientRequests/{request_id}/attachments", body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("CLINIC_API_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("CLINIC_API_TOKEN"))
    parser.add_argument("--clinic", default="demo-clinic")
    parser.add_argument("--ecrf-id", default="SIGNED_CONSENT")
    parser.add_argument("--external-id", default="EXT-1001")
    parser.add_argument("--external-id-source", default="signing-system")
    parser.add_argument("--file", help="PDF to store (default: a small demo PDF)")
    parser.add_argument("--description", default="Signed consent v1.pdf")
    parser.add_argument("--note", default="Signed externally; signature version 1.")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("--token or CLINIC_API_TOKEN is required")
    content = Path(args.file).read_bytes() if args.file else DEMO_PDF
    content_type = "application/pdf"

    api = Client(args.base_url, args.clinic, args.token)
    rtype = api.request_type(args.ecrf_id)
    print(f"1. request type {rtype['name']!r}: {rtype['id']}")
    patient = api.patient(args.external_id, args.external_id_source)
    print(f"2. patient {patient['id']}")
    request = api.create(patient["id"], rtype["id"], args.note)
    print(f"3. patient request {request['id']} ({request['title']!r})")
    file_hash = api.upload(request["id"], content, content_type)
    print(f"4-5. uploaded {len(content)} bytes as {file_hash}")
    attachment = api.register(request["id"], file_hash, content_type, args.description)
    print(f"6. attachment {attachment['id']} registered at {attachment['createdAt']}")
    detail = api.read("GET", f"/patientRequests/{request['id']}")
    record = next(m for m in detail["medicalRecords"] if m["id"] == attachment["id"])
    downloaded = requests.get(record["downloadUrl"], timeout=TIMEOUT)
    same = downloaded.status_code == 200 and downloaded.content == content
    print(f"7. read back: {len(downloaded.content)} bytes, {'identical' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ApiError, Unsure) as exc:
        sys.exit(f"error: {exc}")
