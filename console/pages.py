"""The console's page addresses, in one place: the responders are routed at them and the
pages that link to them (the audit trail names what an event changed, with a link) build
their links from them."""

from __future__ import annotations

from urllib.parse import urlencode

INBOX = "/console/"
REQUESTS = "/console/requests"
SETTINGS = "/console/settings"
OFFICE_HOURS = SETTINGS + "/office-hours"
CALENDARS = SETTINGS + "/calendars"
CALLS = SETTINGS + "/calls"
REQUEST_TYPES = SETTINGS + "/request-types"
API_KEYS = SETTINGS + "/api-keys"
STAFF = SETTINGS + "/staff"
RETENTION = SETTINGS + "/retention"
PATIENTS = "/console/patients"
ACCOUNT = "/console/account"
AUDIT = "/console/audit"


def request(request_id: object) -> str:
    return f"{REQUESTS}/{request_id}"


def patient(patient_id: object) -> str:
    return f"{PATIENTS}/{patient_id}"


def of_clinic(path: str, slug: str, anchor: str = "") -> str:
    """An admin page of one clinic (`?clinic=`), at `anchor` (an element's id) if given."""
    return f"{path}?{urlencode({'clinic': slug})}" + (f"#{anchor}" if anchor else "")
