"""The staff console's responders, one module per page or group of pages: thin, over the
console/ package (sessions, rendering, view models) and the feature packages. Sessions and
CSRF are checked by console.middleware.ConsoleSession before these run; a resource with
`login_required` never runs without a session, one with `admin_required` only for an admin
of the clinic it acts on. The helpers the pages share are here."""

from __future__ import annotations

import uuid
from datetime import datetime

import falcon

from console.inbox import KINDS, OTHER_TYPE, STATES, clinic_types, request_for, row
from jobs.playback import RecordingPlayer
from models import Clinic, PatientRequest, StaffUser


def clinic_of(req: falcon.Request, user: StaffUser) -> tuple[Clinic | None, list[Clinic]]:
    """?clinic=slug picks among the user's own clinics only; anything else: the first."""
    clinics = user.clinics()
    return next((c for c in clinics if c.slug == req.get_param("clinic")), clinics[0] if clinics else None), clinics


def inbox_filters(req: falcon.Request) -> dict[str, str]:
    return {
        "state": state if (state := req.get_param("state") or "") in STATES else "open",
        "kind": kind if (kind := req.get_param("kind") or "") in KINDS else "",
        "type": _type_filter(req.get_param("type") or ""),
        "q": (req.get_param("q") or "")[:100],
    }


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
