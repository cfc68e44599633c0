"""The switchboard's routing checks: POST .../switchboard/{is-clinic-opened,...}."""
from __future__ import annotations

import uuid
from typing import Callable

import falcon

import schemas
from errors import validation_failed
from models import Calendar, Patient, PatientRequest
from office_hours import is_open
from phones import to_e164
from vacations import is_on_vacation


class IsClinicOpened:
    scopes = {"POST": "read"}

    def __init__(self, clock: Callable) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        schemas.body(req, schemas.EMPTY_REQUEST, optional=True)
        clinic = req.context.clinic
        resp.media = {"isOpen": is_open(clinic.office_hours, clinic.timezone, self.clock())}


class IsOnVacation:
    scopes = {"POST": "read"}

    def __init__(self, clock: Callable) -> None:
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        data = schemas.body(req, schemas.VACATION_REQUEST, optional=True)
        clinic = req.context.clinic
        calendars = list(clinic.calendars)
        if "calendarIds" in data:
            wanted = {uuid.UUID(i) for i in data["calendarIds"]}
            foreign = wanted - {c.id for c in calendars}
            if foreign:
                raise validation_failed(
                    f"calendarIds: not calendars of this clinic: {', '.join(sorted(map(str, foreign)))}"
                )
            calendars = [c for c in calendars if c.id in wanted]
        resp.media = {"isOnVacation": is_on_vacation(clinic, calendars, self.clock())}


class HasActiveRequest:
    scopes = {"POST": "read"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, clinic_slug: str) -> None:
        data = schemas.body(req, schemas.ACTIVE_REQUEST_REQUEST)
        clinic = req.context.clinic
        if not data.get("callFrom") and not data.get("patientId"):
            raise validation_failed("body: callFrom or patientId is required")
        patient_ids: list[uuid.UUID] = []
        if data.get("callFrom"):
            phone = to_e164(data["callFrom"], clinic.country)
            if phone is None:
                raise validation_failed("callFrom: not a phone number")
            patient_ids += Patient.ids_with_phone(clinic.organization_id, phone)
        if data.get("patientId"):
            patient_ids.append(uuid.UUID(data["patientId"]))
        ids = Patient.with_survivors(patient_ids)
        resp.media = {"hasActiveRequest": PatientRequest.open_for(clinic, ids)}
