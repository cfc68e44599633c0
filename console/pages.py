"""The console's addresses, in one place: `app.py` routes the responders at them (a
function called with a Falcon field, `request("{request_id}")`, gives the route's
template), the templates link to them (`pages` is a global of every template), and the
middleware and the responders redirect to them. No console address is written out
anywhere else (tests/test_console_pages.py holds the templates to it)."""

from __future__ import annotations

from urllib.parse import urlencode

PREFIX = "/console"
INBOX = PREFIX + "/"
ROWS = PREFIX + "/rows"  # the inbox's new rows, for its script
REQUESTS = PREFIX + "/requests"
LOGIN = PREFIX + "/login"
LOGIN_CODE = LOGIN + "/code"  # the second step of a login
FORGOT = LOGIN + "/forgot"  # "forgot password": a link by e-mail
LOGOUT = PREFIX + "/logout"
LANGUAGE = PREFIX + "/language"
PASSWORD = PREFIX + "/password"  # + /{token}: a set-password link
ACCOUNT = PREFIX + "/account"
TWO_FACTOR = ACCOUNT + "/two-factor"
SETTINGS = PREFIX + "/settings"
OFFICE_HOURS = SETTINGS + "/office-hours"
CALENDARS = SETTINGS + "/calendars"
CALLS = SETTINGS + "/calls"
REQUEST_TYPES = SETTINGS + "/request-types"
API_KEYS = SETTINGS + "/api-keys"
WEBHOOKS = SETTINGS + "/webhooks"
STAFF = SETTINGS + "/staff"
RETENTION = SETTINGS + "/retention"
PATIENTS = PREFIX + "/patients"
AUDIT = PREFIX + "/audit"
READS = PREFIX + "/reads"  # the read trail: who read what (admins, the data-protection officer)
HELP = PREFIX + "/help"
STATIC = PREFIX + "/static"


def request(request_id: object) -> str:
    return f"{REQUESTS}/{request_id}"


def patient(patient_id: object) -> str:
    return f"{PATIENTS}/{patient_id}"


def patient_copy(patient_id: object) -> str:
    return patient(patient_id) + "/copy"


def patient_erasure(patient_id: object) -> str:
    return patient(patient_id) + "/erase"


def request_note(request_id: object) -> str:
    return request(request_id) + "/note"


def request_tags(request_id: object) -> str:
    return request(request_id) + "/tags"


def request_resolution(request_id: object) -> str:
    return request(request_id) + "/resolution"


def request_transcript(request_id: object) -> str:
    """Correct the transcript (what was really said)."""
    return request(request_id) + "/transcript"


def request_type(request_id: object) -> str:
    """Confirm or change the request type the transcript suggested."""
    return request(request_id) + "/type"


def request_urgent(request_id: object) -> str:
    """Clear the "may be urgent" flag."""
    return request(request_id) + "/urgent"


def recording(request_id: object) -> str:
    return request(request_id) + "/recording"


def document(request_id: object, document_id: object) -> str:
    """A signed document of the request (recorded in the read trail, then its link)."""
    return request(request_id) + f"/documents/{document_id}"


def recording_state(request_id: object) -> str:
    """What the recording is now (the console's script asks when a play fails)."""
    return recording(request_id) + "/state"


def password_link(token: str) -> str:
    return f"{PASSWORD}/{token}"


def api_key_rotation(token_id: object) -> str:
    return f"{API_KEYS}/{token_id}/rotate"


def api_key_revocation(token_id: object) -> str:
    return f"{API_KEYS}/{token_id}/revoke"


def webhook_action(endpoint_id: object) -> str:
    """Rotate, disable, enable or remove one endpoint (the form's `do`)."""
    return f"{WEBHOOKS}/{endpoint_id}/action"


def webhook_send_again(delivery_id: object) -> str:
    return f"{WEBHOOKS}/deliveries/{delivery_id}/again"


def guide(name: str) -> str:
    return f"{HELP}/{name}"


def guide_image(name: str) -> str:
    return f"{HELP}/img/{name}"


def static(name: str) -> str:
    return f"{STATIC}/{name}"


def of_clinic(path: str, slug: str, anchor: str = "") -> str:
    """An admin page of one clinic (`?clinic=`), at `anchor` (an element's id) if given."""
    return f"{path}?{urlencode({'clinic': slug})}" + (f"#{anchor}" if anchor else "")


def with_query(path: str, **values: str) -> str:
    """`path` with a query string of `values` (those that are empty left out)."""
    query = urlencode({name: value for name, value in values.items() if value})
    return f"{path}?{query}" if query else path
