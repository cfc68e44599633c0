"""Patients: organization-scoped search and import into the addressed clinic."""

from __future__ import annotations

import falcon

from patients import directory
from plumbing.clock import Clock
from privacy import read_trail
from web import schemas, shapes, validation
from web.idempotency import answering


class PatientSearch:
    scopes = {"POST": "read"}

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_SEARCH_REQUEST, optional=True)
        clinic, pagination = req.context.clinic, body.get("pagination", {})
        found, cursor = directory.search(
            clinic,
            body.get("filter", {}),
            pagination.get("cursor"),
            # JSON Schema counts 9.0 as an integer (found by the fuzzer: a float slice index was a 500).
            int(pagination.get("limit", directory.DEFAULT_LIMIT)),
        )
        data = shapes.patients(clinic, found)
        # The read trail: one row per patient listed, in one INSERT.
        read_trail.record(req.context.token, clinic.id, "patient_search", [(p.id, None) for p in found], self.clock())
        resp.media = {"data": data, "pagination": {"nextCursor": cursor}}


class PatientImport:
    """POST /patients/import: one patient; the same external id again updates it."""

    scopes = {"POST": "write"}
    idempotency_key = {"POST": "importPatient"}  # web/idempotency.py

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_IMPORT)
        clinic = req.context.clinic
        answer = answering(req, lambda patient, created: shapes.imported(clinic, patient, created))
        resp.media = {"data": directory.import_one(clinic, body, req.context.token, self.clock(), answer)}


class PatientImportBulk:
    """POST /patients/import-bulk: every item validated alone, written together; answers per item."""

    scopes = {"POST": "write"}
    idempotency_key = {"POST": "importPatientsBulk"}

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        body = validation.body(req, schemas.PATIENT_IMPORT_BULK_ENVELOPE)
        outcomes = directory.import_patients(
            req.context.clinic,
            body["patients"],
            req.context.token,
            schemas.PATIENT_IMPORT,
            self.clock(),
            answering(req, shapes.bulk_import),
        )
        resp.media = {"data": shapes.bulk_import(outcomes)}
