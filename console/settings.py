"""The console's admin pages: the clinic's settings and its audit trail.
ConsoleSession (console/middleware.py) lets a resource with `admin_required` run only
for an admin of the clinic it acts on, and puts that clinic in `req.context.admin_clinic`."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from datetime import UTC, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import falcon

from console import pages
from console.rendering import N_, Renderer, html, see_other
from models import Actor, Calendar, Clinic, OfficeHours, RequestType, Tag, Vacation
from onboarding.clinic_settings import ClinicSettings, NotFound, SettingsError, local_moment
from plumbing.clock import Clock
from plumbing.crypto import Keys
from plumbing.row_cache import RowCache
from privacy.retention import settings_of as retention_settings
from switchboard.office_hours import WEEKDAYS
from switchboard.schedules import is_clinic_open
from switchboard.vacations import coming_holidays
from triage import vocabulary

# The languages whose words the console's forms edit (a file may give others).
WORD_LANGUAGES = ("cs", "en")

#: The settings sections, in the order the index lists them: every section is named here,
#: the pages of this module and those of their own modules (keys.py, staff.py) alike.
SECTIONS: tuple[dict[str, str], ...] = tuple(
    {"title": title, "url": url}
    for title, url in (
        (N_("Office hours"), pages.OFFICE_HOURS),
        (N_("Calendars and vacations"), pages.CALENDARS),
        (N_("Calls"), pages.CALLS),
        (N_("Request types"), pages.REQUEST_TYPES),
        (N_("Data retention"), pages.RETENTION),
        (N_("API keys"), pages.API_KEYS),
        (N_("Webhooks"), pages.WEBHOOKS),
        (N_("Staff"), pages.STAFF),
    )
)


class SettingsIndex:
    admin_required = True

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = req.context.console_session
        html(
            resp,
            self.renderer.render(
                "console/settings/index.html",
                session.user.language,
                user=session.user,
                csrf_token=session.csrf_token,
                clinic=req.context.admin_clinic,
                clinics=req.context.admin_clinics,
                sections=SECTIONS,
            ),
        )


class _SettingsPage(ABC):
    """A settings section: GET renders it, POST makes one change through `ClinicSettings`
    (onboarding's validator and writer), then 303 back; a refused change re-renders the
    page with 400 and the validator's message; a row of another clinic is 404."""

    admin_required = True
    template = ""
    path = ""

    def __init__(self, renderer: Renderer, secret_key: Keys, clock: Clock, cache: RowCache | None = None) -> None:
        self.renderer = renderer
        self.secret_key = secret_key
        self.clock = clock
        self.cache = cache

    def facts(self, req: falcon.Request, clinic: Clinic) -> dict[str, Any]:
        return {}

    @abstractmethod
    def change(self, settings: ClinicSettings, action: str, form: dict[str, str]) -> None:
        """Make the form's change (`action`) through `settings`; each section defines it."""

    def _render(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        status: str = falcon.HTTP_200,
        error: SettingsError | None = None,
    ) -> None:
        session, clinic = req.context.console_session, req.context.admin_clinic
        html(
            resp,
            self.renderer.render(
                self.template,
                session.user.language,
                user=session.user,
                csrf_token=session.csrf_token,
                clinic=clinic,
                clinics=req.context.admin_clinics,
                error=error,
                form=req.context.form,
                **self.facts(req, clinic),
            ),
            status,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._render(req, resp)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        clinic = req.context.admin_clinic
        settings = ClinicSettings(clinic, Actor.staff(req.context.console_session.user), self.secret_key, self.clock())
        try:
            self.change(settings, req.context.form.get("action", ""), req.context.form)
        except NotFound:
            raise falcon.HTTPNotFound() from None
        except SettingsError as error:
            self._render(req, resp, falcon.HTTP_400, error)
            return
        raise see_other(pages.of_clinic(self.path, clinic.slug))


def _checked(form: dict[str, str], name: str) -> bool:
    return form.get(name) == "1"


class OfficeHoursPage(_SettingsPage):
    """Office hours, and the preview: "open now?" and "open at …?" answered by
    `is_clinic_open`, the function `is-clinic-opened` answers with."""

    template = "console/settings/office_hours.html"
    path = pages.OFFICE_HOURS

    def facts(self, req: falcon.Request, clinic: Clinic) -> dict[str, Any]:
        tz = ZoneInfo(clinic.timezone)
        now = self.clock().astimezone(tz)
        at_text = req.get_param("at") or ""
        at = local_moment(at_text, tz) if at_text else None
        return {
            "hours": clinic.office_hours.order_by(OfficeHours.weekday, OfficeHours.opens, OfficeHours.id),
            "weekdays": WEEKDAYS,
            "weeks": OfficeHours.WEEKS,
            "now": now,
            "open_now": is_clinic_open(clinic, self.cache, now),
            "at_text": at_text,
            "at": at.astimezone(tz) if at else None,
            "bad_at": bool(at_text) and at is None,
            "open_at": is_clinic_open(clinic, self.cache, at) if at else None,
        }

    def change(self, settings: ClinicSettings, action: str, form: dict[str, str]) -> None:
        if action == "remove":
            settings.remove_office_hours(form.get("id"))
        else:
            settings.add_office_hours(
                form.get("weekday", ""), form.get("opens", ""), form.get("closes", ""), form.get("weeks", "every")
            )


class CalendarsPage(_SettingsPage):
    """Calendars and their vacations, beside the public holidays of the coming year."""

    template = "console/settings/calendars.html"
    path = pages.CALENDARS

    def facts(self, req: falcon.Request, clinic: Clinic) -> dict[str, Any]:
        tz = ZoneInfo(clinic.timezone)
        today = self.clock().astimezone(tz).date()
        calendars = list(clinic.calendars.order_by(Calendar.name))
        vacations = {k.id: [(v, *_span(v, tz)) for v in k.vacations.order_by(Vacation.starts_at)] for k in calendars}
        return {
            "calendars": calendars,
            "vacations": vacations,
            "holidays": coming_holidays(
                clinic.country, clinic.subdivision, today, req.context.console_session.user.language
            ),
        }

    def change(self, settings: ClinicSettings, action: str, form: dict[str, str]) -> None:
        if action == "remove-vacation":
            settings.remove_vacation(form.get("id"))
        elif action == "add-vacation":
            settings.add_vacation(
                form.get("calendar"),
                form.get("name", ""),
                form.get("start", ""),
                form.get("end", ""),
                _checked(form, "switchboard"),
            )
        else:
            settings.save_calendar(form.get("id") or None, form.get("name", ""), _checked(form, "ignore_holidays"))


def _span(vacation: Vacation, tz: ZoneInfo) -> tuple[str, str]:
    """A vacation's start and end as the form takes them: whole local days as dates, the end
    day included (as onboarding reads a date), otherwise local dates and times."""
    start, end = (moment.replace(tzinfo=UTC).astimezone(tz) for moment in (vacation.starts_at, vacation.ends_at))
    if start.time() == end.time() == time(0):
        return start.date().isoformat(), (end.date() - timedelta(days=1)).isoformat()
    return start.strftime("%Y-%m-%d %H:%M"), end.strftime("%Y-%m-%d %H:%M")


class CallsPage(_SettingsPage):
    """Missed-call requests on or off; the languages the transcription chooses among; the
    words that may mean a voice message is urgent (the clinic's, or the shipped ones), and
    who is e-mailed of such a message, and when."""

    template = "console/settings/calls.html"
    path = pages.CALLS

    def facts(self, req: falcon.Request, clinic: Clinic) -> dict[str, Any]:
        stored = json.loads(clinic.urgency_words) if clinic.urgency_words else None
        return {
            "urgency": vocabulary.urgency_words(stored),
            "urgency_shipped": stored is None,
            "languages_of_words": WORD_LANGUAGES,
        }

    def change(self, settings: ClinicSettings, action: str, form: dict[str, str]) -> None:
        if action == "urgent-notices":
            when = "always" if form.get("when") == "always" else "outsideOfficeHours"
            settings.set_urgent_notices(_checked(form, "staff"), form.get("on_call", ""), when)
        elif action == "urgency-shipped":
            settings.set_urgency_words(None)
        elif action == "urgency":
            settings.set_urgency_words(
                {code: vocabulary.from_text(form.get(f"urgency-{code}", "")) for code in WORD_LANGUAGES}
            )
        else:
            languages = [code for code in form.get("languages", "").replace(",", " ").split() if code]
            settings.set_calls(_checked(form, "missed_call_requests"), languages)


class RequestTypesPage(_SettingsPage):
    """Request types with their flags and default patient tags; new patient tags."""

    template = "console/settings/request_types.html"
    path = pages.REQUEST_TYPES
    FLAGS = ("requiresReservation", "requiresPayment", "requiresSignature", "active")
    NUMBERS = ("reservationLength", "remindDaysBefore")

    def facts(self, req: falcon.Request, clinic: Clinic) -> dict[str, Any]:
        types = list(clinic.request_types.order_by(RequestType.name))
        defaults = {t.id: {d.tag_id for d in t.default_tags} for t in types}
        tags = list(clinic.tags.where((Tag.type == "patient") & Tag.deleted_at.is_null()).order_by(Tag.name))
        words = {t.id: json.loads(t.transcript_words) if t.transcript_words else {} for t in types}
        return {
            "types": types,
            "defaults": defaults,
            "tags": tags,
            "words": words,
            "presets": vocabulary.PRESET_NAMES,
            "preset_words": vocabulary.PRESETS,
            "languages_of_words": WORD_LANGUAGES,
        }

    def change(self, settings: ClinicSettings, action: str, form: dict[str, str]) -> None:
        if action == "add-tag":
            settings.add_patient_tag(form.get("name", ""), form.get("color", "").strip())
            return
        fields: dict[str, Any] = {
            "ecrfId": form.get("ecrfId", "").strip(),
            "name": form.get("name", "").strip(),
            "description": form.get("description", "").replace("\r\n", "\n"),
        }
        fields |= {flag: _checked(form, flag) for flag in self.FLAGS}
        for number in self.NUMBERS:
            text = form.get(number, "").strip() or "0"
            # Not a number: passed on as text, for the onboarding schema to refuse with its path.
            fields[number] = int(text) if text.lstrip("-").isdigit() else text
        own = {code: vocabulary.from_text(form.get(f"words-{code}", "")) for code in WORD_LANGUAGES}
        own = {code: lines for code, lines in own.items() if lines}
        preset = form.get("preset", "")
        # Not a shipped set: passed on, for the onboarding schema to refuse with its path.
        setting = {k: v for k, v in (("preset", preset), ("words", own)) if v}
        fields["transcriptWords"] = setting or None
        tag_ids = _ticked_tags(form)
        settings.save_request_type(form.get("id") or None, fields, tag_ids)


def _ticked_tags(form: dict[str, str]) -> list[str]:
    """The ids of the default tags ticked: fields `tag-<id>` (the form parser keeps one
    value per name, so each tag has a field of its own)."""
    return [name.removeprefix("tag-") for name in form if name.startswith("tag-") and form[name] == "1"]


class RetentionPage(_SettingsPage):
    """How long the clinic keeps personal data (privacy/retention.py); empty: kept."""

    template = "console/settings/retention.html"
    path = pages.RETENTION
    # (the onboarding key, its label, its hint), in the page's order.
    FIELDS = (
        (
            "resolvedCallRequestsDays",
            N_("Resolved requests from calls"),
            N_("Voice messages and missed calls, with their calls and transcripts, this long after resolving."),
        ),
        (
            "callsWithoutRequestDays",
            N_("Calls without a request"),
            N_("Calls that made no request (no recording, missed calls not kept), this long after they came."),
        ),
        (
            "auditDetailsDays",
            N_("Addresses in the audit trail"),
            N_("The audit trail keeps what was done and by whom; the address it came from is removed after this."),
        ),
        (
            "signedDocumentsDays",
            N_("Signed documents"),
            N_("Medical documentation: empty keeps it. Set it only as the law on medical records allows."),
        ),
        (
            "resolvedApiRequestsDays",
            N_("Resolved requests made through the API"),
            N_("Requests the clinic's systems made, this long after resolving; one holding a signed document stays."),
        ),
        (
            "readTrailDays",
            N_("Read trail"),
            N_("Who read which patient's data, kept this long; empty: 730 days (never for ever)."),
        ),
    )

    def facts(self, req: falcon.Request, clinic: Clinic) -> dict[str, Any]:
        current = retention_settings(clinic)
        return {
            "fields": [{"key": k, "label": label, "hint": hint, "value": current[k]} for k, label, hint in self.FIELDS],
            "unset": all(value is None for value in current.values()),
        }

    def change(self, settings: ClinicSettings, action: str, form: dict[str, str]) -> None:
        days: dict[str, Any] = {}
        for key, _label, _hint in self.FIELDS:
            text = form.get(key, "").strip()
            # Not a number: passed on as text, for the onboarding schema to refuse with its path.
            days[key] = None if not text else int(text) if text.isdigit() else text
        settings.set_retention(days)
