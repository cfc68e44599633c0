"""The inbox and its live update: a clinic's requests, newest first, filtered, each with
its patient and its call read in the same query (one round trip for a page of rows); and
what the other pages show of a request the same way (its row, its local times, the
request a staff member may open)."""

from __future__ import annotations

import math
import re
import urllib.parse
import uuid
from datetime import datetime
from typing import Any

import falcon
import peewee as pw
from babel import Locale, UnknownLocaleError
from markupsafe import Markup, escape

from console import pages
from console.patient_words import shown_name
from console.rendering import N_, Renderer, html, see_other
from jobs.playback import RecordingPlayer
from models import AuditEvent, Call, Clinic, Patient, PatientRequest, RequestType, StaffMembership, StaffUser
from models.requests import spans_of, words_at
from plumbing import catalogue
from plumbing.clock import Clock, as_utc
from plumbing.phones import for_display
from voicemail.recordings import GONE_REASONS, PlayState

PAGE = 50
KINDS = ("voice_message", "missed_call", "other")  # "other": every kind not from a call
STATES = ("open", "resolved")
_PHONE_LIKE = re.compile(r"\+?[\d\s/().-]{3,}")

# A recording that is gone: the one sentence the page says (the receptionist's "no player
# and why not"), then why, in words (voicemail.recordings.GONE_REASONS' reasons).
GONE = N_("The recording is no longer available — the transcript stays.")
WHY_GONE: dict[str, str] = {
    "deleted": N_("The switchboard platform has deleted it."),
    "no_credentials": N_("Its link has expired, and the clinic's switchboard platform access was not set up."),
    "no_reference": N_("Its link has expired, and the call names no recording to ask the switchboard platform for."),
    "expired": N_("Its link has expired, and this switchboard cannot give a new one."),
    "mismatch": N_("The switchboard platform gave a different recording than the call handed off."),
    "unverifiable": N_("A new link could not be checked against the recording the call handed off."),
}
assert set(WHY_GONE) == set(GONE_REASONS) - {"no_recording"}, "every reason a recording is gone has its words"
# The platform did not give a link just now (or a play failed after the page was drawn).
TRY_AGAIN = N_("The recording could not be loaded from the switchboard just now — play it again in a moment.")
NO_RECORDING = N_("No recording came with this call.")


OTHER_TYPE = "other"  # the type filter's "no type": a message no type was suggested or confirmed for


def effective_type() -> Any:
    """A request's type as the inbox sorts it: the one staff confirmed or the API set, else
    (not confirmed) the one its transcript suggests."""
    suggested = pw.Case(None, [(PatientRequest.type_confirmed_at.is_null(), PatientRequest.suggested_type)], None)
    return pw.fn.COALESCE(PatientRequest.request_type, suggested)


def requests(
    clinic: Clinic,
    *,
    state: str = "open",
    kind: str | None = None,
    request_type: str | None = None,
    search: str = "",
    after: datetime | None = None,
    limit: int = PAGE,
) -> list[PatientRequest]:
    """The inbox's rows: open ones flagged "may be urgent" first, then newest first."""
    query = (
        PatientRequest.select(PatientRequest, Patient, Call)
        .join(Patient)
        .switch(PatientRequest)
        .join(Call, join_type=pw.JOIN.LEFT_OUTER)
        .where(PatientRequest.clinic == clinic)
    )
    query = query.where(PatientRequest.done_at.is_null() if state == "open" else PatientRequest.done_at.is_null(False))
    if kind == "other":
        query = query.where(PatientRequest.kind.not_in(["voice_message", "missed_call"]))
    elif kind in KINDS:
        query = query.where(PatientRequest.kind == kind)
    if request_type == OTHER_TYPE:
        query = query.where(effective_type().is_null())
    elif request_type:
        query = query.where(effective_type() == uuid.UUID(request_type))
    search = search.strip()[:100]
    if search:
        # Name parts or phone digits; ILIKE patterns with the user's % and _ taken literally.
        # A number typed as the console shows it ("608 333 444") is matched by its digits
        # (stored numbers are E.164).
        if _PHONE_LIKE.fullmatch(search):
            search = ("+" if search.startswith("+") else "") + re.sub(r"\D", "", search)
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(
            Patient.first_name.ilike(pattern)
            | Patient.last_name.ilike(pattern)
            | Patient.phone.ilike(pattern)
            | Call.call_from.ilike(pattern)
        )
    if after is not None:
        query = query.where(PatientRequest.created_at > as_utc(after))
    order = [PatientRequest.created_at.desc(), PatientRequest.id.desc()]
    if state == "open":  # what may be urgent first; among the resolved it no longer matters
        order.insert(0, PatientRequest.urgent.desc())
    return list(query.order_by(*order).limit(limit))


def clinic_types(clinic: Clinic) -> list[RequestType]:
    """The clinic's request types by name, inactive ones too (a confirmed type keeps its name)."""
    return list(RequestType.select().where(RequestType.clinic == clinic).order_by(RequestType.name))


def marked(
    text: str, spans: list[tuple[int, int]], css: str, also: tuple[list[tuple[int, int]], str] | None = None
) -> Markup:
    """The transcript escaped, the ranges marked (`<mark class="css">`), and `also`'s ranges
    with its class (the words of the suggested type beside those of urgency)."""
    out, at = [], 0
    ranges = [(a, b, css) for a, b in spans] + ([(a, b, also[1]) for a, b in also[0]] if also else [])
    for start, end, kind in sorted(ranges):
        if start < at or end > len(text):
            continue  # not a range of this text (written for another transcript), or one already marked
        out += [escape(text[at:start]), Markup('<mark class="%s">') % kind, escape(text[start:end]), Markup("</mark>")]
        at = end
    out.append(escape(text[at:]))
    return Markup("").join(out)


def request_for(user: StaffUser, request_id: str) -> PatientRequest | None:
    """A request of one of the user's clinics; None otherwise (another clinic's id, a bad id)."""
    try:
        rid = uuid.UUID(request_id)
    except ValueError:
        return None
    # The clinics whose inbox the user works: a data-protection officer opens no request.
    clinic_ids = [c.id for c in user.clinics(role=StaffMembership.WORKING_ROLES)]
    return (
        PatientRequest.select(PatientRequest, Patient, Call, Clinic)
        .join(Patient)
        .switch(PatientRequest)
        .join(Call, join_type=pw.JOIN.LEFT_OUTER)
        .switch(PatientRequest)
        .join(Clinic)
        .where((PatientRequest.id == rid) & (PatientRequest.clinic.in_(clinic_ids)))
        .get_or_none()
    )


def local_time(value: datetime, clinic: Clinic, language: str) -> str:
    """A stored (naive UTC) time in the clinic's timezone, written the user's way."""
    return catalogue.local_time(value, clinic.timezone, language)


def language_name(code: str | None, language: str) -> str | None:
    """A detected language's name in the user's language ("cs" → "čeština" / "Czech")."""
    if not code:
        return None
    try:
        return Locale.parse(code).get_display_name(language) or code
    except (ValueError, UnknownLocaleError):
        return code


def phone(number: str | None, clinic: Clinic, language: str) -> dict[str, str | None] | None:
    """A number to show: `text` in the one display format, set as the language sets it (in
    Czech, never split at a line's end), `tel` (E.164) for a link (None: not a number to call)."""
    if not number:
        return None
    text, e164 = for_display(number, clinic.country)
    return {"text": catalogue.typeset(text, language), "tel": e164}


def row(
    request: PatientRequest,
    clinic: Clinic,
    language: str,
    recording: PlayState | None = None,
    types: list[RequestType] | None = None,
) -> dict[str, object]:
    """The values one row template shows (the page and the live update render the same).
    `recording`: what the call's recording is now (`RecordingPlayer.states`), for a
    request made from a call; `types`: the clinic's request types (`clinic_types`)."""
    call: Call | None = request.call if request.call_id else None
    patient = request.patient
    name = shown_name(patient, language)
    if call is not None and recording is None:
        recording = PlayState("none")
    # What staff wrote down as really said comes first; the machine's text stays beside it.
    transcript = (call.corrected_transcript or call.transcript) if call else None
    urgent_spans = spans_of(request.urgent_spans)
    type_spans = spans_of(request.suggested_type_spans)
    names = {t.id: t.name for t in types or []}
    read = request.suggested_type_spans is not None and transcript is not None
    return {
        "id": str(request.id),
        "kind": request.kind,
        "title": request.title,
        "name": name,
        "created": as_utc(request.created_at).isoformat(),
        "time": local_time(request.created_at, clinic, language),
        "open": request.done_at is None,
        "call_from": phone(call.call_from if call else patient.phone, clinic, language),
        "callback": phone(call.callback_number, clinic, language)
        if call and call.callback_number != call.call_from
        else None,
        # Digits read but not confirmed as heard: shown as heard, never as a link to call.
        "heard": phone(call.heard_number, clinic, language) if call and not call.callback_number else None,
        # A second before the number: the listener hears it whole.
        "heard_from": (
            max(0, math.floor(call.callback_number_at) - 1) if call and call.callback_number_at is not None else 0
        ),
        "transcript": transcript,
        "machine_transcript": call.transcript if call and call.corrected_transcript else None,
        "corrected_by": call.corrected_by if call and call.corrected_transcript else None,
        "corrected": local_time(call.corrected_at, clinic, language) if call and call.corrected_at else None,
        # The words that may mean urgency, marked (flagged until staff clear it), and the
        # words that suggested the type, so staff see why.
        "transcript_marked": (
            marked(
                transcript,
                urgent_spans,
                "urgent" if request.urgent else "was-urgent",
                (type_spans, "type-word") if read and request.suggested_type_id else None,
            )
            if transcript
            else None
        ),
        "urgent": request.urgent,
        "urgent_words": words_at(transcript, urgent_spans) if transcript else [],
        "urgent_cleared": request.urgent_cleared_at is not None,
        # What the transcript suggests (None: no type), and the type staff confirmed.
        "read": read,
        "suggested": names.get(request.suggested_type_id) if request.suggested_type_id else None,
        "suggested_id": str(request.suggested_type_id) if request.suggested_type_id else "",
        "type_words": words_at(transcript, type_spans) if read and transcript else [],
        "confirmed": request.type_confirmed_at is not None,
        "type_name": names.get(request.request_type_id) if request.request_type_id else None,
        "type_id": str(request.request_type_id) if request.request_type_id else "",
        "types": [{"id": str(t.id), "name": t.name} for t in types or [] if t.active],
        "status": call.transcript_status if call else None,
        "language": call.transcript_language if call else None,
        "language_name": language_name(call.transcript_language, language) if call else None,
        "recording": recording.state if recording else None,
        "gone_why": WHY_GONE.get(recording.reason or "") if recording and recording.state == "gone" else None,
        "playable": bool(recording and recording.has_player),
    }


def history(request: PatientRequest) -> list[AuditEvent]:
    """The request's audit trail, oldest first: its creation (by a token's `create`, or the
    call hand-off it came from), then every change, with who made it."""
    about = (AuditEvent.target_type == "patient_request") & (AuditEvent.target_id == str(request.id))
    if request.call_id:
        about |= (AuditEvent.target_type == "call") & (AuditEvent.target_id == str(request.call_id))
    return list(
        AuditEvent.select()
        .where((AuditEvent.clinic_id == request.clinic_id) & about)
        .order_by(AuditEvent.at, AuditEvent.id)
        .limit(200)
    )


def clinic_of(req: falcon.Request, user: StaffUser) -> tuple[Clinic | None, list[Clinic]]:
    """?clinic=slug picks among the user's own clinics only; anything else: the first."""
    clinics = user.clinics(role=StaffMembership.WORKING_ROLES)  # an officer has no inbox
    return next((c for c in clinics if c.slug == req.get_param("clinic")), clinics[0] if clinics else None), clinics


def inbox_filters(req: falcon.Request) -> dict[str, str]:
    return {
        "state": state if (state := req.get_param("state") or "") in STATES else "open",
        "kind": kind if (kind := req.get_param("kind") or "") in KINDS else "",
        "type": _type_filter(req.get_param("type") or ""),
        "q": (req.get_param("q") or "")[:100],
    }


def filtered(clinic: Clinic, filters: dict[str, str], after: datetime | None = None) -> list[PatientRequest]:
    """The clinic's requests the inbox's filters (`inbox_filters`) show: the page's, or
    those created after `after` (the live update's)."""
    return requests(
        clinic,
        state=filters["state"],
        kind=filters["kind"] or None,
        request_type=filters["type"] or None,
        search=filters["q"],
        after=after,
    )


def _type_filter(value: str) -> str:
    """A request type's id, OTHER_TYPE or "" (all); anything else is "" too."""
    if value == OTHER_TYPE:
        return value
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return ""


def own_request(req: falcon.Request, request_id: str) -> tuple[StaffUser, PatientRequest]:
    """The session's user and the request they may see: one of their clinics', else 404."""
    user: StaffUser = req.context.console_session.user
    request = request_for(user, request_id)
    if request is None:
        raise falcon.HTTPNotFound()
    return user, request


def rows_of(
    requests: list[PatientRequest], clinic: Clinic, language: str, player: RecordingPlayer, now: datetime
) -> list[dict[str, object]]:
    """The rows of requests, each with what its call's recording is now (from the stored
    calls: the page asks nothing of the platform)."""
    states = player.states([r.call for r in requests if r.call_id and r.call is not None], now)
    types = clinic_types(clinic)
    return [row(r, clinic, language, states.get(r.call_id) if r.call_id else None, types) for r in requests]


class Inbox:
    login_required = True

    def __init__(self, renderer: Renderer, clock: Clock, player: RecordingPlayer) -> None:
        self.renderer = renderer
        self.clock = clock
        self.player = player

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        user: StaffUser = session.user
        if not user.works and user.is_officer:
            # The data-protection officer has no inbox: their page is the read trail.
            raise see_other(pages.READS)
        clinic, clinics = clinic_of(req, user)
        filters = inbox_filters(req)
        rows = []
        if clinic is not None:
            rows = rows_of(filtered(clinic, filters), clinic, user.language, self.player, self.clock())
        # The live update asks for rows newer than the newest shown (or than now); the newest
        # is not the first when a flagged one is.
        after = max(str(r["created"]) for r in rows) if rows else as_utc(self.clock()).isoformat()
        rows_url = pages.ROWS + "?" + urllib.parse.urlencode({"clinic": clinic.slug if clinic else "", **filters})
        html(
            resp,
            self.renderer.render(
                "console/inbox.html",
                user.language,
                user=user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=clinics,
                rows=rows,
                types=clinic_types(clinic) if clinic else [],
                after=after,
                rows_url=rows_url,
                **filters,
            ),
        )


class InboxRows:
    """The live update: the rows created after `after`, rendered by the row template."""

    login_required = True

    def __init__(self, renderer: Renderer, clock: Clock, player: RecordingPlayer) -> None:
        self.renderer = renderer
        self.clock = clock
        self.player = player

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        user: StaffUser = session.user
        clinic, _ = clinic_of(req, user)
        try:
            after = datetime.fromisoformat(req.get_param("after") or "")
        except ValueError:
            raise falcon.HTTPBadRequest() from None
        filters = inbox_filters(req)
        if clinic is None:
            html(resp, "")
            return
        found = filtered(clinic, filters, after)
        rows = "".join(
            self.renderer.render("console/_row.html", user.language, row=row, csrf_token=session.csrf_token)
            for row in rows_of(found, clinic, user.language, self.player, self.clock())
        )
        html(resp, rows)
