"""The onboarding document's JSON Schema: its structure only (docs/operations.md,
"Onboarding a clinic").

What the schema cannot say (time zones, countries, phones, languages whisper.cpp knows,
references between entities) is checked by the writer, `onboarding/writer.py`; both
report the first problem with the path of the bad field.
"""

from __future__ import annotations

from typing import Any

from models import OfficeHours, StaffMembership, StaffUser, Tag
from switchboard.office_hours import WEEKDAYS
from triage import vocabulary

MAX_LANGUAGES = 10
SLUG = {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"}
HHMM = {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}
DAY_OR_INSTANT = {"type": "string", "minLength": 10, "maxLength": 40}
NAME = {"type": "string", "minLength": 1, "maxLength": 200}
UUID = {"type": "string", "format": "uuid"}


def _closed(
    properties: dict[str, Any], required: list[str] | None = None, any_of: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An object with exactly these fields (an unknown field is an error: a typo would
    otherwise be ignored silently)."""
    out: dict[str, Any] = {"type": "object"}
    if required is not None:
        out["required"] = required
    out["additionalProperties"] = False
    if any_of is not None:
        out["anyOf"] = any_of
    out["properties"] = properties
    return out


def _list_of(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


OFFICE_HOURS = _closed(
    {
        "weekday": {"enum": list(WEEKDAYS)},
        "opens": HHMM,
        "closes": HHMM,
        "weeks": {"enum": list(OfficeHours.WEEKS)},
    },
    required=["weekday", "opens", "closes"],
)

VACATION = _closed(
    {
        "name": {"type": "string", "maxLength": 200},
        "start": DAY_OR_INSTANT,
        "end": DAY_OR_INSTANT,
        "switchboard": {"type": "boolean"},
    },
    required=["start", "end"],
)

CALENDAR = _closed(
    {
        "id": UUID,
        "name": NAME,
        "ignoreHolidays": {"type": "boolean"},
        "vacations": _list_of(VACATION),
    },
    required=["name"],
)

TAG = _closed(
    {
        "id": UUID,
        "type": {"enum": list(Tag.TYPES)},
        "name": NAME,
        "color": {"type": ["string", "null"], "maxLength": 20},
        "deleted": {"type": "boolean"},
    },
    required=["type", "name"],
)

# Words per language ({"cs": ["recept", ...], "en": [...]}): the languages and the lines'
# meaning are checked by the writer (whisper.cpp's codes; `triage.vocabulary.problem`).
WORDS = {
    "type": "object",
    "maxProperties": MAX_LANGUAGES,
    "additionalProperties": {
        "type": "array",
        "maxItems": vocabulary.MAX_WORDS,
        "items": {"type": "string", "maxLength": vocabulary.MAX_LENGTH},
    },
}
# The words in a voice message's transcript that suggest a request type: a shipped set and
# the type's own; absent: left as they are (null: none, the type is never suggested).
TRANSCRIPT_WORDS = {
    **_closed({"preset": {"enum": list(vocabulary.PRESETS)}, "words": WORDS}),
    "type": ["object", "null"],
}

REQUEST_TYPE = _closed(
    {
        "id": UUID,
        "ecrfId": {"type": "string", "minLength": 1, "maxLength": 100},
        "name": NAME,
        "description": {"type": "string"},
        "requiresReservation": {"type": "boolean"},
        "requiresPayment": {"type": "boolean"},
        "requiresSignature": {"type": "boolean"},
        "reservationLength": {"type": "integer", "minimum": 0},
        "remindDaysBefore": {"type": "integer", "minimum": 0},
        "active": {"type": "boolean"},
        "defaultPatientTags": _list_of(NAME),
        "transcriptWords": TRANSCRIPT_WORDS,
    },
    required=["ecrfId", "name"],
)

SWITCHBOARD = _closed(
    {
        "apiUrl": {"type": "string", "pattern": "^https://"},
        "username": {"type": "string", "minLength": 1},
        "password": {"type": "string", "minLength": 1},
        # Words the platform's `Source` values contain; a call re-fetches expired recording
        # links through this clinic's credentials only when its `Source` holds one.
        "sourceMarkers": {
            "type": "array",
            "maxItems": 10,
            "uniqueItems": True,
            "items": {"type": "string", "minLength": 2, "maxLength": 50, "pattern": "^[^,]+$"},
        },
    },
    required=["apiUrl", "username", "password"],
)

#: Days each kind of personal data is kept (privacy/retention.py; docs/data-protection.md):
#: null keeps it. A clinic onboarded without this section gets the defaults
#: (`Clinic.RETENTION_DEFAULTS`); one that exists keeps what it has.
_DAYS = {"type": ["integer", "null"], "minimum": 1, "maximum": 36500}
RETENTION = _closed(
    {
        "resolvedCallRequestsDays": _DAYS,
        "callsWithoutRequestDays": _DAYS,
        "auditDetailsDays": _DAYS,
        "signedDocumentsDays": _DAYS,
        # Resolved requests made through the API (no call); a request holding a signed
        # document stays while the document does.
        "resolvedApiRequestsDays": _DAYS,
        # The read trail (who read which patient's data); null: the default, 730 days: the
        # trail is never kept for ever.
        "readTrailDays": _DAYS,
    }
)

#: Who is e-mailed of a voice message flagged "may be urgent", and when (notices/urgent.py):
#: the staff who opted in on their account page (`staff`), an on-call address; "always" or
#: only "outsideOfficeHours". Absent: left as it is (a new clinic: staff, outside office hours).
URGENT_NOTICES = _closed(
    {
        "staff": {"type": "boolean"},
        "onCallEmail": {"type": ["string", "null"], "format": "email", "maxLength": 254},
        "when": {"enum": ["outsideOfficeHours", "always"]},
    }
)

CLINIC = _closed(
    {
        "slug": SLUG,
        "name": NAME,
        "timezone": {"type": "string"},
        "country": {"type": "string", "pattern": "^[A-Z]{2}$"},
        "subdivision": {"type": ["string", "null"]},
        "language": {"type": ["string", "null"], "pattern": "^[a-z]{2,3}$"},
        # Codes are checked against whisper.cpp's list by the writer (`onboarding/writer.py`),
        # which names the bad one; the schema only bounds the shape.
        "languages": {
            "type": ["array", "null"],
            "minItems": 1,
            "maxItems": MAX_LANGUAGES,
            "items": {"type": "string", "maxLength": 20},
        },
        "missedCallRequests": {"type": "boolean"},
        "twoFactorRequired": {"type": "boolean"},
        "officeHours": _list_of(OFFICE_HOURS),
        "calendars": _list_of(CALENDAR),
        "tags": _list_of(TAG),
        "requestTypes": _list_of(REQUEST_TYPE),
        # The words that may mean a voice message is urgent, per language; null: the shipped
        # ones; absent: left as they are.
        "urgencyWords": {**WORDS, "type": ["object", "null"]},
        "urgentNotices": URGENT_NOTICES,
        "switchboard": SWITCHBOARD,
        "retention": RETENTION,
    },
    required=["slug", "name", "timezone", "country"],
)

PATIENT_RECORD = _closed(
    {
        "clinic": SLUG,
        "status": {"type": "string", "pattern": "^[A-Z_]{1,32}$"},
        "note": {"type": "string"},
        "tags": _list_of(NAME),
        "externalIds": _list_of(
            _closed(
                {
                    "id": {"type": "string", "minLength": 1, "maxLength": 200},
                    "source": {"type": "string", "maxLength": 100},
                },
                required=["id"],
            )
        ),
    },
    required=["clinic"],
)

PATIENT = _closed(
    {
        "id": UUID,
        "key": {"type": "string", "minLength": 1, "maxLength": 200},
        "firstName": {"type": "string", "maxLength": 200},
        "lastName": {"type": "string", "maxLength": 200},
        "phone": {"type": "string", "maxLength": 40},
        "email": {"type": "string", "format": "email", "maxLength": 320},
        "birthDate": {"type": "string", "format": "date"},
        "mergedInto": {"type": "string"},
        "records": _list_of(PATIENT_RECORD),
    },
    any_of=[{"required": ["id"]}, {"required": ["key"]}],
)

# A staff console login. Only an Argon2 hash of the password (`manage.py user hash-password`):
# the file is shared and versioned, a password in it would be read by everyone who reads it.
USER = _closed(
    {
        "email": {"type": "string", "format": "email", "maxLength": 254},
        "name": NAME,
        "language": {"enum": list(StaffUser.LANGUAGES)},
        "passwordHash": {"type": "string", "pattern": "^\\$argon2id\\$", "maxLength": 500},
        "disabled": {"type": "boolean"},
        "clinics": {
            "type": "array",
            "minItems": 1,
            "items": _closed(
                {"clinic": SLUG, "role": {"enum": list(StaffMembership.ROLES)}}, required=["clinic", "role"]
            ),
        },
    },
    required=["email", "name", "clinics"],
)

SCHEMA: dict[str, Any] = _closed(
    {
        "organization": _closed(
            {"slug": SLUG, "name": NAME, "patientSharing": {"type": "boolean"}}, required=["slug", "name"]
        ),
        "clinics": _list_of(CLINIC),
        "patients": _list_of(PATIENT),
        "users": _list_of(USER),
    },
    required=["organization", "clinics"],
)
