"""The bad-input audit: every case of tests/audit/cases.py, run through the real stage, CLI or server of the tiny
project tests/audit/project.py builds, must end as a passing case does (one line naming the file, record or key,
no traceback, no output left; or success where the case is a fault that must be survived).

The slow set (`pytest -m 'slow and (not audit or audit_sample)'`, CI's second step) runs one case per stage or
command (AUDIT_SAMPLE, marked audit_sample); `pytest -m audit` runs them all. `--audit-record
bench/results/bad_inputs.json` also records what a user saw in each case that ran, as JSON and as a Markdown table
beside it (`.md`).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.audit.cases import Case, cases, serve_requests, verdict
from tests.audit.project import Outcome, build_project

CASES = cases()

# One case per stage or command the audit goes through, each among the cheapest of its kind. Left out: the
# `dvc repro` case (a killed evaluate restored from the run cache), which tests/test_pipeline.py runs as
# test_a_killed_stage_restored_from_the_run_cache_leaves_no_temporary.
AUDIT_SAMPLE = {"rel-abc", "tokenizer-python-only", "embed-batch-0", "embeddings-truncated",
                "memory-seed-negative", "params-lambda-2", "b-sweep-float", "per-instance-truncated",
                "package-b-zero", "predict-device-bad", "alias-unknown", "val-fraction-all", "preset-not-mapping",
                "scores-nan"}


def marks(case) -> list[pytest.MarkDecorator]:
    """Every case is slow (`-m "not slow"` leaves them all out) and part of the audit."""
    return [pytest.mark.slow, pytest.mark.audit] + ([pytest.mark.audit_sample] if case.name in AUDIT_SAMPLE else [])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny project every case breaks a copy of something in (a `dvc repro` of the whole DAG)."""
    return build_project(tmp_path_factory.mktemp("bad-inputs"))


@pytest.fixture(scope="module")
def served(built):
    """The answers of one real `raexmc serve` to the audit's bad requests."""
    return serve_requests(built)


@pytest.fixture(scope="module")
def record(request):
    """The rows of the cases that ran, written where --audit-record asks once the module's cases are done."""
    rows: list[dict] = []
    yield rows
    out = request.config.getoption("--audit-record")
    if out and rows:
        write_record(rows, shlex.join(["python", "-m", "pytest", *request.config.invocation_params.args]), Path(out))


def row(case: Case, outcome: Outcome, judged: str) -> dict:
    return {"case": case.name, "through": case.through, "what": case.what, "code": outcome.code,
            "traceback": outcome.traceback, "output_left": outcome.output_left, "line": outcome.last_line[:300],
            "must_name": case.names, "verdict": judged, **outcome.detail}


def write_record(rows: list[dict], command: str, out: Path) -> None:
    """The rows as JSON at `out` and as a Markdown table beside it (`.md`)."""
    out.write_text(json.dumps({"rows": rows, "command": command}, indent=2) + "\n")
    table = ["| case | through | exit / HTTP | verdict | what the user sees |", "|---|---|---|---|---|"]
    table += [f"| {r['case']} | {r['through']} | {r['code']} | {r['verdict']} | `{r['line'][:140].replace('|', '/')}` |"
              for r in rows]
    out.with_suffix(".md").write_text(f"Recorded with `{command}`.\n\n" + "\n".join(table) + "\n")


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name, marks=marks(case)) for case in CASES])
def test_bad_input(case, built, record, request):
    outcome = request.getfixturevalue("served")[case.name] if case.run is None else case.run(built)
    judged = verdict(case, outcome)
    record.append(row(case, outcome, judged))
    if judged == "skipped":
        pytest.skip(outcome.last_line)
    assert judged == "ok", f"{case.what}: exit {outcome.code}, traceback {outcome.traceback}, output left " \
                           f"{outcome.output_left}, must name {case.names!r}: {outcome.last_line}"


def test_the_sample_covers_every_stage_and_command_but_dvc_repro():
    assert AUDIT_SAMPLE <= {case.name for case in CASES}
    by_kind = {case.through for case in CASES if case.name in AUDIT_SAMPLE}
    assert by_kind == {case.through for case in CASES} - {"dvc repro"}
    assert len(by_kind) == len(AUDIT_SAMPLE), "one case per stage or command"
