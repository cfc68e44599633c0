"""Patients: organization-scoped search and import into the addressed clinic."""
from __future__ import annotations

from typing import Any

import falcon

import patient_directory
import schemas
from errors import APIError
from models import Clinic


class PatientSearch:
    scopes = {"POST": "read"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = schemas.body(req, schemas.PATIENT_SEARCH_REQUEST, optional=True)
        found, cursor = patient_directory.search(req.context.clinic, body.get("filter", {}), body.get("pagination", {}))
        resp.media = {"data": found, "pagination": {"nextCursor": cursor}}


def _import_one(clinic: Clinic, item: dict[str, Any]) -> dict[str, Any]:
    patient, created = patient_directory.import_patient(clinic, item)
    return {"patient": patient_directory.represent(clinic, [patient])[0], "created": created}


class PatientImport:
    """POST /patients/import: one patient; the same external id again updates it."""

    scopes = {"POST": "write"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = schemas.body(req, schemas.PATIENT_IMPORT)
        resp.media = {"data": _import_one(req.context.clinic, body)}


class PatientImportBulk:
    """POST /patients/import-bulk: every item validated and written alone; answers per item."""

    scopes = {"POST": "write"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = schemas.body(req, schemas.PATIENT_IMPORT_BULK)
        results = []
        for index, item in enumerate(body["patients"]):
            try:
                schemas.check(item, schemas.PATIENT_IMPORT)
                patient, created = patient_directory.import_patient(req.context.clinic, item)
            except APIError as exc:
                results.append({"index": index, "status": "failed", "patientId": None, "error": exc.to_dict()})
                continue
            results.append({"index": index, "status": "created" if created else "updated",
                            "patientId": str(patient.id), "error": None})
        resp.media = {"data": results}
