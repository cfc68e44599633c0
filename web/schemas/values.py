"""The signed-documents contract's enumerations and limits (docs/spec/signed-documents.md).
Unknown fields are ignored everywhere (the contract leaves other fields "not shown")."""

from __future__ import annotations

from models import Call, PatientRequest, Tag
from patients.directory import IMPORT_RESULTS
from web.schemas.common import component

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
IMPORT_STATUS = component("ImportStatus", {"type": "string", "enum": list(IMPORT_RESULTS)})
