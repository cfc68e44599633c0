"""Request types, patient requests, their reservations, attachments, upload links, and the
call and recording a request from a call carries."""

from __future__ import annotations

from typing import Any

from voicemail.recordings import GONE_REASONS
from web.schemas.common import DATE_TIME, NULLABLE_DATE_TIME, NULLABLE_STRING, TEXT, UUID, answer, component, nullable
from web.schemas.envelopes import PAGINATION
from web.schemas.patients import TAG
from web.schemas.values import ALLOWED_CONTENT_TYPES, CATEGORY_TYPE, REQUEST_KIND, TRANSCRIPT_STATUS

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
            "userNote": {**TEXT, "description": "Clinic note shown in the app; no response returns it."},
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
                # Every reason the service answers (voicemail/recordings.py), in its words.
                "enum": list(GONE_REASONS),
                "description": "; ".join(f"{reason}: {words}" for reason, words in GONE_REASONS.items()) + ".",
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
            "transcript": {
                **NULLABLE_STRING,
                "description": "The machine's transcript, kept whatever happens to the recording and "
                "when staff correct it.",
            },
            "correctedTranscript": {
                **NULLABLE_STRING,
                "description": "What staff who listened wrote down as really said (show it first); null: "
                "not corrected. The machine's text stays in transcript.",
            },
            "transcriptCorrectedAt": {
                **NULLABLE_DATE_TIME,
                "description": "When staff last corrected the transcript; null: not corrected.",
            },
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

_TRANSCRIPT_WORDS = {
    "type": "array",
    "items": {"type": "string"},
    "description": "The words of the call's transcript that led to it, as the transcript has them "
    "(patient data: do not log them).",
}
REQUEST_TYPE_SUGGESTION = component(
    "RequestTypeSuggestion",
    answer(
        {
            "requestTypeId": nullable(
                UUID,
                description="The clinic's request type the transcript's words suggest; null: none was "
                'suggested ("other": no type\'s words were clearly there).',
            ),
            "words": _TRANSCRIPT_WORDS,
            "confirmedAt": {
                **NULLABLE_DATE_TIME,
                "description": "When staff confirmed the request's type (the suggested one or another): "
                'the request\'s requestTypeId then holds it (null for "other"). null: not confirmed yet.',
            },
        },
        description="What a voice message's transcript suggests the caller wants, read in the clinic's "
        "words for its request types. A suggestion for staff to confirm, never a decision.",
    ),
)
URGENCY = component(
    "Urgency",
    answer(
        {
            "flagged": {
                "type": "boolean",
                "description": "true: the transcript has words that may mean the message cannot wait "
                "(the clinic's urgency words); false: it has none, or staff cleared the flag.",
            },
            "words": _TRANSCRIPT_WORDS,
            "clearedAt": {**NULLABLE_DATE_TIME, "description": "When staff cleared the flag; null: not cleared."},
        },
        description='"May be urgent": a hint for a person to read the message first, never a diagnosis.',
    ),
)

_REQUEST_FIELDS: dict[str, Any] = {
    "id": UUID,
    "kind": REQUEST_KIND,
    "title": {"type": "string"},
    "createdAt": DATE_TIME,
    "updatedAt": {
        **DATE_TIME,
        "description": "Its last change (of the request, its tags, reservations or attachments).",
    },
    "doneAt": {**NULLABLE_DATE_TIME, "description": "null while the request is open."},
    "patientId": UUID,
    "requestTypeId": nullable(
        UUID,
        description="null for requests made from a call until staff confirm their type "
        "(requestTypeSuggestion.confirmedAt).",
    ),
    "userNote": {"type": "string", "description": "The PATCH endpoint's userNote."},
    "tags": {"type": "array", "items": TAG, "description": "Request tags (not patient tags)."},
    "medicalRecords": {"type": "array", "items": MEDICAL_RECORD},
    "reservations": {"type": "array", "items": RESERVATION},
    "requestTypeSuggestion": nullable(
        REQUEST_TYPE_SUGGESTION, description="null for requests not made from a transcribed voice message."
    ),
    "urgent": nullable(URGENCY, description="null for requests not made from a transcribed voice message."),
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
                    "updatedSince": {
                        **DATE_TIME,
                        "description": "Only the requests changed (created, resolved, tagged, noted, a document "
                        "added, ...) at or after this time, in the order of their changes rather than newest first; "
                        "`nextCursor` is then given on the last page too (the place after its last row: keep it "
                        "and page from it later). A request changed while you page comes again, after your place, "
                        "with what changed; none is passed over.",
                    },
                },
                "description": "`kind`, `patientId` and `updatedSince` narrow the requests, together or alone.",
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
            "userNote": {**TEXT, "description": "A different field from create's userNote."},
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
