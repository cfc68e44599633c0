"""The service's own patients and notes in the reader's words.

The rows keep fixed English markers (models/patients.py: `Patient.UNKNOWN_CALLER`,
`Patient.ERASED_NAME`, `PatientRecord.FROM_A_CALL`): an existing deployment's rows hold them
and the API answers them as stored. They are codes: every console page that names a patient
names such a patient in the reader's language through here, never as stored."""

from __future__ import annotations

import functools
import gettext

from console.rendering import LANGUAGES, N_, catalogues
from models import Patient, PatientRecord

#: Each marker's words (translated where shown).
WORDS = {
    Patient.MARKER_UNKNOWN_CALLER: N_("unknown caller"),
    Patient.MARKER_ERASED: N_("erased patient"),
    PatientRecord.MARKER_FROM_A_CALL: N_("Created from a phone call."),
}


@functools.cache
def _translations() -> dict[str, gettext.NullTranslations]:
    return catalogues()


def marker_words(marker: str, language: str) -> str:
    """A marker's words in `language` (the console's default for one it does not have)."""
    tr = _translations()
    return (tr.get(language) or tr[LANGUAGES[0]]).gettext(WORDS[marker])


def shown_name(patient: Patient, language: str) -> str:
    """A patient's name as the console shows it: the stored name of a person ("" for a
    person with none: the page shows the number), the reader's words for one of the
    service's own patients."""
    marker = patient.marker
    return marker_words(marker, language) if marker else patient.person_name
