"""A patient's page for the clinic's administrators: what the service holds about them, a
copy of it for the patient (a ZIP download), and their erasure, confirmed on the page that
lists what it deletes. Only an admin of a clinic where the patient has a record or a
request (`?clinic=` or the form's `clinic`); any other patient is 404. The rules are
privacy/'s, the same `manage.py patient` follows."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from typing import Any

import falcon
import redis

from console import pages
from console import reads as reads_page
from console.inbox import local_time
from console.patient_words import shown_name
from console.rendering import Renderer, html, see_other
from models import Actor, Clinic
from plumbing.clock import Clock
from plumbing.errors import NotFound
from privacy import erasure, patient_copy, read_trail
from storage import Storage

FLASH = "patient-erased"  # the one-time counts shown after an erasure (console/flash.py)


def _patient_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise falcon.HTTPNotFound() from None


def _plan(clinic: Clinic, patient_id: uuid.UUID) -> erasure.Plan:
    try:
        return erasure.plan(patient_id, clinic)
    except NotFound:
        raise falcon.HTTPNotFound() from None


class PatientPage:
    admin_required = True
    officer_allowed = True  # the clinic's data-protection officer too (console/middleware.py)

    def __init__(self, renderer: Renderer, clock: Clock) -> None:
        self.renderer = renderer
        self.clock = clock

    def on_get(self, req: falcon.Request, resp: falcon.Response, patient_id: str) -> None:
        session, clinic = req.context.console_session, req.context.admin_clinic
        user = session.user
        try:
            plan = erasure.plan(_patient_id(patient_id), clinic)
        except NotFound:
            erased = req.context.flash.take(FLASH) if req.context.flash is not None else None
            if erased is None or erased.get("patient") != patient_id:
                raise falcon.HTTPNotFound() from None
            self._render(resp, user, session.csrf_token, clinic, erased=erased["counts"])
            return
        # Who read this patient before (this read not yet among them), then this read.
        reads = read_trail.reads_of_patient([clinic.id], plan.patient.id)
        read_trail.record(user, clinic.id, "patient", [(plan.patient.id, None)], self.clock())
        self._render(resp, user, session.csrf_token, clinic, plan=plan, reads=reads, read_kinds=reads_page.KINDS)

    def _render(self, resp: falcon.Response, user: Any, csrf_token: str, clinic: Clinic, **facts: Any) -> None:
        facts = {"plan": None, "erased": None, "reads": [], "person_name": "", **facts}
        plan: erasure.Plan | None = facts["plan"]
        language = user.language
        clinics = {c.id: c.name for c in Clinic.select(Clinic.id, Clinic.name)}
        if plan is not None:
            documents = plan.requests_with_documents()
            facts["requests"] = [
                {
                    # The request's page: for those who work the clinic's inbox (not its officer).
                    "url": pages.request(r.id) if r.clinic_id == clinic.id and user.works else None,
                    "title": r.title,
                    "clinic": clinics.get(r.clinic_id, ""),
                    "created": local_time(r.created_at, clinic, language),
                    "open": r.done_at is None,
                    "documents": r.id in documents,
                }
                for r in plan.requests
            ]
            facts["records"] = [clinics.get(r.clinic_id, "") for r in plan.records]
            facts["reads"] = [
                {
                    "at": local_time(r.at, clinic, language),
                    "who": r.reader_name,
                    "kind": r.kind,
                    "reader": r.reader_kind,
                }
                for r in facts["reads"]
            ]
            facts["person_name"] = shown_name(plan.patient, language)
        html(
            resp,
            self.renderer.render(
                "console/patient.html",
                language,
                user=user,
                csrf_token=csrf_token,
                clinic=clinic,
                **facts,
            ),
        )


class PatientCopy:
    """POST: the patient's copy, a ZIP archive (audit-logged), as a download."""

    admin_required = True
    officer_allowed = True  # the clinic's data-protection officer too (console/middleware.py)

    def __init__(self, storage: Storage, clock: Clock) -> None:
        self.storage = storage
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, patient_id: str) -> None:
        clinic, user = req.context.admin_clinic, req.context.console_session.user
        wanted = _patient_id(patient_id)
        _plan(clinic, wanted)  # 404 before anything is written
        # Spooled to disk past a few megabytes: the signed documents may be large.
        archive = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 (the answer's stream closes it)
        try:
            patient_copy.write_copy(
                wanted, archive, self.storage, Actor.staff(user), self.clock(), clinic, language=user.language
            )
        except NotFound:
            archive.close()
            raise falcon.HTTPNotFound() from None
        except BaseException:
            archive.close()
            raise
        read_trail.record(user, clinic.id, "copy", [(wanted, None)], self.clock())
        size = archive.tell()
        archive.seek(0)
        resp.content_type = "application/zip"
        resp.downloadable_as = f"patient-{str(wanted)[:8]}-{self.clock().date().isoformat()}.zip"
        resp.cache_control = ["no-store"]
        resp.set_stream(archive, size)


class PatientErasure:
    """POST (confirmed on the patient's page): erase the patient; 303 to the page, which
    then says what went (once)."""

    admin_required = True
    officer_allowed = True  # the clinic's data-protection officer too (console/middleware.py)

    def __init__(self, storage: Storage, clock: Clock) -> None:
        self.storage = storage
        self.clock = clock

    def on_post(self, req: falcon.Request, resp: falcon.Response, patient_id: str) -> None:
        clinic, user, form = req.context.admin_clinic, req.context.console_session.user, req.context.form
        wanted = _patient_id(patient_id)
        if form.get("confirm") != "1":
            raise see_other(pages.of_clinic(pages.patient(wanted), clinic.slug, "erase"))
        try:
            erased = erasure.erase(
                wanted,
                Actor.staff(user),
                self.clock(),
                self.storage,
                include_documents=form.get("include_documents") == "1",
                clinic=clinic,
            )
        except NotFound:
            raise falcon.HTTPNotFound() from None
        if req.context.flash is not None:
            # Redis away: the page answers 404 for the erased patient; the trail has the counts.
            with contextlib.suppress(redis.RedisError):
                req.context.flash.put(FLASH, {"patient": str(wanted), "counts": erased.counts()})
        raise see_other(pages.of_clinic(pages.patient(wanted), clinic.slug))
