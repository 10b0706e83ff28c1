"""A release is named the same everywhere: the package's version, CITATION.cff and CHANGELOG.md's newest release."""

from __future__ import annotations

import re
import tomllib

from ruamel.yaml import YAML

from tests.helpers import REPO


def newest_release(changelog: str) -> tuple[str, str]:
    """(version, date) of the first '## X.Y.Z (YYYY-MM-DD)' heading."""
    found = re.search(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d\d-\d\d)\)", changelog, re.MULTILINE)
    assert found, "CHANGELOG.md has no release heading '## X.Y.Z (YYYY-MM-DD)'"
    return found.group(1), found.group(2)


def test_the_version_and_date_agree_across_the_package_citation_and_changelog():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    citation = YAML(typ="safe").load((REPO / "CITATION.cff").read_text())
    released, date = newest_release((REPO / "CHANGELOG.md").read_text())
    assert (citation["version"], str(citation["date-released"])) == (version, date)
    assert released == version


def test_a_release_heading_is_found_only_in_its_own_form():
    assert newest_release("# Changelog\n\n## Unreleased\n\n## 0.2.0 (2026-11-28)\n") == ("0.2.0", "2026-11-28")
    assert newest_release("## 0.3.0 (2027-01-02)\n## 0.2.0 (2026-11-28)\n")[0] == "0.3.0"
