"""The bad-input audit as tests: every case of bench/bad_inputs.py's table, run through the real stage, CLI or
server of the tiny project that script builds, must end as its record says a passing case does (one line naming
the file, record or key, no traceback, no output left; or success where the case is a fault that must be survived).

The slow set (`pytest -m 'slow and (not audit or audit_sample)'`, CI's second step) runs one case per stage or
command (AUDIT_SAMPLE, marked audit_sample); `pytest -m audit` runs them all. `python bench/bad_inputs.py`
runs the same cases and records what a user sees in bench/results/bad_inputs.{json,md}.
"""

from __future__ import annotations

import pytest

from bench_scripts import load_bench_module

audit = load_bench_module("bad_inputs.py")
CASES = audit.cases()

# One case per stage or command the audit goes through, each among the cheapest of its kind. Left out: the
# `dvc repro` case (a killed evaluate restored from the run cache), which tests/test_pipeline.py runs as
# test_a_killed_stage_restored_from_the_run_cache_leaves_no_temporary.
AUDIT_SAMPLE = {"rel-abc", "tokenizer-python-only", "embed-batch-0", "embeddings-truncated",
                "params-exact-compressed", "params-lambda-2", "b-sweep-float", "per-instance-truncated",
                "package-b-zero", "predict-empty-query", "alias-unknown", "val-fraction-all", "preset-not-mapping",
                "scores-nan"}


def marks(case) -> list[pytest.MarkDecorator]:
    """Every case is slow (`-m "not slow"` leaves them all out) and part of the audit."""
    return [pytest.mark.slow, pytest.mark.audit] + ([pytest.mark.audit_sample] if case.name in AUDIT_SAMPLE else [])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny project every case breaks a copy of something in (a `dvc repro` of the whole DAG)."""
    return audit.build_project(tmp_path_factory.mktemp("bad-inputs"))


@pytest.fixture(scope="module")
def served(built):
    """The answers of one real `raexmc serve` to the audit's bad requests."""
    return audit.serve_requests(built)


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name, marks=marks(case)) for case in CASES])
def test_bad_input(case, built, request):
    outcome = request.getfixturevalue("served")[case.name] if case.run is None else case.run(built)
    verdict = audit.verdict(case, outcome)
    if verdict == "skipped":
        pytest.skip(outcome.last_line)
    assert verdict == "ok", f"{case.what}: exit {outcome.code}, traceback {outcome.traceback}, output left " \
                            f"{outcome.output_left}, must name {case.names!r}: {outcome.last_line}"


def test_the_sample_covers_every_stage_and_command_but_dvc_repro():
    assert AUDIT_SAMPLE <= {case.name for case in CASES}
    by_kind = {case.through for case in CASES if case.name in AUDIT_SAMPLE}
    assert by_kind == {case.through for case in CASES} - {"dvc repro"}
    assert len(by_kind) == len(AUDIT_SAMPLE), "one case per stage or command"
