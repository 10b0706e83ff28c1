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
    assert newest_release("# Changelog\n\n## Unreleased\n\n## 0.2.0 (2026-11-28)\n") == ("0.2.0", "2026-11-28")
    assert newest_release("## 0.3.0 (2027-01-02)\n## 0.2.0 (2026-11-28)\n")[0] == "0.3.0"


def test_the_preferred_citation_is_the_paper_the_readme_cites():
    """GitHub's "Cite this repository" and Zenodo offer the preferred-citation: the README's BibTeX's paper."""
    bibtex = re.search(r"@misc\{wang2025raexmc,(.*?)\n\}", (REPO / "README.md").read_text(), re.S).group(1)
    fields = dict(re.findall(r"(\w+)\s*=\s*\{(.*?)\}", bibtex, re.S))
    authors = [name.split(", ") for name in re.split(r"\s+and\s+", " ".join(fields["author"].split()))]
    paper = YAML(typ="safe").load((REPO / "CITATION.cff").read_text())["preferred-citation"]
    assert [[a["family-names"], a["given-names"]] for a in paper["authors"]] == authors
    assert (paper["title"], paper["year"]) == (fields["title"], int(fields["year"]))
    assert paper["identifiers"] == [{"type": "other", "value": f"arXiv:{fields['eprint']}"}]
