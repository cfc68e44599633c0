"""JSON Schemas of request and response bodies: used to validate input (`web/validation.py`)
and to build the OpenAPI document (`web/openapi.py`), so the two can never disagree.

Each noun is one dict, registered under its name with `component`: the validator reads the
dicts as they are (inline), and the document shows every place a registered dict appears
as a `$ref` to `#/components/schemas/<name>`, so a generated client has one type per noun.
Derive variants by building on a dict's parts, never by copying it with a new key (a copy
is a new dict: the document would inline it).

Response objects are written with `answer`: every field is `required` (the server always
sends it) unless named in `optional`, so adding a field is one line. A field that may be
null says so (`nullable`); the others are never null.
"""

from __future__ import annotations

from typing import Any

from models import Call, PatientRequest, Tag

#: name -> schema: the document's `components.schemas`, in the order registered.
COMPONENTS: dict[str, dict[str, Any]] = {}


def component(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Register `schema` as the component `name`; returns it unchanged."""
    assert name not in COMPONENTS, name
    COMPONENTS[name] = schema
    return schema


def answer(properties: dict[str, Any], *, optional: tuple[str, ...] = (), **keywords: Any) -> dict[str, Any]:
    """A response object: every property required except those in `optional`."""
    assert set(optional) <= set(properties), optional
    return {
        "type": "object",
        "required": [k for k in properties if k not in optional],
        "properties": properties,
        **keywords,
    }


def nullable(schema: dict[str, Any], **keywords: Any) -> dict[str, Any]:
    """`schema` or null (an `anyOf`, so a registered schema stays one `$ref`)."""
    return {"anyOf": [schema, {"type": "null"}], **keywords}


UUID = {"type": "string", "format": "uuid"}
DATE_TIME = {"type": "string", "format": "date-time"}
NULLABLE_DATE_TIME = {"type": ["string", "null"], "format": "date-time"}
NULLABLE_STRING = {"type": ["string", "null"]}
_TEXT = {"type": "string", "maxLength": 10000}

ERROR = component(
    "Error",
    answer(
        {
            "error": {"type": "string", "description": "A message for people; may change."},
            "code": {"type": "string", "description": "Stable, machine-readable (VALIDATION_FAILED, NOT_FOUND, ...)."},
        },
        description="Every non-2xx answer.",
    ),
)

PATIENT_MERGED_ERROR = component(
    "PatientMergedError",
    answer(
        {
            **ERROR["properties"],
            "mergedInto": {**UUID, "description": "The patient to use instead."},
        },
        description="410 PATIENT_MERGED: the patient was merged into another one.",
    ),
)

EMPTY_REQUEST = component("Empty", {"type": "object", "description": "No fields; an empty object or no body."})

# --- Switchboard (docs/spec/switchboard.md) ----------------------------------------------

VACATION_REQUEST = component(
    "VacationQuery",
    {
        "type": "object",
        "properties": {
            "calendarIds": {
                "type": "array",
                "items": UUID,
                "maxItems": 1000,
                "description": "Only vacations of these calendars count; omitted = all calendars. An id that is not a "
                "calendar of this clinic (deleted, or another clinic's) counts as a calendar without "
                "vacations; a value that is not a UUID is 400.",
            }
        },
    },
)

ACTIVE_REQUEST_REQUEST = component(
    "ActiveRequestQuery",
    {
        "type": "object",
        "properties": {
            "callFrom": {
                "type": ["string", "number", "null"],
                "description": "Caller's number, any common format. A value that is not a phone number "
                "(withheld, `anonymous`, empty) matches no patient: the answer is then by "
                "patientId, or false.",
            },
            "patientId": nullable(UUID),
        },
        # "At least one of" in the document itself (the fuzzer found `{}` schema-valid yet 400).
        # if/then rather than a top-level anyOf keeps `properties` the one place that lists the fields.
        "if": {"not": {"required": ["callFrom"]}},
        "then": {"required": ["patientId"]},
        "description": "At least one of callFrom and patientId.",
    },
)

RECORDING_COMPLETE = component(
    "RecordingComplete",
    {
        "type": "object",
        "required": ["CallSid"],
        "properties": {
            "CallSid": {
                "type": ["string", "integer"],
                "minLength": 1,
                "pattern": "\\S",
                "description": "Unique call id; deduplicates. The only required field.",
            },
            "CallFrom": {
                "description": "Caller's number, ideally E.164. Withheld (empty, anonymous, private, ...) or "
                "not a number: the request goes to the clinic's unknown caller."
            },
            "CallTo": {"description": "The dialed clinic line."},
            "Status": {"description": "Final call status in the switchboard (informational)."},
            "HasRecording": {
                "description": "Informational only: processing depends on RecordingUrl. A boolean; "
                '"true"/"false", 1/0 are read as one.'
            },
            "RecordingUrl": {
                "type": ["string", "null"],
                "description": "Public https URL of the .mp3/.wav recording; absent, null or empty: "
                "no recording. Not https, an IP address or an internal host: 400.",
            },
            "RecordingSid": {
                "description": "The recording's id in the switchboard's system (for example its file "
                "name); it need not be RecordingUrl's file name."
            },
            "Source": {
                "description": "The switchboard platform; a platform family's marker word here selects its "
                "re-fetch of expired recording links."
            },
            "Extra": {
                "description": "Free-form payload stored with the call as received (a value other than a "
                "string is stored as its JSON text)."
            },
        },
        "description": "The call hand-off; PascalCase fields; unknown fields are ignored. Refused (400) only for a body "  # noqa: E501
        "that is not a JSON object, a missing or empty CallSid, or an unsafe RecordingUrl: every other "
        "value is stored, and what was odd about it is recorded on the call (a switchboard does not "
        "retry a 400, so a refusal would lose the voicemail). Text fields (CallFrom, CallTo, Status, "
        "RecordingSid, Source) expect strings; numbers and booleans are stored as their text, and values "
        "longer than the service keeps (100, 100, 100, 500, 200 characters) are stored cut. A form body "
        "(application/x-www-form-urlencoded) with the same names is read too.",
    },
)


def boolean_answer(name: str) -> dict[str, Any]:
    """The answer of a yes/no check: `{name: boolean}`."""
    return answer({name: {"type": "boolean"}})


SUCCESS = component("Success", boolean_answer("success"))
CLINIC_OPENED = component("ClinicOpened", boolean_answer("isOpen"))
ON_VACATION = component("OnVacation", boolean_answer("isOnVacation"))
ACTIVE_REQUEST = component("ActiveRequest", boolean_answer("hasActiveRequest"))


# --- Signed documents (docs/spec/signed-documents.md) ------------------------------------
# Unknown fields are ignored (the contract leaves other fields "not shown").

ALLOWED_CONTENT_TYPES = ("application/pdf", "image/jpeg", "image/png", "image/gif", "image/webp")
CATEGORY_TYPES = (
    "CONSENT",
    "ANAMNESIS",
    "MEDICAL_REPORT",
    "LAYOFF_REPORT",
    "TEST_RESULTS",
    "LABORATORY_RESULTS",
    "OPINION",
    "REFERRAL",
    "OTHER",
)
MAX_EXTERNAL_IDS = 100
MAX_BULK_IMPORT = 1000

CATEGORY_TYPE = component("CategoryType", {"type": "string", "enum": list(CATEGORY_TYPES)})
TAG_TYPE = component("TagType", {"type": "string", "enum": list(Tag.TYPES)})
REQUEST_KIND = component(
    "RequestKind",
    {
        "type": "string",
        "enum": list(PatientRequest.KINDS),
        "description": "standard (created through the API), voice_message or missed_call (from a call).",
    },
)
TRANSCRIPT_STATUS = component(
    "TranscriptStatus",
    {
        "type": "string",
        "enum": list(Call.TRANSCRIPT_STATUSES),
        "description": "reliable (few words wrong); check (read it with the recording at hand); unreliable "
        "(listen to the recording: see transcriptIssue); failed (no usable transcript).",
    },
)
IMPORT_STATUS = component("ImportStatus", {"type": "string", "enum": ["created", "updated", "failed"]})


def data(schema: dict[str, Any]) -> dict[str, Any]:
    """A success body: `{"data": schema}`."""
    return answer({"data": schema})


PAGE_INFO = component(
    "PageInfo",
    answer(
        {
            "nextCursor": {
                **NULLABLE_STRING,
                "description": "The next page's `pagination.cursor`; null on the last page.",
            },
        }
    ),
)


def page(item: dict[str, Any]) -> dict[str, Any]:
    """A page of a search: `data` plus the cursor of the next page (null on the last)."""
    return answer({"data": {"type": "array", "items": item}, "pagination": PAGE_INFO})


PAGINATION = component(
    "PageRequest",
    {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "Page size; default 50."},
            "cursor": {
                "type": "string",
                "minLength": 1,
                "maxLength": 300,
                "description": "`pagination.nextCursor` of the previous page.",
            },
        },
    },
)

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
    "description": "Each item is validated and written on its own: an invalid one fails alone.",
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
# which are checked one by one (documents.patients.import_patients) and answered per item.
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

REQUEST_TYPE = component(
    "RequestType",
    answer(
        {
            "id": {**UUID, "description": "Sent as `userECRFId` on create."},
            "ecrfId": {"type": "string"},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "requiresReservation": {"type": "boolean"},
            "requiresPayment": {"type": "boolean"},
            "requiresSignature": {"type": "boolean"},
            "reservationLength": {"type": "integer"},
            "remindDaysBefore": {"type": "integer"},
        }
    ),
)

TIME_SLOT = component(
    "TimeSlot",
    {
        "type": "object",
        "required": ["start", "end", "calendarId"],
        "properties": {"start": DATE_TIME, "end": DATE_TIME, "calendarId": UUID},
        "description": "Creates a reservation and closes the request at once.",
    },
)

CREATE_REQUEST = component(
    "PatientRequestCreate",
    {
        "type": "object",
        "required": ["patientId", "userECRFId"],
        "properties": {
            "patientId": UUID,
            "userECRFId": UUID,
            "userNote": {**_TEXT, "description": "Clinic note shown in the app; no response returns it."},
            "timeSlotInput": TIME_SLOT,
        },
    },
)

RESERVATION = component(
    "Reservation",
    answer(
        {
            "id": UUID,
            "start": DATE_TIME,
            "end": DATE_TIME,
            "calendarId": nullable(UUID, description="null once the calendar was deleted."),
        }
    ),
)

SHA256 = {
    "anyOf": [{"type": "string", "pattern": "^[0-9a-f]{64}$"}, {"type": "null"}],
    "description": "SHA-256 (hex) of the registered bytes, which cannot change after registration; "
    "null for attachments registered before the service recorded it.",
}

_ATTACHMENT_FIELDS = {
    "id": UUID,
    "description": {"type": "string"},
    "contentType": {"type": "string"},
    "createdAt": DATE_TIME,
    "sha256": SHA256,
}
ATTACHMENT = component("Attachment", answer(_ATTACHMENT_FIELDS, description="A registered file (step 6)."))

MEDICAL_RECORD = component(
    "MedicalRecord",
    answer(
        {
            **_ATTACHMENT_FIELDS,
            "categoryType": nullable(CATEGORY_TYPE),
            "visibleToPatient": {"type": "boolean"},
            "url": {"type": "string", "description": "Presigned, inline; at least 30 minutes left."},
            "downloadUrl": {"type": "string", "description": "Presigned, attachment; at least 30 minutes left."},
        },
        description="An attachment as the request detail shows it, with its download links.",
    ),
)

RECORDING_AVAILABLE = component(
    "RecordingAvailable",
    answer(
        {
            "state": {"type": "string", "const": "available"},
            "expiresAt": DATE_TIME,
            "url": {
                "type": "string",
                "description": "Download link (a credential: do not log it); "
                "after expiresAt use the recording endpoint.",
            },
        }
    ),
)
RECORDING_FETCHING = component(
    "RecordingFetching",
    answer(
        {"state": {"type": "string", "const": "fetching"}},
        description="The link expired; a fresh one is being fetched from the switchboard platform.",
    ),
)
RECORDING_UNAVAILABLE = component(
    "RecordingUnavailable",
    answer(
        {
            "state": {"type": "string", "const": "unavailable"},
            "reason": {
                "type": "string",
                "enum": ["deleted", "no_credentials", "no_reference", "expired", "no_recording"],
            },
            "message": {"type": "string"},
        }
    ),
)
RECORDING_STATE = component(
    "RecordingState",
    {
        "oneOf": [RECORDING_AVAILABLE, RECORDING_FETCHING, RECORDING_UNAVAILABLE],
        # An OpenAPI keyword (JSON Schema validators ignore it): generated clients pick the type by `state`.
        "discriminator": {
            "propertyName": "state",
            "mapping": {
                state: f"#/components/schemas/Recording{state.title()}"
                for state in ("available", "fetching", "unavailable")
            },
        },
    },
)

CALL = component(
    "Call",
    answer(
        {
            "callSid": {"type": "string"},
            "callFrom": {"type": "string", "description": "The caller's number as the switchboard sent it."},
            "callbackNumber": {
                **NULLABLE_STRING,
                "description": "E.164 number the caller asked to be called back on, if they said one "
                "and its digits were confirmed as heard (every digit clearly decoded "
                "and read again from the number's own seconds, or within one digit "
                "of callFrom, which is then given). Never a number only guessed.",
            },
            "unconfirmedCallbackNumber": {
                **NULLABLE_STRING,
                "description": "UNCONFIRMED: the digits of a callback number as the transcript has them (E.164), "
                "when they could not be confirmed as heard; then callbackNumber is null. Listen to "
                "the recording from callbackNumberAt before calling it.",
            },
            "callbackNumberAt": {
                "type": ["number", "null"],
                "minimum": 0,
                "description": "Seconds into the recording where the callback number (confirmed or not) starts.",
            },
            "callTo": {"type": "string"},
            "status": NULLABLE_STRING,
            "receivedAt": DATE_TIME,
            "transcript": {**NULLABLE_STRING, "description": "Kept whatever happens to the recording."},
            "transcriptStatus": nullable(
                TRANSCRIPT_STATUS,
                description=(
                    "How far the text can be trusted, predicted from the decoder's signals (docs/transcription.md): "
                    "reliable (few words wrong); check (read it with the recording at hand); unreliable (listen to the "
                    "recording: see transcriptIssue); failed (no usable transcript); null when none was attempted (no "
                    "recording, recording not fetched, no speech)."
                ),
            ),
            "transcriptIssue": {
                **NULLABLE_STRING,
                "description": "Why the transcript is unreliable or failed, a short code "
                "such as low_confidence, timeout, engine_error, too_long "
                "(the recording is over the length limit and was not "
                "transcribed).",
            },
            "language": {**NULLABLE_STRING, "description": "Detected language of the message (ISO 639-1)."},
            "transcriptLanguage": {**NULLABLE_STRING, "description": "The same as language (kept for compatibility)."},
            "extra": {**NULLABLE_STRING, "description": "The Extra the switchboard sent with the call, as received."},
            "recording": RECORDING_STATE,
        },
        description="The call a voice message or missed call request was made from.",
    ),
)

_REQUEST_FIELDS: dict[str, Any] = {
    "id": UUID,
    "kind": REQUEST_KIND,
    "title": {"type": "string"},
    "createdAt": DATE_TIME,
    "doneAt": {**NULLABLE_DATE_TIME, "description": "null while the request is open."},
    "patientId": UUID,
    "requestTypeId": nullable(UUID, description="null for requests made from a call."),
    "userNote": {"type": "string", "description": "The PATCH endpoint's userNote."},
    "tags": {"type": "array", "items": TAG, "description": "Request tags (not patient tags)."},
    "medicalRecords": {"type": "array", "items": MEDICAL_RECORD},
    "reservations": {"type": "array", "items": RESERVATION},
}
PATIENT_REQUEST = component(
    "PatientRequest",
    answer(
        _REQUEST_FIELDS,
        description="A request as create, search and PATCH answer it: `medicalRecords` is always "
        "empty here (the detail lists them).",
    ),
)
PATIENT_REQUEST_DETAIL = component(
    "PatientRequestDetail",
    answer(
        {**_REQUEST_FIELDS, "call": CALL},
        optional=("call",),
        description="Step 7, the request detail: attachments with their links; `call` for requests made from a call.",
    ),
)

REQUEST_SEARCH_REQUEST = component(
    "PatientRequestSearch",
    {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "properties": {
                    "patientId": UUID,
                    "kind": REQUEST_KIND,
                },
                "description": "`kind` and `patientId` narrow the requests, together or alone.",
            },
            "pagination": PAGINATION,
        },
    },
)

REQUEST_PATCH = component(
    "PatientRequestPatch",
    {
        "type": "object",
        "properties": {
            "addTagIds": {
                "type": "array",
                "maxItems": 100,
                "items": UUID,
                "description": "Request tags of this clinic (GET /tags?type=patient_request).",
            },
            "userNote": {**_TEXT, "description": "A different field from create's userNote."},
            "done": {
                "type": "boolean",
                "description": "true resolves the request (sets doneAt, kept if already resolved); "
                "false reopens it (clears doneAt). has-active-request follows at once.",
            },
        },
    },
)

UPLOAD_LINK_REQUEST = component(
    "UploadLinkRequest",
    {
        "type": "object",
        "required": ["contentType"],
        "properties": {
            "contentType": {
                "type": "string",
                "minLength": 3,
                "maxLength": 200,
                "pattern": "^[^\\r\\n]+$",
                "description": "Any type; the allowed list is checked at registration.",
            }
        },
    },
)

UPLOAD_LINK = component(
    "UploadLink",
    answer(
        {
            "url": {
                "type": "string",
                "description": "Presigned PUT URL, valid 10 minutes; a credential (send no token "
                "with it, do not log it).",
            },
            "fileHash": {"type": "string", "description": "Register the upload with it (step 6)."},
        }
    ),
)

ATTACHMENT_REQUEST = component(
    "AttachmentRegistration",
    {
        "type": "object",
        "required": ["contentType", "fileHash", "description"],
        "properties": {
            "contentType": {"enum": list(ALLOWED_CONTENT_TYPES)},
            "fileHash": {"type": "string", "minLength": 1, "maxLength": 512},
            "description": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "description": "Download file name (normalized to ASCII); no patient identifiers.",
            },
            "categoryType": CATEGORY_TYPE,
            # "false when omitted" in words, not `default`: openapi-typescript makes a field with a default required.
            "visibleToPatient": {
                "type": "boolean",
                "description": "Shown to the patient in the app; false when omitted.",
            },
        },
    },
)
