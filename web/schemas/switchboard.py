"""The switchboard's bodies (docs/spec/switchboard.md)."""

from __future__ import annotations

from typing import Any

from web.schemas.common import UUID, answer, component, nullable

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
