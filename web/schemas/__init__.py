"""JSON Schemas of request and response bodies: used to validate input (`web/validation.py`)
and to build the OpenAPI document (`web/openapi.py`), so the two can never disagree.

Each noun is one dict, registered under its name with `component` (`common`): the
validator reads the dicts as they are (inline), and the document shows every place a
registered dict appears as a `$ref` to `#/components/schemas/<name>`, so a generated client
has one type per noun. Derive variants by building on a dict's parts, never by copying it
with a new key (a copy is a new dict: the document would inline it).

Response objects are written with `answer`: every field is `required` (the server always
sends it) unless named in `optional`, so adding a field is one line. A field that may be
null says so (`nullable`); the others are never null.

One module per part of the contract; they are imported here in the order the document
lists its components: `common` (registry, scalars, errors), `switchboard`, `values` (the
enumerations and limits), `pages`, `patients`, `requests`, `change_events` (the events API's
and the webhooks').
"""

# The import order is the document's order of components (each module registers its own
# as it is imported): not the alphabetical one.
# isort: off
from web.schemas.common import (
    COMPONENTS,
    DATE_TIME,
    EMPTY_REQUEST,
    ERROR,
    HEALTH_UNAVAILABLE,
    NULLABLE_DATE_TIME,
    NULLABLE_STRING,
    PATIENT_MERGED_ERROR,
    TEXT,
    UUID,
    answer,
    component,
    nullable,
)
from web.schemas.switchboard import (
    ACTIVE_REQUEST,
    ACTIVE_REQUEST_REQUEST,
    CLINIC_OPENED,
    ON_VACATION,
    RECORDING_COMPLETE,
    SUCCESS,
    VACATION_REQUEST,
    boolean_answer,
)
from web.schemas.values import (
    ALLOWED_CONTENT_TYPES,
    CATEGORY_TYPE,
    CATEGORY_TYPES,
    IMPORT_STATUS,
    MAX_BULK_IMPORT,
    MAX_EXTERNAL_IDS,
    REQUEST_KIND,
    TAG_TYPE,
    TRANSCRIPT_STATUS,
)
from web.schemas.envelopes import (
    PAGE_INFO,
    PAGINATION,
    data,
    page,
)
from web.schemas.patients import (
    EXTERNAL_ID,
    PATIENT,
    PATIENT_IMPORT,
    PATIENT_IMPORT_BULK,
    PATIENT_IMPORT_BULK_ENVELOPE,
    PATIENT_IMPORT_BULK_ITEM,
    PATIENT_IMPORT_BULK_RESULT,
    PATIENT_IMPORT_RESULT,
    PATIENT_SEARCH_REQUEST,
    TAG,
)
from web.schemas.requests import (
    ATTACHMENT,
    ATTACHMENT_REQUEST,
    CALL,
    CREATE_REQUEST,
    MEDICAL_RECORD,
    PATIENT_REQUEST,
    PATIENT_REQUEST_DETAIL,
    RECORDING_AVAILABLE,
    RECORDING_FETCHING,
    RECORDING_STATE,
    RECORDING_UNAVAILABLE,
    REQUEST_PATCH,
    REQUEST_SEARCH_REQUEST,
    REQUEST_TYPE,
    RESERVATION,
    SHA256,
    TIME_SLOT,
    UPLOAD_LINK,
    UPLOAD_LINK_REQUEST,
)
from web.schemas.change_events import EVENT, EVENT_DATA, EVENT_PAGE, EVENT_TYPE
# isort: on

__all__ = [
    "ACTIVE_REQUEST",
    "ACTIVE_REQUEST_REQUEST",
    "ALLOWED_CONTENT_TYPES",
    "ATTACHMENT",
    "ATTACHMENT_REQUEST",
    "CALL",
    "CATEGORY_TYPE",
    "CATEGORY_TYPES",
    "CLINIC_OPENED",
    "COMPONENTS",
    "CREATE_REQUEST",
    "DATE_TIME",
    "EMPTY_REQUEST",
    "ERROR",
    "EVENT",
    "EVENT_DATA",
    "EVENT_PAGE",
    "EVENT_TYPE",
    "EXTERNAL_ID",
    "HEALTH_UNAVAILABLE",
    "IMPORT_STATUS",
    "MAX_BULK_IMPORT",
    "MAX_EXTERNAL_IDS",
    "MEDICAL_RECORD",
    "NULLABLE_DATE_TIME",
    "NULLABLE_STRING",
    "ON_VACATION",
    "PAGE_INFO",
    "PAGINATION",
    "PATIENT",
    "PATIENT_IMPORT",
    "PATIENT_IMPORT_BULK",
    "PATIENT_IMPORT_BULK_ENVELOPE",
    "PATIENT_IMPORT_BULK_ITEM",
    "PATIENT_IMPORT_BULK_RESULT",
    "PATIENT_IMPORT_RESULT",
    "PATIENT_MERGED_ERROR",
    "PATIENT_REQUEST",
    "PATIENT_REQUEST_DETAIL",
    "PATIENT_SEARCH_REQUEST",
    "RECORDING_AVAILABLE",
    "RECORDING_COMPLETE",
    "RECORDING_FETCHING",
    "RECORDING_STATE",
    "RECORDING_UNAVAILABLE",
    "REQUEST_KIND",
    "REQUEST_PATCH",
    "REQUEST_SEARCH_REQUEST",
    "REQUEST_TYPE",
    "RESERVATION",
    "SHA256",
    "SUCCESS",
    "TAG",
    "TAG_TYPE",
    "TEXT",
    "TIME_SLOT",
    "TRANSCRIPT_STATUS",
    "UPLOAD_LINK",
    "UPLOAD_LINK_REQUEST",
    "UUID",
    "VACATION_REQUEST",
    "answer",
    "boolean_answer",
    "component",
    "data",
    "nullable",
    "page",
]
