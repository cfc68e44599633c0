"""Patients: organization-scoped search and import into the addressed clinic."""

from __future__ import annotations

from typing import Any

import falcon

from documents import patients
from models import ApiToken, Clinic
from web import schemas, validation


class PatientSearch:
    scopes = {"POST": "read"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_SEARCH_REQUEST, optional=True)
        found, cursor = patients.search(req.context.clinic, body.get("filter", {}), body.get("pagination", {}))
        resp.media = {"data": found, "pagination": {"nextCursor": cursor}}


def _import_one(clinic: Clinic, item: dict[str, Any], token: ApiToken) -> dict[str, Any]:
    patient, created = patients.import_patient(clinic, item, token)
    return {"patient": patients.represent(clinic, [patient])[0], "created": created}


class PatientImport:
    """POST /patients/import: one patient; the same external id again updates it."""

    scopes = {"POST": "write"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_IMPORT)
        resp.media = {"data": _import_one(req.context.clinic, body, req.context.token)}


class PatientImportBulk:
    """POST /patients/import-bulk: every item validated alone, written together; answers per item."""

    scopes = {"POST": "write"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_IMPORT_BULK_ENVELOPE)
        outcomes = patients.import_patients(
            req.context.clinic, body["patients"], req.context.token, schemas.PATIENT_IMPORT
        )
        resp.media = {
            "data": [
                {
                    "index": index,
                    "status": status,
                    "patientId": str(patient_id) if patient_id else None,
                    "error": error.to_dict() if error else None,
                }
                for index, (patient_id, status, error) in enumerate(outcomes)
            ]
        }
