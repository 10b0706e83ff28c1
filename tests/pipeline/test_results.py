"""The headline rows DVC shows (RAE's and its baselines' key metrics, p-values as text) and `raexmc results`: the key
metrics and tests of a run as a short table, read from hand-made outputs; runs side by side."""

from __future__ import annotations

import json
import os
import shlex

import pytest

from raexmc.errors import DataError
from raexmc.pipeline.results import RunResults, method_rows, p_value_rows, run_results, side_by_side, write_rows
from tests.helpers import REPO, commit_all, dvc, raexmc, sh

ROW = {"P@1": 52.21, "P@5": 24.13, "nDCG@5": 40.5, "PSP@5": 30.0, "R@100": 79.8, "macro-F1@5": {"tail": 21.17}}


def write_run(folder, p_value, log10_p, knn_tau=0.04, tau_auto=False, retrieval=("joint", None)):
    (folder / "eval").mkdir(parents=True)
    (folder / "tune").mkdir()
    (folder / "tune" / "selection.json").write_text(json.dumps({"retrieval": retrieval[0], "label_share": retrieval[1],
                                                                "lambda": 0.5, "tau": 0.04}))
    metrics = {"rae": ROW, "dual_encoder": {**ROW, "P@1": 36.75}, "knn": {**ROW, "P@1": 45.84, "tau": knn_tau},
               "selection": {"auto": {"lambda": True, "tau": tau_auto}, "lambda": 0.5, "tau": 0.04, "metric": "P@1"},
               "retrieval": {"depth": 200}}
    (folder / "eval" / "metrics.json").write_text(json.dumps(metrics))
    test = {"mean_diff": 15.46, "p_value": p_value, "log10_p": log10_p}
    (folder / "significance.json").write_text(json.dumps({"rae_vs_dual_encoder": {"P@1": test}}))


def results(tmp_path):
    return raexmc("results", "--name", "run", "--artifacts", tmp_path, cwd=REPO)


def test_table_rows_and_tests_knn_s_own_tau_a_split_s_label_share_an_underflowed_p_and_missing_outputs(tmp_path):
    write_run(tmp_path / "a" / "run", 3.95e-16, -15.4)
    proc = results(tmp_path / "a")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "λ = 0.5, τ = 0.04 (lambda chosen on validation P@1); retrieval joint; kNN τ = 0.04"
    assert lines[1].split() == ["method", "P@1", "P@5", "nDCG@5", "PSP@5", "R@100", "F1@5", "tail"]
    assert lines[2].split() == ["rae", "52.21", "24.13", "40.50", "30.00", "79.80", "21.17"]
    assert lines[3].split()[:2] == ["dual_encoder", "36.75"] and lines[4].split()[:2] == ["knn", "45.84"]
    assert lines[5] == "rae vs dual_encoder: P@1 +15.46 (p 4.0e-16)"
    assert max(len(line) for line in lines) <= 100
    write_run(tmp_path / "b" / "run", 0.0, -616.4, knn_tau=0.1, tau_auto=True, retrieval=("split", 0.25))
    lines = results(tmp_path / "b").stdout.splitlines()
    assert lines[0] == ("λ = 0.5, τ = 0.04 (lambda and tau chosen on validation P@1); retrieval split, label_share "
                        "0.25; kNN τ = 0.1")
    assert lines[-1] == "rae vs dual_encoder: P@1 +15.46 (p 4.0e-617)"  # 10^-616.4 = 10^0.6 * 10^-617, not 0
    # missing outputs, or outputs of no method, are one line
    for metrics, line in ((None, "not found: run `dvc repro` (or the evaluate and significance stages) first"),
                          ({"retrieval": {"depth": 200}},
                           "holds none of the methods rae, dual_encoder, knn")):
        folder = tmp_path / ("c" if metrics is None else "d")
        if metrics is not None:
            (folder / "run" / "eval").mkdir(parents=True)
            (folder / "run" / "eval" / "metrics.json").write_text(json.dumps(metrics))
            (folder / "run" / "significance.json").write_text("{}")
        proc = results(folder)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [f"DataError: {folder}/run/eval/metrics.json: {line}"]


# A pipeline of one stage that writes the headline files of the toy dataset as the significance stage would, from
# infer.lambda: hand-chosen values per λ, so every number below is known without running anything of raexmc.
TOY_STAGE = '''
import json, pathlib, yaml
lam = yaml.safe_load(open("params.yaml"))["infer"]["lambda"]
rae_p1, diff, p, log10_p = {0.1: (51.0, 11.5, 2.5e-3, -2.60206), 0.5: (55.0, 15.25, 4.0e-16, -15.39794),
                            0.9: (59.0, 19.0, 0.0, -400.3)}[lam]
rows = {"rae": {"P@1": rae_p1, "P@5": 24.0, "nDCG@5": 40.0, "PSP@5": 30.0, "R@100": 80.0, "lambda": lam,
                "tau": 0.04},
        "dual_encoder": {"P@1": 39.5, "P@5": 18.0, "nDCG@5": 33.0, "PSP@5": 22.0, "R@100": 70.0},
        "knn": {"P@1": 45.0, "P@5": 21.0, "nDCG@5": 37.0, "PSP@5": 26.0, "R@100": 75.0, "tau": 0.1}}
pathlib.Path("metrics/toy").mkdir(parents=True, exist_ok=True)
for name, row in rows.items():
    pathlib.Path(f"metrics/toy/{name}.json").write_text(json.dumps(row))
pathlib.Path("artifacts/toy").mkdir(parents=True, exist_ok=True)
test = {"mean_diff": diff, "p_value": p, "log10_p": log10_p, "n": 100}
pathlib.Path("artifacts/toy/significance.json").write_text(json.dumps(
    {"rae_vs_dual_encoder": {"P@1": test}, "rae_vs_knn": {"P@1": {**test, "mean_diff": 6.0}}}))
'''
# the settings the README's `dvc exp show` keeps, under the names params.yaml gives them; the stage reads λ alone
TOY_PARAMS = """data:
  name: toy
encoder:
  mode: zero-shot
memory:
  keep: 1.0
  keep_grid: [1.0, 0.5]
infer:
  lambda: 0.5
  lambda_sweep: [0.1, 0.5]
  b: 200
  retrieval: joint
  label_share: 0.5
  label_share_grid: [0.25, 0.5]
  tau: 0.04
  tau_grid: [0.04, 0.1]
"""
TOY_DVC = """stages:
  headline:
    cmd: python toy.py
    deps: [toy.py]
    params: [encoder, memory, infer]
    outs:
"""
TOY_OUTS = ["metrics/toy/rae.json", "metrics/toy/dual_encoder.json", "metrics/toy/knn.json",
            "artifacts/toy/significance.json"]


@pytest.fixture(scope="module")
def toy_repo(tmp_path_factory):
    """A real git and DVC project, reproduced at λ 0.5 and committed, then two real experiments: `low` (λ 0.1)
    and `high` (λ 0.9, left in the workspace)."""
    repo = tmp_path_factory.mktemp("toy")
    (repo / "params.yaml").write_text(TOY_PARAMS)
    (repo / "toy.py").write_text(TOY_STAGE)
    (repo / "dvc.yaml").write_text(TOY_DVC + "".join(f"      - {out}:\n          cache: false\n" for out in TOY_OUTS)
                                   + "metrics:\n  - metrics/toy\n")  # as the project's dvc.yaml declares them
    sh("git", "init", "-q", cwd=repo)
    dvc("init", "-q", cwd=repo)
    commit_all(repo, "toy pipeline, not run")
    dvc("repro", "-q", cwd=repo)
    commit_all(repo, "toy pipeline at λ 0.5")
    dvc("exp", "run", "-q", "-n", "low", "-S", "infer.lambda=0.1", cwd=repo)
    dvc("exp", "run", "-q", "-n", "high", "-S", "infer.lambda=0.9", cwd=repo)
    return repo


def results_of(repo, *args):
    return raexmc("results", *args, cwd=repo, env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def readme_exp_show() -> list[str]:
    """The README's `dvc exp show` recipe, as its words."""
    [line] = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("dvc exp show ")]
    return shlex.split(line.split("  #")[0])


@pytest.mark.slow
def test_runs_side_by_side_as_json_refused_in_one_line_and_the_readme_s_exp_show(toy_repo):
    """Experiments and revisions side by side; the JSON has the p-values as numbers with their log10; a run that
    cannot be read is one line. The README's `dvc exp show` filter dropped kNN's τ, the retrieval, label_share and
    keep: run on real experiments, it keeps them (and RAE's λ and τ as used), and no grid."""
    proc = results_of(toy_repo, "--exp", "low", "--exp", "high", "--rev", "HEAD", "--rev", "workspace")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["low", "high", "HEAD", "workspace"]
    rows = {" ".join(line.split()[:-4]): line.split()[-4:] for line in lines[1:]}
    assert rows["dataset"] == ["toy"] * 4
    assert rows["λ (RAE)"] == ["0.1", "0.9", "0.5", "0.9"]
    assert rows["τ (RAE)"] == ["0.04"] * 4 and rows["τ (kNN)"] == ["0.1"] * 4
    assert rows["rae P@1"] == ["51.00", "59.00", "55.00", "59.00"]
    assert rows["dual_encoder P@1"] == ["39.50"] * 4 and rows["knn R@100"] == ["75.00"] * 4
    assert rows["rae vs dual_encoder P@1 Δ"] == ["+11.50", "+19.00", "+15.25", "+19.00"]
    assert rows["rae vs dual_encoder P@1 p"] == ["2.5e-03", "5.0e-401", "4.0e-16", "5.0e-401"]  # 10^0.7 = 5.0
    assert rows["rae vs knn P@1 Δ"] == ["+6.00"] * 4
    assert len(lines) == 1 + 4 + 15 + 4 and max(len(line) for line in lines) <= 120

    proc = results_of(toy_repo, "--exp", "high", "--rev", "HEAD", "--json")
    assert proc.returncode == 0, proc.stderr
    high, head = json.loads(proc.stdout)["runs"]
    commit = sh("git", "rev-parse", "HEAD", cwd=toy_repo).stdout.strip()
    assert (head["name"], head["commit"], head["dataset"]) == ("HEAD", commit, "toy")
    assert (high["lambda"], high["tau"], high["knn_tau"]) == (0.9, 0.04, 0.1)
    assert high["metrics"]["rae"] == {"P@1": 59.0, "P@5": 24.0, "nDCG@5": 40.0, "PSP@5": 30.0, "R@100": 80.0}
    assert high["tests"]["rae_vs_dual_encoder"]["P@1"] == {"mean_diff": 19.0, "p_value": 0.0, "log10_p": -400.3}
    assert head["tests"]["rae_vs_knn"]["P@1"] == {"mean_diff": 6.0, "p_value": 4.0e-16, "log10_p": -15.39794}

    first = sh("git", "rev-parse", "--short=7", "HEAD~1", cwd=toy_repo).stdout.strip()
    for args, line in ((["--exp", "nope"], f"{toy_repo}: no DVC experiment named 'nope' (`dvc exp list -A` lists "
                                           "them)"),
                       (["--rev", "no-such-branch"], f"{toy_repo}: 'no-such-branch' is no git revision of this "
                                                     "project"),
                       (["--rev", "HEAD~1"], f"metrics/toy/rae.json: not in HEAD~1 ({first}): run the pipeline there "
                                             "first (dvc repro, dvc exp run)")):
        proc = results_of(toy_repo, *args)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [f"DataError: {line}"]

    shown = sh(*readme_exp_show(), cwd=toy_repo).stdout
    header, _, *rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in shown.splitlines()
                        if line.startswith("|")]
    # DVC heads a metric by its file only where several files have it: RAE's λ is "lambda"
    assert header == ["Experiment", "metrics/toy/knn.json:tau", "metrics/toy/rae.json:P@1", "metrics/toy/rae.json:P@5",
                      "metrics/toy/rae.json:R@100", "lambda", "metrics/toy/rae.json:tau", "encoder.mode",
                      "memory.keep", "infer.lambda", "infer.b", "infer.retrieval", "infer.label_share", "infer.tau"]
    [low] = [row for row in rows if row[0].endswith("[low]")]
    assert low[1:] == ["0.1", "51", "24", "80", "0.1", "0.04", "zero-shot", "1", "0.1", "200", "joint", "0.5", "0.04"]


def test_many_runs_wrap_into_blocks_within_120_columns():
    rows = {"rae": {"P@1": 50.0, "lambda": 0.5, "tau": 0.04}, "dual_encoder": {"P@1": 40.0}, "knn": {"P@1": 45.0}}
    runs = [RunResults(f"experiment-{i:02d}", None, "toy", rows, {}) for i in range(10)]
    text = side_by_side(runs)
    blocks = text.split("\n\n")
    # label column "dual_encoder nDCG@5" (19) + 7 columns of 2 + 13 (the names) = 124 > 120: 6 a block
    assert [block.splitlines()[0].split() for block in blocks] == [[f"experiment-{i:02d}" for i in range(6)],
                                                                   [f"experiment-{i:02d}" for i in range(6, 10)]]
    assert max(len(line) for line in text.splitlines()) <= 120
    assert blocks[1].splitlines()[5].split() == ["rae", "P@1"] + ["50.00"] * 4
    assert blocks[0].splitlines()[6].split() == ["rae", "P@5"] + ["-"] * 6


GOOD_FILES = {"params.yaml": "data:\n  name: toy\n",
              "metrics/toy/rae.json": '{"P@1": 50.0, "lambda": 0.5, "tau": 0.04}',
              "metrics/toy/dual_encoder.json": '{"P@1": 40.0}', "metrics/toy/knn.json": '{"P@1": 45.0, "tau": 0.1}',
              "artifacts/toy/significance.json": '{"rae_vs_knn": {"P@1": {"mean_diff": 5.0, "p_value": 0.01, '
                                                 '"log10_p": -2.0}}}'}


@pytest.mark.parametrize("path, text, line", [
    ("metrics/toy/rae.json", "[50.0]", "DataError: metrics/toy/rae.json: not a mapping in workspace"),
    ("metrics/toy/knn.json", '{"P@1": 45.0', "DataError: metrics/toy/knn.json: not valid in workspace ("),
    ("params.yaml", "data: [toy]\n", "DataError: params.yaml: no data.name in workspace"),
    ("artifacts/toy/significance.json", '{"rae_vs_knn": {"P@1": {"mean_diff": 5.0, "p_value": "0.01"}}}',
     "DataError: artifacts/toy/significance.json:rae_vs_knn.P@1: in workspace: needs numbers mean_diff, p_value "
     "and log10_p"),
    ("artifacts/toy/significance.json", '{"rae_vs_knn": [1]}',
     "DataError: artifacts/toy/significance.json:rae_vs_knn: in workspace: needs numbers mean_diff, p_value and "
     "log10_p"),
])
def test_a_bad_headline_file_is_one_line_naming_it(path, text, line):
    files = {**GOOD_FILES, path: text}
    assert run_results("workspace", None, GOOD_FILES.get).tests["rae_vs_knn"]["P@1"]["mean_diff"] == 5.0
    with pytest.raises(DataError) as caught:
        run_results("workspace", None, files.get)
    assert caught.value.one_line().startswith(line), caught.value.one_line()


# The headline rows the significance stage writes
def metrics_entry(base: float) -> dict:
    """A method's metrics.json entry: the headline five plus what the full table also holds."""
    headline = {key: base + i for i, key in enumerate(("P@1", "P@5", "nDCG@5", "PSP@5", "R@100"))}
    return {**headline, "P@3": 1.0, "macro-F1@5": {"tail": 2.0}}


def test_rae_and_its_baselines_each_get_a_row_of_five_metrics_and_of_p_values_as_text(tmp_path):
    metrics = {"rae": metrics_entry(50), "dual_encoder": metrics_entry(30), "knn": {**metrics_entry(40), "tau": 0.2},
               "ova_knn": metrics_entry(51), "selection": {"lambda": 0.3, "tau": 0.04, "metric": "P@1"},
               "retrieval": {"depth": 200}, "memory": {"keep": 1.0}}
    assert method_rows(metrics) == {
        "rae": {"P@1": 50, "P@5": 51, "nDCG@5": 52, "PSP@5": 53, "R@100": 54, "lambda": 0.3, "tau": 0.04},
        "dual_encoder": {"P@1": 30, "P@5": 31, "nDCG@5": 32, "PSP@5": 33, "R@100": 34},
        "knn": {"P@1": 40, "P@5": 41, "nDCG@5": 42, "PSP@5": 43, "R@100": 44, "tau": 0.2}}
    metrics["knn"] = metrics_entry(40)  # an older metrics.json: kNN was scored at RAE's τ
    assert method_rows(metrics)["knn"]["tau"] == 0.04
    # and RAE against each baseline gets a row of p-values as text
    report = {"rae_vs_dual_encoder": {"P@1": {"p_value": 3.14e-12, "log10_p": -11.503},
                                      "R@100": {"p_value": 0.0, "log10_p": -616.4}},
              "rae_vs_knn": {"P@1": {"p_value": 0.5, "log10_p": -0.301}, "R@100": {"p_value": 1.0, "log10_p": 0.0}},
              "rae_vs_other": {"P@1": {"p_value": 1.0, "log10_p": 0.0}}}
    rows = p_value_rows(report)
    assert rows == {"rae_vs_dual_encoder": {"P@1": "3.1e-12", "R@100": "4.0e-617"},
                    "rae_vs_knn": {"P@1": "5.0e-01", "R@100": "1.0e+00"}}
    write_rows(tmp_path / "tests", rows)
    assert sorted(p.name for p in (tmp_path / "tests").iterdir()) == ["rae_vs_dual_encoder.json", "rae_vs_knn.json"]
    assert json.loads((tmp_path / "tests" / "rae_vs_knn.json").read_text()) == rows["rae_vs_knn"]
