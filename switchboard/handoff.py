"""What `recording-complete` accepts, and what it makes of odd values.

A switchboard does not retry a 4xx: a refused hand-off is a voicemail lost for good. So
the hand-off is refused (`HandoffRefused`, a 400) only for what the contract makes
impossible to process safely:

- a body that is not a JSON object;
- no `CallSid` (missing, empty, or not a string or an integer): nothing to deduplicate on;
- a `RecordingUrl` that the contract says to reject: not a string, not https, an IP
  literal, an internal host name, or a name that resolves to a non-public address.

Everything else a real platform sends is stored and processed, and what was odd about it is
recorded on the call as a short list of *anomalies* (`ANOMALIES`), which `manage.py calls`
and the console's request history show. A withheld or unparseable caller goes to the
clinic's unknown-caller patient; a `RecordingSid` unrelated to the URL's file name is kept
as sent (the recording is bound to the bytes the hand-off delivered, not to that name:
`voicemail.recordings`); informational fields of another JSON type are stored as text or
coerced; a value longer than its column is stored cut, with a marker.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from plumbing.errors import Invalid
from plumbing.phones import to_e164
from safe_fetch import FetchError, ResolutionCache, UnsafeURL, validate_url
from voicemail.recordings import names_its_recording

#: The contract's fields, in its order.
FIELDS = ("CallSid", "CallFrom", "CallTo", "Status", "HasRecording", "RecordingUrl", "RecordingSid", "Source", "Extra")
#: Field -> the call's column.
COLUMNS = {
    "CallSid": "call_sid",
    "CallFrom": "call_from",
    "CallTo": "call_to",
    "Status": "status",
    "HasRecording": "has_recording",
    "RecordingUrl": "recording_url",
    "RecordingSid": "recording_sid",
    "Source": "source",
    "Extra": "extra",
}
#: The longest value each text column keeps (`models.Call`); a longer one is stored cut.
#: CallSid is not cut (it deduplicates): a longer one is stored as its SHA-256.
LIMITS = {"CallSid": 200, "CallFrom": 100, "CallTo": 100, "Status": 100, "RecordingSid": 500, "Source": 200}
#: What a caller's number reads when the caller withheld it (compared lower case, without
#: spaces and punctuation); anything else that is not a phone number is `callFromUnparseable`.
WITHHELD = frozenset(
    {
        "",
        "anonymous",
        "unknown",
        "private",
        "privatenumber",
        "restricted",
        "withheld",
        "unavailable",
        "blocked",
        "nocallerid",
        "notavailable",
        "none",
        "null",
        "hidden",
        "anonym",
        "neznamy",
        "skryte",
        "skrytecislo",
        "utajene",
        "utajenecislo",
    }
)
_TRUE, _FALSE = frozenset({"true", "1", "yes", "y", "on"}), frozenset({"false", "0", "no", "n", "off", ""})
# PostgreSQL refuses NUL in text and UTF-8 cannot encode a lone surrogate: replaced, not refused.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

#: The anomalies a call may carry: name -> what it means (the console and the CLI say it
#: in words; the names are stable, integrators may read them in `manage.py calls`).
ANOMALIES: dict[str, str] = {
    "callFromWithheld": "the caller's number was withheld (empty, anonymous, private, ...)",
    "callFromUnparseable": "CallFrom is not a phone number",
    "callFromMissing": "CallFrom was not sent",
    "callToMissing": "CallTo was not sent or is empty",
    "recordingSidNotInUrl": "RecordingSid is not the file name of RecordingUrl",
    "hasRecordingNotBoolean": "HasRecording was not a JSON boolean",
    "hasRecordingWithoutUrl": "HasRecording is true but no RecordingUrl was sent",
    "notText": "a text field held a number or a boolean (stored as text)",
    "extraNotString": "Extra was not a string (stored as JSON text)",
    "valueTruncated": "a value longer than the service keeps was stored cut",
    "callSidHashed": "CallSid was longer than 200 characters (stored as its SHA-256)",
    "unstorableCharacters": "a value held NUL or unpaired surrogate characters (replaced)",
    "fieldNameCase": "a field name differed from the contract's only in letter case",
}


class HandoffRefused(Invalid):
    """The hand-off cannot be processed (see the module's docstring); the message names
    the field and never holds a URL's query string."""


@dataclass
class Handoff:
    """The call's columns as stored, and what was odd about the hand-off."""

    columns: dict[str, Any]
    anomalies: list[str] = field(default_factory=list)

    def flag(self, anomaly: str) -> None:
        assert anomaly in ANOMALIES, anomaly
        if anomaly not in self.anomalies:
            self.anomalies.append(anomaly)


def parse(body: Any, country: str, *, allow_loopback: bool = False) -> Handoff:
    """The call to store from a `recording-complete` body; raises `HandoffRefused`."""
    if not isinstance(body, dict):
        raise HandoffRefused("body: must be a JSON object")
    found = Handoff({})
    values = _by_contract_name(body, found)

    sid = values.get("CallSid")
    if isinstance(sid, float) and math.isfinite(sid) and sid.is_integer():
        sid = int(sid)  # JSON Schema's integer: 12.0 is one
    if isinstance(sid, bool) or not isinstance(sid, (str, int)):
        raise HandoffRefused("CallSid: is required (a non-empty string)", param="/CallSid")
    sid = _storable(str(sid), found)
    if not sid.strip():
        raise HandoffRefused("CallSid: must not be empty", param="/CallSid")
    if len(sid) > LIMITS["CallSid"]:
        sid = "sha256:" + hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()
        found.flag("callSidHashed")
    found.columns["call_sid"] = sid

    url = values.get("RecordingUrl")
    if url is not None and not isinstance(url, str):
        raise HandoffRefused("RecordingUrl: must be a string (an https URL)", param="/RecordingUrl")
    url = (url or "").strip() or None
    if url is not None:
        check_recording_url(url, allow_loopback=allow_loopback)
    found.columns["recording_url"] = url

    for name in ("CallFrom", "CallTo", "Status", "RecordingSid", "Source"):
        found.columns[COLUMNS[name]] = _text(name, values.get(name), found)
    if "CallFrom" not in values:
        found.flag("callFromMissing")
    # The columns are NOT NULL: a field not sent is stored empty (and flagged).
    found.columns["call_from"] = found.columns["call_from"] or ""
    found.columns["call_to"] = found.columns["call_to"] or ""
    if not found.columns["call_to"].strip():
        found.flag("callToMissing")
    if to_e164(found.columns["call_from"], country) is None:
        spoken = re.sub(r"[\s\-_.()<>\"']", "", found.columns["call_from"].lower())
        found.flag(
            "callFromWithheld" if spoken in WITHHELD or not any(c.isdigit() for c in spoken) else "callFromUnparseable"
        )

    found.columns["has_recording"] = _boolean(values.get("HasRecording"), found)
    if found.columns["has_recording"] and url is None:
        found.flag("hasRecordingWithoutUrl")
    sid_of_recording = found.columns["recording_sid"]
    if (
        url is not None
        and sid_of_recording
        and sid_of_recording.strip()
        and not names_its_recording(sid_of_recording, url)
    ):
        found.flag("recordingSidNotInUrl")

    extra = values.get("Extra")
    if extra is not None and not isinstance(extra, str):
        extra = json.dumps(extra, ensure_ascii=False)
        found.flag("extraNotString")
    found.columns["extra"] = _storable(extra, found) if extra is not None else None
    return found


def _by_contract_name(body: dict[str, Any], found: Handoff) -> dict[str, Any]:
    """The contract's fields of `body`; a field whose name differs only in letter case
    (`recordingUrl`, `RecordingURL`) counts too when the exact name is absent, so that a
    flow's typo does not silently drop the recording."""
    values = {name: body[name] for name in FIELDS if name in body}
    folded = {name.lower(): name for name in FIELDS if name not in values}
    for key, value in body.items():
        name = folded.get(key.lower()) if isinstance(key, str) else None
        if name is not None and name not in values:
            values[name] = value
            found.flag("fieldNameCase")
    return values


def _storable(text: str, found: Handoff) -> str:
    if _UNSTORABLE.search(text):
        found.flag("unstorableCharacters")
        return _UNSTORABLE.sub("\ufffd", text)
    return text


def _text(name: str, value: Any, found: Handoff) -> str | None:
    """A text field as stored: numbers and booleans as their JSON text, cut to its column."""
    if value is None:
        return None
    if isinstance(value, bool):
        value = "true" if value else "false"
        found.flag("notText")
    elif isinstance(value, (int, float)):
        value = (
            str(int(value)) if isinstance(value, float) and math.isfinite(value) and value.is_integer() else str(value)
        )
        found.flag("notText")
    elif not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
        found.flag("notText")
    value = _storable(value, found)
    if len(value) > LIMITS[name]:
        value = value[: LIMITS[name] - 1] + "…"
        found.flag("valueTruncated")
    return value


def _boolean(value: Any, found: Handoff) -> bool | None:
    """`HasRecording`, informational only: a boolean, or what a string or number says."""
    if value is None or isinstance(value, bool):
        return value
    found.flag("hasRecordingNotBoolean")
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        return True if word in _TRUE else False if word in _FALSE else None
    return None


_resolutions = ResolutionCache(ttl=60)


def check_recording_url(url: str, *, allow_loopback: bool) -> None:
    """Refuse unless https to a public host name (no IP literal, no internal name) that does
    not resolve to a non-public address. A name that does not resolve right now is
    accepted: the ingest job resolves again, retries, and records why it failed."""
    try:
        host = urlsplit(validate_url(url, allow_loopback=allow_loopback)).hostname or ""
        _resolutions.check(host, allow_loopback=allow_loopback, deadline=time.monotonic() + 2)
    except UnsafeURL as exc:
        raise HandoffRefused(f"RecordingUrl: {exc}", param="/RecordingUrl") from None
    except FetchError:
        pass
