"""JSON Schemas of request and response bodies: used to validate input (`web/validation.py`)
and to build the OpenAPI document (`web/openapi.py`), so the two can never disagree."""
from __future__ import annotations

from typing import Any

from models import Call, PatientRequest

UUID = {"type": "string", "format": "uuid"}

ERROR = {
    "type": "object",
    "required": ["error", "code"],
    "properties": {
        "error": {"type": "string"},
        "code": {"type": "string"},
        "mergedInto": UUID,
    },
}

EMPTY_REQUEST = {"type": "object", "description": "No fields; an empty object or no body."}

VACATION_REQUEST = {
    "type": "object",
    "properties": {
        "calendarIds": {
            "type": "array",
            "items": UUID,
            "maxItems": 1000,
            "description": "Only vacations of these calendars count; omitted = all calendars.",
        }
    },
}

ACTIVE_REQUEST_REQUEST = {
    "type": "object",
    "properties": {
        "callFrom": {"type": "string", "maxLength": 64, "description": "Caller's number, any common format."},
        "patientId": UUID,
    },
    # "At least one of" in the document itself (found by the fuzzer: `{}` was schema-valid
    # yet 400); an empty callFrom counts as none. if/then rather than a top-level anyOf
    # keeps `properties` the one place that lists the fields.
    "if": {"not": {"required": ["callFrom"], "properties": {"callFrom": {"minLength": 1}}}},
    "then": {"required": ["patientId"]},
    "description": "At least one of callFrom and patientId.",
}

RECORDING_COMPLETE = {
    "type": "object",
    "required": ["CallSid", "CallFrom", "CallTo"],
    "properties": {
        "CallSid": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Unique call id; deduplicates."},
        "CallFrom": {"type": "string", "minLength": 1, "maxLength": 100, "description": "Caller's number, ideally E.164."},
        "CallTo": {"type": "string", "minLength": 1, "maxLength": 100, "description": "The dialed clinic line."},
        "Status": {"type": ["string", "null"], "maxLength": 100},
        "HasRecording": {"type": ["boolean", "null"], "description": "Informational only."},
        "RecordingUrl": {"type": ["string", "null"], "maxLength": 4096,
                         "description": "Public https URL of the .mp3/.wav recording."},
        "RecordingSid": {"type": ["string", "null"], "maxLength": 500,
                         "description": "With RecordingUrl: its file name, with or without the extension "
                                        "(else 400)."},
        "Source": {"type": ["string", "null"], "maxLength": 200},
        "Extra": {"type": ["string", "null"], "maxLength": 65536},
    },
    "description": "PascalCase fields; unknown fields are ignored.",
}

SUCCESS = {"type": "object", "required": ["success"], "properties": {"success": {"type": "boolean"}}}


def boolean_answer(name: str) -> dict[str, Any]:
    return {"type": "object", "required": [name], "properties": {name: {"type": "boolean"}}}


# --- Signed documents (README, "Signed documents") -----------------------------------
# Unknown fields are ignored (the contract leaves other fields "not shown").

ALLOWED_CONTENT_TYPES = ("application/pdf", "image/jpeg", "image/png", "image/gif", "image/webp")
CATEGORY_TYPES = ("CONSENT", "ANAMNESIS", "MEDICAL_REPORT", "LAYOFF_REPORT", "TEST_RESULTS",
                  "LABORATORY_RESULTS", "OPINION", "REFERRAL", "OTHER")
MAX_EXTERNAL_IDS = 100
MAX_BULK_IMPORT = 1000
DATE_TIME = {"type": "string", "format": "date-time"}
NULLABLE_DATE_TIME = {"type": ["string", "null"], "format": "date-time"}
_TEXT = {"type": "string", "maxLength": 10000}


def data(schema: dict[str, Any]) -> dict[str, Any]:
    """A success body: `{"data": schema}`."""
    return {"type": "object", "required": ["data"], "properties": {"data": schema}}


def page(item: dict[str, Any]) -> dict[str, Any]:
    """A page of a search: `data` plus the cursor of the next page (null on the last)."""
    return {
        "type": "object",
        "required": ["data", "pagination"],
        "properties": {
            "data": {"type": "array", "items": item},
            "pagination": {"type": "object", "properties": {"nextCursor": {"type": ["string", "null"]}}},
        },
    }


PAGINATION = {
    "type": "object",
    "properties": {
        "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "Page size; default 50."},
        "cursor": {"type": "string", "minLength": 1, "maxLength": 300,
                   "description": "`pagination.nextCursor` of the previous page."},
    },
}

PATIENT_SEARCH_REQUEST = {
    "type": "object",
    "properties": {
        "filter": {
            "type": "object",
            "properties": {
                "externalId": {"type": "string", "minLength": 1, "maxLength": 200},
                "externalIdSource": {"type": "string", "maxLength": 100,
                                     "description": "Limits externalId and externalIds to ids of this source."},
                "externalIds": {"type": "array", "maxItems": MAX_EXTERNAL_IDS,
                                "items": {"type": "string", "minLength": 1, "maxLength": 200},
                                "description": "Union with externalId; only ids registered in this clinic match."},
                "query": {"type": "string", "minLength": 1, "maxLength": 200,
                          "description": "Free text over name, phone, e-mail and this clinic's external ids."},
                "inClinic": {"type": "boolean"},
            },
        },
        "pagination": PAGINATION,
    },
}

TAG = {
    "type": "object",
    "required": ["id", "name"],
    "properties": {"id": UUID, "name": {"type": "string"}, "type": {"enum": ["patient", "patient_request"]},
                   "color": {"type": ["string", "null"]}},
}

PATIENT = {
    "type": "object",
    "required": ["id", "tags", "note", "externalIds", "status", "isInClinic"],
    "properties": {
        "id": UUID,
        "firstName": {"type": "string"},
        "lastName": {"type": "string"},
        "phone": {"type": ["string", "null"]},
        "email": {"type": ["string", "null"]},
        "birthDate": {"type": ["string", "null"], "format": "date"},
        "tags": {"type": "array", "items": TAG},
        "note": {"type": "string"},
        "externalIds": {"type": "array", "items": {
            "type": "object", "properties": {"source": {"type": "string"}, "id": {"type": "string"}}}},
        "status": {"type": "string"},
        "isInClinic": {"type": "boolean"},
    },
}

PATIENT_IMPORT = {
    "type": "object",
    "required": ["externalId", "firstName", "lastName"],
    "properties": {
        "externalId": {"type": "string", "minLength": 1, "maxLength": 200,
                       "description": "Patient id in the caller's system; importing it again updates the patient."},
        "externalIdSource": {"type": "string", "maxLength": 100, "description": "Issuing system; default empty."},
        "firstName": {"type": "string", "maxLength": 200},
        "lastName": {"type": "string", "maxLength": 200},
        "phone": {"type": ["string", "null"], "maxLength": 64,
                  "description": "Any format; national numbers use the clinic's country. Stored in E.164."},
        "email": {"type": ["string", "null"], "format": "email", "maxLength": 320},
        "birthDate": {"type": ["string", "null"], "format": "date"},
    },
}

PATIENT_IMPORT_RESULT = {
    "type": "object",
    "required": ["patient", "created"],
    "properties": {"patient": PATIENT, "created": {"type": "boolean"}},
}

PATIENT_IMPORT_BULK = {
    "type": "object",
    "required": ["patients"],
    "properties": {"patients": {"type": "array", "minItems": 1, "maxItems": MAX_BULK_IMPORT,
                                "items": {"type": "object"},
                                "description": "Items as for /patients/import; each is validated and written alone."}},
}

PATIENT_IMPORT_BULK_RESULT = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["index", "status"],
        "properties": {
            "index": {"type": "integer"},
            "status": {"enum": ["created", "updated", "failed"]},
            "patientId": {"anyOf": [UUID, {"type": "null"}]},
            "error": {"anyOf": [ERROR, {"type": "null"}]},
        },
    },
}

REQUEST_TYPE = {
    "type": "object",
    "properties": {
        "id": UUID, "ecrfId": {"type": "string"}, "name": {"type": "string"}, "description": {"type": "string"},
        "requiresReservation": {"type": "boolean"}, "requiresPayment": {"type": "boolean"},
        "requiresSignature": {"type": "boolean"}, "reservationLength": {"type": "integer"},
        "remindDaysBefore": {"type": "integer"},
    },
}

CREATE_REQUEST = {
    "type": "object",
    "required": ["patientId", "userECRFId"],
    "properties": {
        "patientId": UUID,
        "userECRFId": UUID,
        "userNote": {**_TEXT, "description": "Clinic note shown in the app; no response returns it."},
        "timeSlotInput": {
            "type": "object",
            "required": ["start", "end", "calendarId"],
            "properties": {"start": DATE_TIME, "end": DATE_TIME, "calendarId": UUID},
            "description": "Creates a reservation and closes the request at once.",
        },
    },
}

RESERVATION = {
    "type": "object",
    "properties": {"id": UUID, "start": DATE_TIME, "end": DATE_TIME, "calendarId": {"anyOf": [UUID, {"type": "null"}]}},
}

SHA256 = {"anyOf": [{"type": "string", "pattern": "^[0-9a-f]{64}$"}, {"type": "null"}],
          "description": "SHA-256 (hex) of the registered bytes, which cannot change after registration; "
                         "null for attachments registered before the service recorded it."}

MEDICAL_RECORD = {
    "type": "object",
    "properties": {
        "id": UUID, "contentType": {"type": "string"}, "description": {"type": "string"},
        "categoryType": {"anyOf": [{"enum": list(CATEGORY_TYPES)}, {"type": "null"}]},
        "createdAt": DATE_TIME, "visibleToPatient": {"type": "boolean"},
        "sha256": SHA256,
        "url": {"type": "string", "description": "Presigned, inline; at least 30 minutes left."},
        "downloadUrl": {"type": "string", "description": "Presigned, attachment; at least 30 minutes left."},
    },
}

RECORDING_STATE = {
    "oneOf": [
        {"type": "object", "required": ["state", "url", "expiresAt"], "properties": {
            "state": {"const": "available"}, "expiresAt": DATE_TIME,
            "url": {"type": "string", "description": "Download link (a credential: do not log it); "
                                                     "after expiresAt use the recording endpoint."}}},
        {"type": "object", "required": ["state"], "properties": {"state": {"const": "fetching"}},
         "description": "The link expired; a fresh one is being fetched from the switchboard platform."},
        {"type": "object", "required": ["state", "reason", "message"], "properties": {
            "state": {"const": "unavailable"},
            "reason": {"enum": ["deleted", "no_credentials", "no_reference", "expired", "no_recording"]},
            "message": {"type": "string"}}},
    ],
}

NULLABLE_STRING = {"type": ["string", "null"]}

CALL = {
    "type": "object",
    "description": "Requests made from a call (voice message, missed call) only.",
    "required": ["callSid", "callFrom", "callbackNumber", "unconfirmedCallbackNumber", "callbackNumberAt", "callTo", "receivedAt", "transcript", "transcriptStatus",
                 "transcriptIssue", "language", "extra", "recording"],
    "properties": {
        "callSid": {"type": "string"},
        "callFrom": {"type": "string", "description": "The caller's number as the switchboard sent it."},
        "callbackNumber": {**NULLABLE_STRING,
                           "description": "E.164 number the caller asked to be called back on, if they said one "
                                          "and its digits were confirmed as heard (every digit clearly decoded "
                                          "and read again from the number's own seconds, or within one digit "
                                          "of callFrom, which is then given). Never a number only guessed."},
        "unconfirmedCallbackNumber": {
            **NULLABLE_STRING,
            "description": "UNCONFIRMED: the digits of a callback number as the transcript has them (E.164), "
                           "when they could not be confirmed as heard; then callbackNumber is null. Listen to "
                           "the recording from callbackNumberAt before calling it.",
        },
        "callbackNumberAt": {
            "type": ["number", "null"], "minimum": 0,
            "description": "Seconds into the recording where the callback number (confirmed or not) starts.",
        },
        "callTo": {"type": "string"},
        "status": NULLABLE_STRING, "receivedAt": DATE_TIME,
        "transcript": {**NULLABLE_STRING, "description": "Kept whatever happens to the recording."},
        "transcriptStatus": {
            "type": ["string", "null"], "enum": [*Call.TRANSCRIPT_STATUSES, None],
            "description": "How far the text can be trusted, predicted from the decoder's signals (README, "
                           "Transcription): reliable (few words wrong); check (read it with the recording at "
                           "hand); unreliable (listen to the recording: see transcriptIssue); failed (no usable "
                           "transcript); null when none was attempted (no recording, recording not fetched, "
                           "no speech).",
        },
        "transcriptIssue": {**NULLABLE_STRING, "description": "Why the transcript is unreliable or failed, a "
                                                              "short code such as low_confidence, timeout, "
                                                              "engine_error, too_long (the recording is over "
                                                              "the length limit and was not transcribed)."},
        "language": {**NULLABLE_STRING, "description": "Detected language of the message (ISO 639-1)."},
        "transcriptLanguage": {**NULLABLE_STRING, "description": "The same as language (kept for compatibility)."},
        "extra": {**NULLABLE_STRING, "description": "The Extra the switchboard sent with the call, as received."},
        "recording": RECORDING_STATE,
    },
}

REQUEST_KIND = {"type": "string", "enum": list(PatientRequest.KINDS),
                "description": "standard (created through the API), voice_message or missed_call (from a call)."}

PATIENT_REQUEST = {
    "type": "object",
    "required": ["id", "kind", "title", "createdAt", "patientId", "tags", "medicalRecords", "reservations"],
    "properties": {
        "id": UUID, "kind": REQUEST_KIND, "title": {"type": "string"}, "createdAt": DATE_TIME, "doneAt": NULLABLE_DATE_TIME,
        "patientId": UUID, "requestTypeId": {"anyOf": [UUID, {"type": "null"}]},
        "userNote": {"type": "string", "description": "The PATCH endpoint's userNote."},
        "tags": {"type": "array", "items": TAG},
        "medicalRecords": {"type": "array", "items": MEDICAL_RECORD},
        "reservations": {"type": "array", "items": RESERVATION},
        "call": {**CALL, "description": "Detail only, for requests made from a call."},
    },
}

REQUEST_SEARCH_REQUEST = {
    "type": "object",
    "properties": {
        "filter": {"type": "object", "properties": {
            "patientId": UUID,
            "kind": {**REQUEST_KIND, "description": "Only requests of this kind; combinable with patientId."},
        }},
        "pagination": PAGINATION,
    },
}

REQUEST_PATCH = {
    "type": "object",
    "properties": {
        "addTagIds": {"type": "array", "maxItems": 100, "items": UUID,
                      "description": "Request tags of this clinic (GET /tags?type=patient_request)."},
        "userNote": {**_TEXT, "description": "A different field from create's userNote."},
        "done": {"type": "boolean",
                 "description": "true resolves the request (sets doneAt, kept if already resolved); "
                                "false reopens it (clears doneAt). has-active-request follows at once."},
    },
}

UPLOAD_LINK_REQUEST = {
    "type": "object",
    "required": ["contentType"],
    "properties": {"contentType": {"type": "string", "minLength": 3, "maxLength": 200, "pattern": "^[^\\r\\n]+$",
                                   "description": "Any type; the allowed list is checked at registration."}},
}

UPLOAD_LINK = {
    "type": "object",
    "required": ["url", "fileHash"],
    "properties": {"url": {"type": "string", "description": "Presigned PUT URL, valid 10 minutes."},
                   "fileHash": {"type": "string"}},
}

ATTACHMENT_REQUEST = {
    "type": "object",
    "required": ["contentType", "fileHash", "description"],
    "properties": {
        "contentType": {"enum": list(ALLOWED_CONTENT_TYPES)},
        "fileHash": {"type": "string", "minLength": 1, "maxLength": 512},
        "description": {"type": "string", "minLength": 1, "maxLength": 255,
                        "description": "Download file name (normalized to ASCII); no patient identifiers."},
        "categoryType": {"enum": list(CATEGORY_TYPES)},
        "visibleToPatient": {"type": "boolean", "default": False},
    },
}

ATTACHMENT = {
    "type": "object",
    "required": ["id", "description", "contentType", "createdAt"],
    "properties": {"id": UUID, "description": {"type": "string"}, "contentType": {"type": "string"},
                   "createdAt": DATE_TIME, "sha256": SHA256},
}
