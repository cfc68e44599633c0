"""`python manage.py onboard FILE.json`: one transaction, idempotent, path-named errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

import manage
from commands.demo import DEMO_FILE
from models import (
    MODELS,
    Actor,
    AuditEvent,
    Calendar,
    Clinic,
    ExternalId,
    OfficeHours,
    Organization,
    Patient,
    PatientRecord,
    PatientRecordTag,
    RequestType,
    RequestTypeDefaultTag,
    SchemaMigration,
    Tag,
    Vacation,
)
from onboarding.writer import OnboardingError, stable_id
from plumbing import clock, crypto
from plumbing.database import db
from tests.support import SECRET_KEY, load


def snapshot() -> dict[str, list[tuple]]:
    with db.connection_context():
        return {
            m.__name__: sorted(tuple(sorted((k, str(v)) for k, v in row.__data__.items())) for row in m.select())
            for m in MODELS
            if m is not SchemaMigration
        }


def cli(config, *args: str) -> int:
    return manage.main(list(args), config)


def test_example_file_loads_everything(app, example):
    load(example)
    with db.connection_context():
        org = Organization.get(Organization.slug == "demo-health")
        assert org.patient_sharing is True
        clinic = Clinic.get(Clinic.slug == "demo-clinic")
        assert (clinic.timezone, clinic.country, clinic.language, clinic.missed_call_requests) == (
            "Europe/Prague",
            "CZ",
            "cs",
            True,
        )
        assert clinic.language_list == ["cs", "sk", "en"]
        assert Clinic.get(Clinic.slug == "demo-clinic-brno").language_list == []  # not set
        # What a call's language is detected among: the clinic's own first, no repeats.
        assert clinic.caller_languages == ["cs", "sk", "en"]
        assert Clinic.get(Clinic.slug == "demo-clinic-brno").caller_languages == ["cs"]
        assert Clinic.get(Clinic.slug == "demo-clinic-brno").missed_call_requests is False
        assert OfficeHours.select().where(OfficeHours.clinic == clinic).count() == 6
        assert {c.name: c.ignore_holidays for c in clinic.calendars} == {"Dr. Novak": False, "Nurse line": True}
        assert Vacation.select().count() == 2
        signed = RequestType.get(RequestType.ecrf_id == "SIGNED_CONSENT")
        assert [
            d.tag.name for d in RequestTypeDefaultTag.select().where(RequestTypeDefaultTag.request_type == signed)
        ] == ["signed-consent"]
        jana = Patient.get(Patient.id == stable_id("patient", "demo-health", "jana-novakova"))
        assert jana.phone == "+420601123456"
        dup = Patient.get(Patient.id == stable_id("patient", "demo-health", "jana-novakova-duplicate"))
        assert dup.merged_into_id == jana.id and dup.phone == "+420601123456"
        assert Patient.get(Patient.id == stable_id("patient", "demo-health", "petr-svoboda")).phone == "+420602987654"
        record = PatientRecord.get((PatientRecord.patient == jana) & (PatientRecord.clinic == clinic))
        assert record.note == "Prefers morning calls."
        assert [t.tag.name for t in PatientRecordTag.select().where(PatientRecordTag.record == record)] == ["vip"]
        ext = ExternalId.get(ExternalId.value == "EXT-1001")
        assert (ext.clinic_id, ext.patient_id, ext.source) == (clinic.id, jana.id, "signing-system")
        # The platform password is stored encrypted, and decrypts with the configured key.
        assert "change-me" not in clinic.platform_password_encrypted
        assert crypto.decrypt(clinic.platform_password_encrypted, SECRET_KEY) == "change-me"
        assert (
            clinic.platform_api_url == "https://pbx.example.net/openapi"
            and clinic.platform_username == "demo-clinic-api"
        )


def test_running_the_same_file_twice_changes_nothing(app, example):
    first = load(example)
    before = snapshot()
    second = load(example)
    assert snapshot() == before
    assert "0 change(s)" in second and "0 change(s)" not in first


def test_changes_in_the_file_are_applied(app, example):
    load(example)
    example["clinics"][0]["officeHours"] = [{"weekday": "sat", "opens": "09:00", "closes": "11:00"}]
    example["clinics"][0]["calendars"][0]["vacations"] = []
    example["clinics"][0]["requestTypes"][0]["defaultPatientTags"] = ["vip"]
    example["clinics"][0]["switchboard"]["password"] = "rotated"
    example["clinics"][0]["tags"][1]["deleted"] = True
    load(example)
    with db.connection_context():
        clinic = Clinic.get(Clinic.slug == "demo-clinic")
        assert [(h.weekday, str(h.opens)) for h in clinic.office_hours] == [(6, "09:00:00")]
        assert Vacation.select().join(Calendar).where(Calendar.name == "Dr. Novak").count() == 0
        signed = RequestType.get(RequestType.ecrf_id == "SIGNED_CONSENT")
        assert [d.tag.name for d in signed.default_tags] == ["vip"]
        assert crypto.decrypt(clinic.platform_password_encrypted, SECRET_KEY) == "rotated"
        assert Tag.get((Tag.clinic == clinic) & (Tag.name == "vip")).deleted_at is not None


def _break(doc: dict[str, Any], path: list, value: Any) -> dict[str, Any]:
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    "path, value, where",
    [
        (["organization", "slug"], "Bad Slug!", "organization.slug"),
        (["clinics", 0, "timezone"], "Europe/Prag", "clinics[0].timezone"),
        (["clinics", 0, "country"], "XX", "clinics[0].country"),
        (["clinics", 0, "country"], "cz", "clinics[0].country"),
        (["clinics", 0, "officeHours", 2, "weeks"], "third", "clinics[0].officeHours[2].weeks"),
        (["clinics", 0, "officeHours", 0, "opens"], "8:00", "clinics[0].officeHours[0].opens"),
        (["clinics", 0, "officeHours", 0, "weekday"], "monday", "clinics[0].officeHours[0].weekday"),
        (
            ["clinics", 0, "calendars", 0, "vacations", 0, "end"],
            "2026-12-01",
            "clinics[0].calendars[0].vacations[0].end",
        ),
        (
            ["clinics", 0, "calendars", 0, "vacations", 1, "start"],
            "2027-03-10T12:00:00",
            "clinics[0].calendars[0].vacations[1].start",
        ),
        (
            ["clinics", 0, "requestTypes", 0, "defaultPatientTags", 0],
            "no-such-tag",
            "clinics[0].requestTypes[0].defaultPatientTags[0]",
        ),
        (
            ["clinics", 0, "requestTypes", 0, "reservationLength"],
            "thirty",
            "clinics[0].requestTypes[0].reservationLength",
        ),
        (["clinics", 0, "switchboard", "apiUrl"], "http://pbx.example.net", "clinics[0].switchboard.apiUrl"),
        (["patients", 0, "phone"], "not a phone", "patients[0].phone"),
        (["patients", 1, "mergedInto"], "nobody", "patients[1].mergedInto"),
        (["patients", 0, "records", 0, "clinic"], "elsewhere", "patients[0].records[0].clinic"),
        (["patients", 0, "records", 0, "tags", 0], "unknown", "patients[0].records[0].tags[0]"),
        (["patients", 0, "birthDate"], "1980-13-45", "patients[0].birthDate"),
        (["clinics", 1, "slug"], "demo-clinic", "clinics[1].slug"),
        (["clinics", 0, "languages"], ["cs", "xx"], "clinics[0].languages[1]"),
        (["clinics", 0, "languages"], ["cs", "sk", "cs"], "clinics[0].languages[2]"),
        (["clinics", 0, "languages"], [], "clinics[0].languages"),
        (["clinics", 0, "languages"], "cs", "clinics[0].languages"),
        (
            ["clinics", 0, "languages"],
            ["cs", "sk", "en", "de", "pl", "uk", "hu", "ro", "ru", "fr", "it"],
            "clinics[0].languages",
        ),
        (["clinics", 0, "language"], "de", "clinics[0].language"),  # not among languages
        (["clinics", 1, "language"], "xx", "clinics[1].language"),
        (["clinics", 0, "name"], "Demo\x00Clinic", "clinics[0].name"),  # PostgreSQL cannot store NUL
    ],
)
def test_a_bad_file_writes_nothing_and_names_the_field(app, example, config, tmp_path, capsys, path, value, where):
    empty = snapshot()
    bad = _break(example, path, value)
    file = tmp_path / "bad.json"
    file.write_text(json.dumps(bad))
    assert cli(config, "onboard", str(file)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {where}:"), err
    assert snapshot() == empty


def test_a_bad_file_does_not_touch_an_earlier_onboarding(app, example):
    load(example)
    before = snapshot()
    example["clinics"][0]["name"] = "Renamed"
    example["patients"][2]["phone"] = "garbage"
    with pytest.raises(OnboardingError) as info:
        load(example)
    assert info.value.path == "patients[2].phone"
    assert snapshot() == before


def test_merge_cycles_are_refused(app, example):
    example["patients"][0]["mergedInto"] = "jana-novakova-duplicate"
    with pytest.raises(OnboardingError, match="cycle"):
        load(example)


def test_a_clinic_slug_of_another_organization_is_refused(app, example):
    load(example)
    other = {
        "organization": {"slug": "other-org", "name": "Other"},
        "clinics": [{"slug": "demo-clinic", "name": "X", "timezone": "UTC", "country": "GB"}],
    }
    with pytest.raises(OnboardingError) as info:
        load(other)
    assert info.value.path == "clinics[0].slug"


@pytest.mark.parametrize("kind", ["patient", "tag", "calendar", "requestType"])
def test_an_explicit_id_of_another_organization_is_refused_and_the_row_stays(app, example, kind):
    """Upserting by primary key would move the other tenant's row into this organization."""
    load(example)
    with db.connection_context():
        victim = {
            "patient": lambda: Patient.select().join(Organization).where(Organization.slug == "demo-health").first(),
            "tag": lambda: Tag.select().join(Clinic).where(Clinic.slug == "demo-clinic").first(),
            "calendar": lambda: Calendar.select().join(Clinic).where(Clinic.slug == "demo-clinic").first(),
            "requestType": lambda: RequestType.select().join(Clinic).where(Clinic.slug == "demo-clinic").first(),
        }[kind]()
    clinic = {"slug": "other-clinic", "name": "X", "timezone": "UTC", "country": "GB"}
    other: dict[str, Any] = {"organization": {"slug": "other-org", "name": "Other"}, "clinics": [clinic]}
    path = {
        "patient": "patients[0].id",
        "tag": "clinics[0].tags[0].id",
        "calendar": "clinics[0].calendars[0].id",
        "requestType": "clinics[0].requestTypes[0].id",
    }[kind]
    if kind == "patient":
        other["patients"] = [{"id": str(victim.id), "firstName": "Moved"}]
    elif kind == "tag":
        clinic["tags"] = [{"id": str(victim.id), "type": "patient", "name": "moved"}]
    elif kind == "calendar":
        clinic["calendars"] = [{"id": str(victim.id), "name": "moved"}]
    else:
        clinic["requestTypes"] = [{"id": str(victim.id), "ecrfId": "MOVED", "name": "moved"}]
    before = snapshot()
    with pytest.raises(OnboardingError, match="belongs to another organization") as info:
        load(other)
    assert info.value.path == path and str(victim.id) in str(info.value)
    assert snapshot() == before


def test_unreadable_file_is_reported(config, tmp_path, capsys):
    file = tmp_path / "x.json"
    file.write_text("{not json")
    assert cli(config, "onboard", str(file)) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_onboard_succeeds_on_the_example(app, config, capsys):
    assert cli(config, "onboard", str(DEMO_FILE)) == 0
    assert "onboarded demo-health" in capsys.readouterr().err


# --- languages -------------------------------------------------------------------------------


def _languages(slug: str = "demo-clinic") -> tuple[str | None, list[str]]:
    with db.connection_context():
        clinic = Clinic.get(Clinic.slug == slug)
        return clinic.language, clinic.language_list


@pytest.mark.parametrize(
    "codes",
    [
        ["cs"],
        ["uk", "cs", "en"],
        ["sk", "de", "haw", "yue"],
        ["cs", "sk", "en", "de", "pl", "uk", "hu", "ro", "ru", "fr"],
    ],
)
def test_languages_are_stored_in_the_files_order(app, example, codes):
    example["clinics"][0].pop("language")
    example["clinics"][0]["languages"] = codes
    load(example)
    assert _languages() == (None, codes)
    assert "0 change(s)" in load(example)


def test_languages_omitted_or_null_clear_them_like_language(app, example):
    load(example)
    assert _languages() == ("cs", ["cs", "sk", "en"])
    example["clinics"][0]["languages"] = ["en", "cs"]
    load(example)
    assert _languages() == ("cs", ["en", "cs"])
    example["clinics"][0]["languages"] = None
    load(example)
    assert _languages() == ("cs", [])
    example["clinics"][0]["languages"] = ["cs"]
    load(example)
    del example["clinics"][0]["languages"], example["clinics"][0]["language"]
    load(example)
    assert _languages() == (None, [])
    with db.connection_context():
        assert Clinic.get(Clinic.slug == "demo-clinic").languages is None


@pytest.mark.parametrize(
    "codes, where, message",
    [
        (["cs", "xx"], "languages[1]", "'xx' is not a language code whisper.cpp knows"),
        (["CS"], "languages[0]", "'CS' is not a language code whisper.cpp knows"),
        (["cs-CZ"], "languages[0]", "'cs-CZ' is not a language code whisper.cpp knows"),
        (["czech"], "languages[0]", "'czech' is not a language code"),  # whisper.cpp knows the name, not as a code
        (["lao"], "languages[0]", "'lao' is not a language code"),
        (["cs", "en", "cs"], "languages[2]", "duplicate 'cs'"),
        ([], "languages", "should be non-empty"),
        ([""], "languages[0]", "'' is not a language code"),
        ([1], "languages[0]", "1 is not of type 'string'"),
    ],
)
def test_bad_languages_are_refused_with_the_code_named(app, example, codes, where, message):
    load(example)
    before = snapshot()
    example["clinics"][0]["languages"] = codes
    example["clinics"][0]["name"] = "Renamed"
    with pytest.raises(OnboardingError) as info:
        load(example)
    assert info.value.path == f"clinics[0].{where}"
    assert message in str(info.value)
    assert snapshot() == before


def test_language_must_be_one_of_the_languages(app, example):
    example["clinics"][0]["language"] = "en"
    example["clinics"][0]["languages"] = ["cs", "sk"]
    with pytest.raises(OnboardingError, match=r"clinics\[0\]\.language: 'en' is not among languages"):
        load(example)


# --- an old file after console changes ----------------------------------------------------------


def test_a_file_does_not_undo_console_changes_unless_told_to(app, config, capsys):
    """The console's settings pages and the file write the same rows: applying the file
    again after an admin changed the clinic is refused, naming the change, and writes
    nothing; --overwrite-console-changes applies it; after that the file applies again."""
    from onboarding.clinic_settings import ClinicSettings

    assert cli(config, "onboard", str(DEMO_FILE)) == 0
    assert cli(config, "onboard", str(DEMO_FILE)) == 0, "no console change: the file applies again"
    with db.connection_context():
        clinic = Clinic.get(Clinic.slug == "demo-clinic")
        assert clinic.missed_call_requests
        ClinicSettings(clinic, Actor("staff", "anna@example.cz"), SECRET_KEY, clock.now()).set_calls(
            False, clinic.language_list
        )
    capsys.readouterr()
    before = snapshot()

    assert cli(config, "onboard", str(DEMO_FILE)) == 2
    err = capsys.readouterr().err
    assert "demo-clinic: settings.calls.update by staff:anna@example.cz" in err, err
    assert "--overwrite-console-changes" in err
    assert snapshot() == before, "nothing written, not even the file's audit event"

    assert cli(config, "onboard", str(DEMO_FILE), "--overwrite-console-changes") == 0
    with db.connection_context():
        assert Clinic.get(Clinic.slug == "demo-clinic").missed_call_requests, "the file's value again"
        event = AuditEvent.select().where(AuditEvent.action == "onboarding.file").order_by(AuditEvent.id.desc()).first()
        assert event.actor_kind == "operator" and json.loads(event.details) == {"overwroteConsoleChanges": True}
    assert cli(config, "onboard", str(DEMO_FILE)) == 0, "applied since the change: no refusal"


def test_a_clinic_changed_in_the_console_before_any_file_was_recorded_is_refused(app, example, config, tmp_path):
    """A clinic onboarded before the trail recorded files (here: by the writer directly)
    with a console change counts as changed: refusing is the safe side."""
    from onboarding.clinic_settings import ClinicSettings

    load(example)
    with db.connection_context():
        clinic = Clinic.get(Clinic.slug == example["clinics"][1]["slug"])
        ClinicSettings(clinic, Actor("staff", "anna@example.cz"), SECRET_KEY, clock.now()).set_calls(
            not clinic.missed_call_requests, clinic.language_list
        )
    file = tmp_path / "org.json"
    file.write_text(json.dumps(example))
    assert cli(config, "onboard", str(file)) == 2
    other = {"organization": example["organization"], "clinics": [example["clinics"][0]]}
    file.write_text(json.dumps(other))
    assert cli(config, "onboard", str(file)) == 0, "a file without the changed clinic applies"
