"""Patients: organization-scoped search and import into the addressed clinic."""

from __future__ import annotations

import falcon

from documents import patients
from web import schemas, validation


class PatientSearch:
    scopes = {"POST": "read"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_SEARCH_REQUEST, optional=True)
        found, cursor = patients.search(req.context.clinic, body.get("filter", {}), body.get("pagination", {}))
        resp.media = {"data": found, "pagination": {"nextCursor": cursor}}


class PatientImport:
    """POST /patients/import: one patient; the same external id again updates it."""

    scopes = {"POST": "write"}
    idempotency_key = {"POST": "importPatient"}  # web/idempotency.py

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_IMPORT)
        resp.media = {"data": patients.import_one(req.context.clinic, body, req.context.token, req.context.remember)}


class PatientImportBulk:
    """POST /patients/import-bulk: every item validated alone, written together; answers per item."""

    scopes = {"POST": "write"}
    idempotency_key = {"POST": "importPatientsBulk"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_IMPORT_BULK_ENVELOPE)
        outcomes = patients.import_patients(
            req.context.clinic, body["patients"], req.context.token, schemas.PATIENT_IMPORT, req.context.remember
        )
        resp.media = {"data": patients.bulk_answer(outcomes)}
