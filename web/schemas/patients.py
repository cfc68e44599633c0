"""Patients, their tags and external ids, and their import."""

from __future__ import annotations

from web.schemas.common import DATE_TIME, ERROR, NULLABLE_STRING, UUID, answer, component, nullable
from web.schemas.envelopes import PAGINATION
from web.schemas.values import IMPORT_STATUS, MAX_BULK_IMPORT, MAX_EXTERNAL_IDS, TAG_TYPE

PATIENT_SEARCH_REQUEST = component(
    "PatientSearch",
    {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "properties": {
                    "externalId": {"type": "string", "minLength": 1, "maxLength": 200},
                    "externalIdSource": {
                        "type": "string",
                        "maxLength": 100,
                        "description": "Limits externalId and externalIds to ids of this source.",
                    },
                    "externalIds": {
                        "type": "array",
                        "maxItems": MAX_EXTERNAL_IDS,
                        "items": {"type": "string", "minLength": 1, "maxLength": 200},
                        "description": "Union with externalId; only ids registered in this clinic match.",
                    },
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 200,
                        "description": "Free text over name, phone, e-mail and this clinic's external ids.",
                    },
                    "inClinic": {"type": "boolean"},
                    "updatedSince": {
                        **DATE_TIME,
                        "description": "Only the patients changed (their data or their record here) at or after this "
                        "time, in the order of their changes; `nextCursor` is then given on the last page too (keep "
                        "it and page from it later). A patient changed while you page comes again after your place; "
                        "none is passed over.",
                    },
                },
            },
            "pagination": PAGINATION,
        },
    },
)

TAG = component(
    "Tag",
    answer(
        {
            "id": UUID,
            "name": {"type": "string"},
            "type": TAG_TYPE,
            "color": NULLABLE_STRING,
        }
    ),
)

EXTERNAL_ID = component(
    "ExternalId",
    answer(
        {
            "source": {"type": "string", "description": "The issuing system; empty when none was given."},
            "id": {"type": "string"},
        }
    ),
)

PATIENT = component(
    "Patient",
    answer(
        {
            "id": UUID,
            "firstName": {"type": "string"},
            "lastName": {"type": "string"},
            "phone": {**NULLABLE_STRING, "description": "E.164."},
            "email": NULLABLE_STRING,
            "birthDate": {"type": ["string", "null"], "format": "date"},
            "updatedAt": {**DATE_TIME, "description": "Its last change (the patient or its record here)."},
            "tags": {"type": "array", "items": TAG, "description": "Patient tags in this clinic."},
            "note": {"type": "string"},
            "externalIds": {"type": "array", "items": EXTERNAL_ID, "description": "This clinic's external ids."},
            "status": {"type": "string", "description": "The record's status here; WAITING for a shared patient."},
            "isInClinic": {
                "type": "boolean",
                "description": "false: shared from a sibling clinic, not usable for create.",
            },
        }
    ),
)

PATIENT_IMPORT = component(
    "PatientImport",
    {
        "type": "object",
        "required": ["externalId", "firstName", "lastName"],
        "properties": {
            "externalId": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
                "description": "Patient id in the caller's system; importing it again updates the patient.",
            },
            "externalIdSource": {"type": "string", "maxLength": 100, "description": "Issuing system; default empty."},
            "firstName": {"type": "string", "maxLength": 200},
            "lastName": {"type": "string", "maxLength": 200},
            "phone": {
                "type": ["string", "null"],
                "maxLength": 64,
                "description": "Any format; national numbers use the clinic's country. Stored in E.164.",
            },
            "email": {"type": ["string", "null"], "format": "email", "maxLength": 320},
            "birthDate": {"type": ["string", "null"], "format": "date"},
        },
    },
)

PATIENT_IMPORT_RESULT = component("PatientImportResult", answer({"patient": PATIENT, "created": {"type": "boolean"}}))

_BULK_ITEMS = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_BULK_IMPORT,
    "description": "Each item is validated on its own: an invalid one fails alone; the valid ones are written "
    "together, in one transaction.",
}
PATIENT_IMPORT_BULK = component(
    "PatientImportBulk",
    {
        "type": "object",
        "required": ["patients"],
        "properties": {"patients": {**_BULK_ITEMS, "items": PATIENT_IMPORT}},
    },
)
# What the bulk import validates the body with: the documented shape but for the items,
# which are checked one by one (patients.directory.import_patients) and answered per item.
PATIENT_IMPORT_BULK_ENVELOPE = {
    **PATIENT_IMPORT_BULK,
    "properties": {"patients": {**_BULK_ITEMS, "items": {"type": "object"}}},
}

PATIENT_IMPORT_BULK_ITEM = component(
    "PatientImportBulkItem",
    answer(
        {
            "index": {"type": "integer", "description": "The item's position in `patients`."},
            "status": IMPORT_STATUS,
            "patientId": nullable(UUID, description="null when the item failed."),
            "error": nullable(ERROR, description="Why the item failed; null unless it did."),
        }
    ),
)
PATIENT_IMPORT_BULK_RESULT = {"type": "array", "items": PATIENT_IMPORT_BULK_ITEM}
