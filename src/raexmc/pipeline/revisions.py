"""The files of a run as git holds them at a revision, a DVC experiment (refs/exps/<baseline>/<name>) or the
working tree: the headline rows and significance.json are committed (`cache: false`), so git alone answers.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from ..errors import DataError

WORKSPACE = "workspace"  # the working tree, as `dvc exp show` calls it
FileReader = Callable[[str], "str | None"]  # a path relative to the project -> its text, or None where it is absent


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def experiment_commit(root: Path, name: str) -> str:
    """The commit of DVC experiment `name`, or a DataError saying that there is none, or several."""
    refs = _git(root, "for-each-ref", "--format=%(objectname) %(refname)", "refs/exps/").stdout.split("\n")
    found = sorted({line.split()[0] for line in refs if line.endswith(f"/{name}") and line.count("/") == 4})
    if not found:
        raise DataError(f"no DVC experiment named '{name}' (`dvc exp list -A` lists them)", root)
    if len(found) > 1:
        raise DataError(f"'{name}' names experiments of {len(found)} baselines ({', '.join(c[:7] for c in found)}): "
                        "give one with --rev", root)
    return found[0]


def revision_commit(root: Path, rev: str) -> str:
    """The commit that git revision `rev` (a sha, branch, tag, HEAD~1...) names, or a DataError."""
    proc = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if proc.returncode != 0:
        raise DataError(f"'{rev}' is no git revision of this project", root)
    return proc.stdout.strip()


def files_of(root: Path, commit: str | None) -> FileReader:
    """A reader of the files of `commit` in the project at `root`, or of its working tree where `commit` is None."""
    def committed(path: str) -> str | None:
        proc = _git(root, "show", f"{commit}:{path}")
        return proc.stdout if proc.returncode == 0 else None

    def working(path: str) -> str | None:
        file = root / path
        return file.read_text(encoding="utf-8") if file.is_file() else None
    return working if commit is None else committed
