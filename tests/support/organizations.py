"""pytest plugin: the organizations a test starts from, as fixtures.

- `two_clinics`: one organization with the clinics `clinic-a` and `clinic-b`;
- `org`: the signed-documents data set (`live_service.signing_organization`) and tokens
  for it: `write` (clinic-a, read and write), `read` (clinic-a, read only) and
  `b` (clinic-b, read and write).
"""

from __future__ import annotations

import pytest

from tests.support import clinic, issue_token, load, organization
from tests.support.live_service import signing_organization


@pytest.fixture
def two_clinics(app) -> None:
    load(organization(clinic("clinic-a"), clinic("clinic-b")))


@pytest.fixture
def org(app) -> dict[str, str]:
    load(signing_organization())
    return {
        "write": issue_token(["clinic-a"], ["read", "write"]),
        "read": issue_token(["clinic-a"], ["read"]),
        "b": issue_token(["clinic-b"], ["read", "write"]),
    }
