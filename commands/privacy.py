"""`patient erase|copy` and `retention show|set|run`: a patient's data erased or copied for
them, and each clinic's retention (docs/data-protection.md). The same rules as the console's
(privacy/)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import uuid
from pathlib import Path

from commands.cli import actor, named_clinics, visible
from config import Config
from models import Clinic
from plumbing.errors import NotFound

# The options of `retention set`: (option, the onboarding key).
_RETENTION_OPTIONS = (
    ("--resolved-call-requests-days", "resolvedCallRequestsDays"),
    ("--calls-without-request-days", "callsWithoutRequestDays"),
    ("--audit-details-days", "auditDetailsDays"),
    ("--signed-documents-days", "signedDocumentsDays"),
    ("--resolved-api-requests-days", "resolvedApiRequestsDays"),
    ("--read-trail-days", "readTrailDays"),
)


def _patient_id(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        print(f"error: not a patient id: {visible(text)}", file=sys.stderr)
        return None


def cmd_patient_erase(config: Config, args: argparse.Namespace) -> int:
    """Erase a patient: say what will go, ask (unless --yes), then erase."""
    from privacy import erasure
    from storage import make_storage

    wanted = _patient_id(args.patient_id)
    if wanted is None:
        return 2
    storage = make_storage(config)
    try:
        plan = erasure.plan(wanted)
    except NotFound:
        # Erased already (or never was): nothing to do, but objects an interrupted erasure
        # listed are deleted all the same.
        from privacy import object_deletion

        object_deletion.drain(storage)
        print(f"no patient {wanted}: nothing to erase", file=sys.stderr)
        return 0
    kept = 0 if args.include_documents else len(plan.requests_with_documents())
    print(
        f"erasing patient {plan.patient.id} ({len(plan.patients)} row(s) with merged ones) in organization "
        f"{plan.organization.slug}: {len(plan.records)} record(s), {len(plan.requests) - kept} request(s), "
        f"{len(plan.calls)} call(s), {plan.external_ids} external id(s), "
        + (
            f"{len(plan.documents)} signed document(s)"
            if args.include_documents
            else f"kept for their {len(plan.documents)} signed document(s): {kept} request(s)"
        ),
        file=sys.stderr,
    )
    if not args.yes:
        print("type 'erase' to go on: ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip() != "erase":
            print("not erased", file=sys.stderr)
            return 1
    erased = erasure.erase(wanted, actor(), config.clock(), storage, include_documents=args.include_documents)
    print("erased: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in erased.counts().items()), file=sys.stderr)
    return 0


def cmd_patient_copy(config: Config, args: argparse.Namespace) -> int:
    """Write the patient's copy (a ZIP archive) to --out."""
    from privacy import patient_copy
    from storage import make_storage

    wanted = _patient_id(args.patient_id)
    if wanted is None:
        return 2
    out = Path(args.out)
    partial = out.with_name(out.name + ".part")
    try:
        with open(partial, "wb") as target:
            made = patient_copy.write_copy(
                wanted, target, make_storage(config), actor(), config.clock(), language=args.language
            )
    except NotFound:
        partial.unlink(missing_ok=True)
        print(f"error: no patient {wanted}", file=sys.stderr)
        return 2
    partial.replace(out)
    print(
        f"wrote {out}: {made.requests} request(s), {made.calls} call(s), {made.transcripts} transcript(s), "
        f"{made.documents} signed document(s)",
        file=sys.stderr,
    )
    return 0


def _days_text(days: int | None) -> str:
    return "kept" if days is None else f"{days} days"


def cmd_retention_show(config: Config, args: argparse.Namespace) -> int:
    from privacy.retention import settings_of

    clinics = named_clinics(args.clinic) if args.clinic else list(Clinic.select().order_by(Clinic.slug))
    if clinics is None:
        return 2
    for clinic in clinics:
        settings = settings_of(clinic)
        print(clinic.slug + ": " + ", ".join(f"{key} {_days_text(value)}" for key, value in settings.items()))
    print(f"events of no clinic: addresses kept {config.retention_audit_details_days} days")
    return 0


def cmd_retention_set(config: Config, args: argparse.Namespace) -> int:
    from onboarding.clinic_settings import ClinicSettings, SettingsError

    clinics = named_clinics([args.clinic])
    if clinics is None:
        return 2
    days: dict[str, int | None] = {}
    for option, key in _RETENTION_OPTIONS:
        given = getattr(args, option.lstrip("-").replace("-", "_"))
        if given is None:
            continue
        if given == "keep":
            days[key] = None
        elif given.isdigit():
            days[key] = int(given)
        else:
            print(f"error: {option}: a number of days or 'keep', not {visible(given)}", file=sys.stderr)
            return 2
    if not days:
        print("error: name at least one period to set", file=sys.stderr)
        return 2
    try:
        ClinicSettings(clinics[0], actor(), config.secret_key, config.clock()).set_retention(days)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return cmd_retention_show(config, argparse.Namespace(clinic=[args.clinic]))


def cmd_retention_run(config: Config, args: argparse.Namespace) -> int:
    """What every worker does each purge round, once (counted in the service's metrics)."""
    from jobs import queueing
    from jobs.storage_purge import retain
    from plumbing.metrics import Recorder
    from storage import make_storage

    recorder = Recorder()
    deleted = retain(make_storage(config), config, recorder)
    recorder.flush(queueing.redis_client(config.redis_url, "metrics"))  # Redis away: a warning, the rows are gone
    counts = dataclasses.asdict(deleted)
    print("retention deleted: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items()), file=sys.stderr)
    return 0


def cmd_offboard(config: Config, args: argparse.Namespace) -> int:
    """A clinic's (or an organization's) data as one archive, then erased everywhere."""
    from models import Organization
    from privacy import offboarding
    from storage import make_storage

    organization = None
    if args.organization:
        organization = Organization.get_or_none(Organization.slug == args.organization)
        if organization is None:
            print(f"error: unknown organization: {visible(args.organization)}", file=sys.stderr)
            return 2
        clinics = list(Clinic.select().where(Clinic.organization == organization.id).order_by(Clinic.slug))
    else:
        clinic = Clinic.get_or_none(Clinic.slug == args.clinic)
        if clinic is None:
            print(f"error: unknown clinic: {visible(args.clinic)}", file=sys.stderr)
            return 2
        clinics = [clinic]
    storage, now = make_storage(config), config.clock()
    out = Path(args.archive)
    partial = out.with_name(out.name + ".part")
    with open(partial, "wb") as target:
        documents = offboarding.write_archive(clinics, target, storage, now)
    partial.replace(out)
    print(f"wrote {out}: {len(clinics)} clinic(s), {documents} signed document(s)", file=sys.stderr)
    if not args.yes:
        print("type 'erase' to erase everything archived: ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip() != "erase":
            print("archived, not erased", file=sys.stderr)
            return 1
    if args.organization:
        assert organization is not None
        done = offboarding.erase_organization(organization, actor(), now, storage)
    else:
        done = offboarding.erase_clinic(clinics[0], actor(), now, storage)
    print("erased: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(done.counts.items())), file=sys.stderr)
    print("left: the backups until they age out, the operator's logs (ids only)", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    patient = sub.add_parser("patient", help="a patient's data: erase it, or copy it for them").add_subparsers(
        dest="patient_command", required=True
    )
    erase = patient.add_parser("erase", help="erase a patient (and the rows merged into it) everywhere")
    erase.add_argument("patient_id")
    erase.add_argument(
        "--include-documents", action="store_true", help="erase the signed documents too (medical documentation)"
    )
    erase.add_argument("--yes", action="store_true", help="do not ask")
    erase.set_defaults(func=cmd_patient_erase, needs_secret=True)
    copy = patient.add_parser("copy", help="write a patient's copy of their data (a ZIP archive)")
    copy.add_argument("patient_id")
    copy.add_argument("--out", required=True, metavar="FILE.zip")
    copy.add_argument(
        "--language", choices=("cs", "en"), default="cs", help="the language of the service's own words in it"
    )
    copy.set_defaults(func=cmd_patient_copy, needs_secret=True)

    retention = sub.add_parser("retention", help="how long each clinic keeps personal data").add_subparsers(
        dest="retention_command", required=True
    )
    show = retention.add_parser("show", help="each clinic's retention")
    show.add_argument("--clinic", action="append", metavar="SLUG")
    show.set_defaults(func=cmd_retention_show)
    change = retention.add_parser("set", help="a clinic's retention: days, or 'keep'")
    change.add_argument("--clinic", required=True, metavar="SLUG")
    for option, _key in _RETENTION_OPTIONS:
        change.add_argument(option, metavar="DAYS|keep")
    change.set_defaults(func=cmd_retention_set, needs_secret=True)
    run = retention.add_parser("run", help="one retention round now (every worker runs one each purge round)")
    run.set_defaults(func=cmd_retention_run, needs_secret=True)

    offboard = sub.add_parser("offboard", help="a clinic's or organization's data as one archive, then erased")
    which = offboard.add_mutually_exclusive_group(required=True)
    which.add_argument("--clinic", metavar="SLUG")
    which.add_argument("--organization", metavar="SLUG")
    offboard.add_argument("--archive", required=True, metavar="FILE.zip", help="where the archive is written first")
    offboard.add_argument("--yes", action="store_true", help="do not ask before erasing")
    offboard.set_defaults(func=cmd_offboard, needs_secret=True)
