"""The tiny project the bad-input audit breaks things in: the checkout's files in a fresh git repo, set to a 5-label
LF dataset and a random 2-layer encoder with MiniLM's tokenizer, built once with `dvc repro`; and what a user saw
when a command ran in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import REPO, copy_project_files, load_module, set_params, write_jsonl_gz

PYTHON = sys.executable


@dataclass
class Outcome:
    """What a user saw: exit code (or HTTP status), the last stderr line (or the HTTP message)."""
    code: int
    last_line: str
    traceback: bool
    output_left: bool = False
    detail: dict = field(default_factory=dict)


class Project:
    """A tiny built project in a temp folder, and the ways to run things in it."""

    def __init__(self, root: Path, lf: Path):
        self.root, self.lf = root, lf
        self.env = {**os.environ, "PATH": f"{Path(PYTHON).parent}{os.pathsep}{os.environ['PATH']}",
                    "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}", "PYTHONPATH": str(REPO / "src")}
        self.scratch = Path(tempfile.mkdtemp(prefix="case-", dir=root.parent))

    def fresh(self, name: str) -> Path:
        folder = self.scratch / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return folder

    def params(self, folder: Path, **updates) -> Path:
        """A copy of the project's params.yaml and catalogues in `folder` with `updates` (dotted keys) applied."""
        shutil.copy(self.root / "params.yaml", folder / "params.yaml")
        shutil.copy(self.root / "presets.yaml", folder / "presets.yaml")
        shutil.copytree(self.root / "datasets", folder / "datasets", dirs_exist_ok=True)
        set_params(folder, **updates)
        return folder / "params.yaml"

    def run(self, args: list[str], stdin: bytes | None = None, env: dict | None = None,
            output: Path | None = None) -> Outcome:
        proc = subprocess.run(args, cwd=self.root, env={**self.env, **(env or {})}, input=stdin,
                              capture_output=True, timeout=900)
        return seen(proc.returncode, proc.stderr, output)

    def stage(self, script: str, params: Path, **options: str | Path) -> Outcome:
        args = [PYTHON, f"stages/{script}.py", "--params", str(params)]
        for key, value in options.items():
            args += [f"--{key}", str(value)]
        return self.run(args, output=Path(options["out"]) if "out" in options else None)


def seen(code: int, stderr: bytes, output: Path | None = None) -> Outcome:
    """The Outcome of a command that ended with `code` and wrote `stderr`, failing with `output` left or not."""
    text = stderr.decode("utf-8", "replace")
    lines = [line for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return Outcome(code, lines[-1] if lines else "", "Traceback" in text,
                   output is not None and output.exists() and code != 0, {"stderr_lines": len(lines)})


def build_project(workdir: Path) -> Project:
    """The project's files in a fresh git repo, set to a tiny LF dataset and a tiny random encoder."""
    make_tiny_encoder = load_module(REPO / "scripts/make_tiny_encoder.py").make_tiny_encoder
    repo = copy_project_files(workdir / "repo")
    lf = workdir / "lf"
    lf.mkdir()
    labels = ["python", "perl", "unix", "linux", "compiler"]
    write_jsonl_gz(lf / "lbl.json.gz", [{"uid": f"l{i}", "title": t, "content": ""} for i, t in enumerate(labels)])
    train = [("cpython", [0, 4]), ("awk", [1, 2]), ("gnu", [2, 3]), ("gcc", [4]), ("jruby", [0, 1]), ("bsd", [2])]
    test = [("jython", [0]), ("minix", [2, 3]), ("clang", [4])]
    for file, rows in (("trn.json.gz", train), ("tst.json.gz", test)):
        write_jsonl_gz(lf / file, [{"uid": f"{file[0]}{i}", "title": t, "content": f"about {t}", "target_ind": ids,
                                    "target_rel": [1.0] * len(ids)} for i, (t, ids) in enumerate(rows)])
    encoder = make_tiny_encoder(workdir / "encoder", hidden=32, layers=2, heads=2, intermediate=64, max_len=128, seed=0)
    project = Project(repo, lf)
    set_params(repo, **{"data.name": "tiny", "datasets.tiny": {"source": "local", "path": str(lf)},
                        "encoder.name": str(encoder), "tokenize.input_max_len": 16, "infer.b": 8,
                        "infer.val_fraction": 0.34, "index.M": 8, "index.ef_construction": 16})
    for args in (["git", "init", "-q"], ["git", "add", "-A"],
                 ["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "tiny"],
                 [PYTHON, "-m", "dvc", "repro", "-q"]):
        proc = subprocess.run(args, cwd=repo, env=project.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building the tiny project: {' '.join(args[-3:])} failed:\n{proc.stdout}{proc.stderr}")
    return project
