"""The versions, here and nowhere else (semantic versioning, https://semver.org): the
service's release, and the API's, which is the OpenAPI document's `info.version` (its
major is the path's `v1`). CHANGELOG.md names both for each release and holds the policy
by which they move; tests/test_versions.py holds the changelog, the document and these
together."""

from __future__ import annotations

#: The service's release: what an operator deploys and upgrades (CHANGELOG.md's headings).
SERVICE = "1.0.0"
#: The API integrators program against: a change they can see moves it (CHANGELOG.md, policy).
API = "1.0.0"
