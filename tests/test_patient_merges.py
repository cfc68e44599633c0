"""Following merges (models.Patient): the one walk along merge chains that the 410's
`mergedInto` (patient_directory.py) and the switchboard's caller lookup both use."""

from __future__ import annotations

import uuid

from models import Organization, Patient
from plumbing.database import db


def patients(*merges: tuple[str, str | None]) -> dict[str, Patient]:
    """Patients by name, each merged into the one named beside it (None: not merged)."""
    org = Organization.create(slug=f"merges-{uuid.uuid4().hex[:8]}", name="Merges")
    made = {name: Patient.create(organization=org, last_name=name) for name, _ in merges}
    for name, into in merges:
        if into is not None:
            Patient.update(merged_into=made[into].id).where(Patient.id == made[name].id).execute()
    return {name: Patient.get_by_id(p.id) for name, p in made.items()}


def test_a_merge_chain_is_followed_to_its_end(app):
    with db.connection_context():
        p = patients(("old", "older"), ("older", "kept"), ("kept", None), ("other", None))
        assert p["old"].survivor_id() == p["older"].survivor_id() == p["kept"].id
        assert p["kept"].survivor_id() == p["kept"].id
        assert sorted(Patient.with_survivors([p["old"].id])) == sorted([p["old"].id, p["older"].id, p["kept"].id])
        assert Patient.merge_links([p["old"].id, p["other"].id]) == {
            p["old"].id: p["older"].id,
            p["older"].id: p["kept"].id,
        }


def test_a_merge_cycle_ends_at_the_last_patient_before_it_comes_back(app):
    with db.connection_context():
        p = patients(("a", "b"), ("b", "c"), ("c", "a"))
        assert p["a"].survivor_id() == p["c"].id
        assert p["b"].survivor_id() == p["a"].id
        assert sorted(Patient.with_survivors([p["a"].id])) == sorted(x.id for x in p.values())
