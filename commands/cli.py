"""The operator running the CLI: who they are in the audit trail, the clinics they name,
and caller-supplied text made safe for their terminal."""

from __future__ import annotations

import getpass
import sys

from models import Actor, Clinic


def actor() -> Actor:
    """Who runs this CLI: its operating-system user (a PaaS one-off process may have none)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "unknown"
    return Actor("operator", name)


def named_clinics(slugs: list[str]) -> list[Clinic] | None:
    """The clinics of `--clinic` options; None, naming the unknown ones on stderr, if any is."""
    clinics = list(Clinic.select().where(Clinic.slug.in_(slugs)))
    missing = set(slugs) - {c.slug for c in clinics}
    if missing:
        print(f"error: unknown clinic(s): {', '.join(sorted(missing))}", file=sys.stderr)
        return None
    return clinics


def visible(text: str) -> str:
    """Caller-supplied text for the operator's terminal: control characters (escape
    sequences, carriage returns, newlines, C1 codes) are written as escapes (`\\x1b`),
    so nothing a switchboard sends can move the cursor, recolour or rewrite the screen."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
