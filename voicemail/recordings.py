"""A call's recording: where it plays from now, which recording the switchboard platform is
asked about once the original link has expired, and the binding of a re-fetched link to
the bytes the hand-off delivered.

The service does not copy recordings. A call's recording is playable through

- the original `RecordingUrl`, treated as expired `RECORDING_URL_LIFETIME_MINUTES` after
  the call was received (the platforms' links live about 30 minutes);
- then a link re-fetched from the platform's API with the clinic's credentials
  (jobs/refetch.py, voicemail/platform.py), valid until the expiry the platform gives.
  Only calls whose `Source` contains a marker word of the platform family have that
  strategy: the deployment's `PROVIDER_MARKER_WORDS`, plus the clinic's own
  `sourceMarkers` from onboarding.

The recording is bound to its bytes, not to its name. A write token chooses `RecordingSid`,
which is the reference the platform is asked about with the clinic's credentials; so the
ingest job keeps the SHA-256 and length of what it downloaded from `RecordingUrl`, and a
re-fetched link is served only once what it yields hashes to that value
(`matches_handoff`). A link that yields other bytes makes the recording "no longer
available" (`mismatch`), never another recording. A call whose recording was never
downloaded (its original link died first) has no hash to check against: it is re-fetched by
reference only when its `RecordingSid` names `RecordingUrl`'s file (or there is no
`RecordingSid` and the file name is the reference), else it is `unverifiable`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from config import Config
from models import Call, ChangeEvent, Clinic, PatientRequest
from plumbing.clock import as_utc, iso_utc
from plumbing.database import db
from safe_fetch import download_audio

#: A link is handed out only with at least this much time left.
MIN_LEFT = timedelta(seconds=60)

# Why a recording is not available; the play endpoint's 410 and the detail say so.
GONE_REASONS: dict[str, str] = {
    "deleted": "the switchboard platform has deleted the recording",
    "no_credentials": "the clinic's switchboard platform credentials were not supplied",
    "no_reference": "the call names no recording the platform could look up",
    "expired": "the recording link has expired and this switchboard platform offers no re-fetch",
    "no_recording": "the call has no recording",
    "mismatch": "the switchboard platform returned another recording than the one the call handed off",
    "unverifiable": "the recording was never downloaded and RecordingSid does not name RecordingUrl's file, "
    "so a re-fetched recording could not be checked against it",
}


@dataclass(frozen=True)
class LinkState:
    """`available` (url, expires_at), `expired` (a re-fetch can help) or `unavailable` (reason)."""

    state: str
    url: str | None = None
    expires_at: datetime | None = None
    reason: str | None = None

    def describe(self) -> dict[str, Any]:
        """The recording object of the request detail (the link is the client's to use)."""
        if self.state == "available":
            return {"state": "available", "url": self.url, "expiresAt": iso_utc(self.expires_at)}
        if self.state == "expired":
            return {"state": "fetching"}
        assert self.reason is not None
        return {"state": "unavailable", "reason": self.reason, "message": gone_message(self.reason)}


def gone_message(reason: str) -> str:
    return f"The recording is no longer available ({GONE_REASONS.get(reason, reason)}); the transcript remains."


def marker_words(call: Call, config: Config) -> list[str]:
    """The words whose presence in `Source` selects the platform family's re-fetch: the
    deployment's (`PROVIDER_MARKER_WORDS`) and the clinic's own (`sourceMarkers`)."""
    stored = Clinic.select(Clinic.platform_source_markers).where(Clinic.id == call.clinic_id).scalar()
    return [*config.marker_words, *json.loads(stored or "[]")]


def clinic_marker_words(clinic: Clinic, config: Config) -> list[str]:
    """`marker_words` of a clinic already read (a page of one clinic's calls asks once)."""
    return [*config.marker_words, *json.loads(clinic.platform_source_markers or "[]")]


def has_strategy(call: Call, config: Config, markers: list[str] | None = None) -> bool:
    """Whether the call's `Source` names the platform family the service re-fetches from
    (`markers`: the clinic's marker words when the caller has them, else read)."""
    text = (call.source or "").lower()
    if not text:
        return False
    return any(word in text for word in (marker_words(call, config) if markers is None else markers))


def clinics_never_refetched(config: Config) -> list[str]:
    """The slugs of clinics that have platform credentials but no marker word at all
    (neither the deployment's nor their own): their expired recording links can never be
    re-fetched, which the worker and the release step say at start."""
    if config.marker_words:
        return []
    query = Clinic.select(Clinic.slug).where(
        Clinic.platform_api_url.is_null(False)
        & (Clinic.platform_source_markers.is_null() | (Clinic.platform_source_markers == "[]"))
    )
    return sorted(clinic.slug for clinic in query)


def never_refetched_warnings(config: Config) -> list[str]:
    """What the release step and the worker say at start about clinics whose expired
    recording links can never be re-fetched (no marker word applies to them)."""
    slugs = clinics_never_refetched(config)
    if not slugs:
        return []
    return [
        f"clinic(s) {', '.join(slugs)} have switchboard platform credentials but no marker words: their "
        "recordings become unavailable once the original link expires. Set PROVIDER_MARKER_WORDS (the "
        "platform family's words in the calls' Source) or the clinic's switchboard sourceMarkers."
    ]


def file_name(url: str) -> str:
    return PurePosixPath(unquote(urlsplit(url).path)).name


def names_its_recording(recording_sid: str, recording_url: str) -> bool:
    """Whether `RecordingSid` is the file name of `RecordingUrl`, with or without its
    extension, in any letter case."""
    name = file_name(recording_url).lower()
    return bool(name) and recording_sid.strip().lower() in (name, PurePosixPath(name).stem)


def platform_reference(call: Call) -> tuple[str | None, str | None]:
    """(the reference the platform is asked about, None), or (None, why there is none).

    `RecordingSid`, else the file name in `RecordingUrl` (the contract's rule). Without the
    hash of the handed-off bytes nothing can check what a steered `RecordingSid` yields, so
    then only a `RecordingSid` that names the URL's own file is used."""
    sid = (call.recording_sid or "").strip()
    name = file_name(call.recording_url) if call.recording_url else ""
    if (
        call.recording_sha256 is None
        and sid
        and not (call.recording_url and names_its_recording(sid, call.recording_url))
    ):
        return None, "unverifiable"
    reference = sid or name
    return (reference, None) if reference else (None, "no_reference")


def original_expiry(call: Call, config: Config) -> datetime:
    return as_utc(call.received_at) + timedelta(minutes=config.recording_url_lifetime_minutes)


def link_state(call: Call, now: datetime, config: Config, markers: list[str] | None = None) -> LinkState:
    """The call's recording at `now`: the freshest link with time left, else whether a
    re-fetch can help (one query for the clinic's marker words when it may, none when the
    caller passes them as `markers`)."""
    now = as_utc(now)
    if call.recording_gone_reason:
        return LinkState("unavailable", reason=call.recording_gone_reason)
    if not call.recording_url:
        return LinkState("unavailable", reason="no_recording")
    candidates = [(original_expiry(call, config), call.recording_url)]
    if call.recording_link and call.recording_link_expires_at:
        candidates.append((as_utc(call.recording_link_expires_at), call.recording_link))
    expires_at, url = max(candidates, key=lambda c: c[0])
    if expires_at - now >= MIN_LEFT:
        return LinkState("available", url=url, expires_at=expires_at)
    if not has_strategy(call, config, markers):
        return LinkState("unavailable", reason="expired")
    return LinkState("expired")


#: What a page says about a call's recording before anyone plays it (`PlayState.state`):
#: a link with time left (`playable`); an expired link a play will re-fetch (`refetchable`);
#: the re-fetch failed for now and waits for a retry or failed its retries (`unreachable`:
#: "try again", not "gone"); the recording is gone (`gone`, with its reason); the call
#: brought none (`none`).
PLAY_STATES = ("playable", "refetchable", "unreachable", "gone", "none")


@dataclass(frozen=True)
class PlayState:
    state: str
    reason: str | None = None

    @property
    def has_player(self) -> bool:
        """Whether a page offers a player (a play may still work)."""
        return self.state in ("playable", "refetchable", "unreachable")


def play_state(state: LinkState, has_credentials: bool, refetch_failing: bool) -> PlayState:
    """A page's word for a link state, judged as a play would (`jobs/playback.py`): an
    expired link of a clinic without platform credentials is gone; of one with them, a
    re-fetch that is failing for now (`refetch_failing`, the job's own state) is
    `unreachable`."""
    if state.state == "available":
        return PlayState("playable")
    if state.state == "unavailable":
        return PlayState("none") if state.reason == "no_recording" else PlayState("gone", state.reason)
    if not has_credentials:
        return PlayState("gone", "no_credentials")
    return PlayState("unreachable" if refetch_failing else "refetchable")


def remember_gone(call_id: Any, reason: str, now: datetime) -> None:
    """Record once that the recording is gone: later plays answer 410 without asking. The
    first time, its request's integrators are told (`recording.unavailable`, in the same
    transaction)."""
    with db.atomic():
        marked = (
            Call.update(recording_gone_reason=reason, recording_checked_at=as_utc(now))
            .where((Call.id == call_id) & Call.recording_gone_reason.is_null())
            .execute()
        )
        if not marked:
            return
        request = PatientRequest.get_or_none(PatientRequest.call == call_id)
        clinic_id = Call.select(Call.clinic_id).where(Call.id == call_id).scalar()
        data: dict[str, Any] = {"callId": str(call_id), "reason": reason, "patientId": None}
        if request is not None:
            data |= {"requestId": str(request.id), "patientId": str(request.patient_id)}
        ChangeEvent.record(clinic_id, "recording.unavailable", data, now)


@dataclass(frozen=True)
class Fingerprint:
    """What the hand-off's recording was: the SHA-256 (hex) and length of its bytes."""

    sha256: str
    size: int

    @classmethod
    def of_file(cls, path: str | Path) -> Fingerprint:
        digest, size = hashlib.sha256(), 0
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 16):
                digest.update(chunk)
                size += len(chunk)
        return cls(digest.hexdigest(), size)


def matches_handoff(url: str, call: Call, config: Config) -> tuple[bool, Fingerprint]:
    """Download `url` (a re-fetched link) within the recordings' limits and say whether its
    bytes are the ones the hand-off delivered. Raises what `download_audio` raises
    (`FetchError`, transient or not; `UnsafeURL`)."""
    assert call.recording_sha256 is not None
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
        path = Path(tmp) / "recording"
        download_audio(
            url,
            path,
            max_bytes=config.recording_max_bytes,
            timeout=config.recording_fetch_timeout,
            allow_loopback=config.unsafe_allow_loopback_fetch,
            ca_certs=config.fetch_ca_bundle or None,
        )
        got = Fingerprint.of_file(path)
    same = got.size == call.recording_bytes and hmac.compare_digest(got.sha256, call.recording_sha256)
    return same, got
