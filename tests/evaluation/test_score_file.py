"""Score files: the evaluate stage writes each method's test-set top-100 scores, `raexmc evaluate --scores` scores
them back to the stage's own metrics.json, a hand-made matrix scores as a brute force of the XC Repository's
definitions (/work/shared/design.md) says, and a matrix that is not a score file gets one line naming it."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.stats

from oracle import brute_force
from raexmc.data.dataset import Example, Text, write_dataset
from raexmc.errors import DataError
from raexmc.evaluation.propensity import Propensity
from raexmc.evaluation.score_file import TopScores, ranked_values, read_scores
from raexmc.evaluation.score_report import report_table, score_files
from raexmc.rae.ranking import top_k
from test_propensity import evaluate_tiny
from tests.helpers import make_ngame_folder, raexmc, write_jsonl_gz

METHODS = ("rae", "dual_encoder", "knn")
TESTED = ("P@1", "P@5", "PSP@5", "R@100")


@pytest.fixture(scope="module")
def stage_run(tmp_path_factory):
    """The tiny dataset (from an LF folder named LF-AmazonTitles-131K, test pair (1, 3) filtered) through the tune
    and evaluate stages, the latter writing score files."""
    root = tmp_path_factory.mktemp("scored")
    evaluate_tiny(root, scores=root / "scores")
    return root


# A wide test set: 130 labels, so that a dual encoder's row (its top-120 label keys) is cut at rank 100.
WIDE_LABELS, WIDE_TRAIN, WIDE_TEST, WIDE_B = 130, 24, 6, 120


@pytest.fixture(scope="module")
def wide_stage_run(tmp_path_factory):
    """(root, train labels, test labels, filtered pairs) of the tune and evaluate stages, writing score files, on
    an LF folder named LF-AmazonTitles-131K of WIDE_LABELS labels, at infer.b = WIDE_B."""
    rng = np.random.default_rng(11)
    root = tmp_path_factory.mktemp("wide")
    lf = root / "lf" / "LF-AmazonTitles-131K"
    lf.mkdir(parents=True)
    train = [sorted(rng.choice(WIDE_LABELS, size=rng.integers(1, 4), replace=False)) for _ in range(WIDE_TRAIN)]
    test = [sorted(rng.choice(WIDE_LABELS, size=rng.integers(2, 6), replace=False)) for _ in range(WIDE_TEST)]
    write_jsonl_gz(lf / "lbl.json.gz", [{"uid": f"l{j}", "title": f"label {j}", "content": ""}
                                        for j in range(WIDE_LABELS)])
    for name, rows in (("trn.json.gz", train), ("tst.json.gz", test)):
        write_jsonl_gz(lf / name, [{"uid": f"{name[0]}{i}", "title": f"text {i}", "content": "", "target_ind":
                                    [int(x) for x in y], "target_rel": [1.0] * len(y)} for i, y in enumerate(rows)])
    filtered = {(0, int(test[0][0]))}
    (lf / "filter_labels_test.txt").write_text(f"0 {test[0][0]}\n")
    evaluate_tiny(root, lf=lf, infer={"b": WIDE_B, "b_sweep": [WIDE_B]}, scores=root / "scores")
    return root, train, test, filtered


def test_raexmc_evaluate_on_the_stage_score_files_gives_the_stage_metrics(wide_stage_run):
    """Every method's top-100 file, as the stage wrote it (a dual encoder's 120 scored labels cut to 100), scores as
    the brute force of the definitions says, read back by the command and in the stage's own metrics.json."""
    root, train, test, filtered = wide_stage_run
    stage = json.loads((root / "eval" / "metrics.json").read_text())
    dual = sp.load_npz(root / "scores" / "dual_encoder.npz")
    assert np.diff(dual.indptr).tolist() == [100] * WIDE_TEST, "each row is cut at rank 100"
    for method in METHODS:
        scores = sp.load_npz(root / "scores" / f"{method}.npz")
        expected, _ = brute_force(train, test, filtered, scores, 0.6, 2.6)
        report = score_files(root / "data" / "tiny", root / "scores" / f"{method}.npz", None, TESTED)
        for name, value in expected.items():
            if name != "macro-F1@5":
                assert report["scores"][name] == pytest.approx(value, abs=0.011), (method, name)
                assert stage[method][name] == pytest.approx(value, abs=0.011), (method, name)
        assert report["scores"]["macro-F1@5"] == stage[method]["macro-F1@5"] == expected["macro-F1@5"], method


def test_raexmc_evaluate_reads_a_score_file_in_every_layout_as_the_stage_does(stage_run):
    """Every method's file, read back by the command on the download stage's folder, on the LF folder it came from
    and on the same data in the NGAME layout (read as the download stage reads them, the folder's name giving the
    propensity pair), gives metrics.json's table."""
    stage = json.loads((stage_run / "eval" / "metrics.json").read_text())
    proc = raexmc("evaluate", "--dataset", stage_run / "data" / "tiny", "--scores", stage_run / "scores" / "rae.npz",
                  "--out", stage_run / "rae.json")
    assert proc.returncode == 0, proc.stderr
    written = json.loads((stage_run / "rae.json").read_text())
    assert written["scores"] == stage["rae"]
    assert written["propensity"] == stage["propensity"] == {"A": 0.6, "B": 2.6, "source": "table: LF-AmazonTitles-131K"}
    assert re.search(rf"^P@1 +{stage['rae']['P@1']:.2f}$", proc.stdout, re.M), proc.stdout
    ngame = make_ngame_folder(stage_run / "ngame" / "LF-AmazonTitles-131K")  # the same data in the NGAME layout
    for method in METHODS:  # the stage wrote a top-k float32 CSR per method, without the filtered pair (1, 3)
        matrix = sp.load_npz(stage_run / "scores" / f"{method}.npz")
        assert matrix.format == "csr" and matrix.dtype == np.float32 and matrix.shape == (2, 5), method
        assert np.diff(matrix.indptr).max() <= 100 and matrix.nnz > 0
        assert matrix[1, 3] == 0 and 3 not in matrix[1].indices, f"{method} stores the filtered pair (1, 3)"
        for dataset in (stage_run / "data" / "tiny", stage_run / "LF-AmazonTitles-131K", ngame):
            report = score_files(dataset, stage_run / "scores" / f"{method}.npz", None, TESTED)
            # the stage's row also records the setting a method was scored at (kNN's own tau), which a file lacks
            assert report["scores"] == {k: v for k, v in stage[method].items() if k != "tau"}, (method, dataset)
            assert report["propensity"] == stage["propensity"]


# A hand-made test set: 40 training inputs, 12 labels (two never in training), 30 test inputs, some pairs filtered.
N_TRAIN, N_LABELS, N_TEST = 40, 12, 30


@pytest.fixture(scope="module")
def hand_made(tmp_path_factory):
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("hand-made")
    train = [rng.choice(N_LABELS - 2, size=rng.integers(1, 4), replace=False) for _ in range(N_TRAIN)]
    test = [rng.choice(N_LABELS, size=rng.integers(1, 5), replace=False) for _ in range(N_TEST)]
    filtered = sorted({(i, int(rng.integers(N_LABELS))) for i in rng.choice(N_TEST, 8, replace=False)})
    write_dataset(root / "data", [Text(f"l{j}", f"label {j}") for j in range(N_LABELS)],
                  [Example(i, f"train {i}", labels=[int(x) for x in y]) for i, y in enumerate(train)],
                  [Example(i, f"test {i}", labels=[int(x) for x in y]) for i, y in enumerate(test)],
                  {"test": filtered}, {"source": "test"})
    scores = []
    for name, width, seed in (("a", 6, 1), ("b", 9, 2)):
        local = np.random.default_rng(seed)
        rows = [local.choice(N_LABELS, size=width, replace=False) for _ in range(N_TEST)]
        values = local.integers(0, 5, size=(N_TEST, width)) / 4  # ties on purpose: they go to the smaller label
        matrix = sp.csr_matrix((values.ravel(), np.concatenate(rows), np.arange(0, N_TEST * width + 1, width)),
                               shape=(N_TEST, N_LABELS), dtype=np.float32)
        sp.save_npz(root / f"{name}.npz", matrix)
        scores.append(matrix)
    return root, train, test, set(filtered), scores


def test_a_hand_made_matrix_scores_as_the_definitions_say(hand_made):
    root, train, test, filtered, (a, b) = hand_made
    report = score_files(root / "data", root / "a.npz", root / "b.npz", TESTED, Propensity(0.55, 1.5, "t", "t"))
    expected_a, values_a = brute_force(train, test, filtered, a, 0.55, 1.5)
    expected_b, values_b = brute_force(train, test, filtered, b, 0.55, 1.5)
    assert set(report["scores"]) == set(expected_a)
    for name, value in expected_a.items():
        assert report["scores"][name] == (value if name == "macro-F1@5" else pytest.approx(value, abs=0.011)), name
    for name, value in expected_b.items():
        assert report["compare"][name] == (value if name == "macro-F1@5" else pytest.approx(value, abs=0.011)), name
    assert report["scores"]["macro-F1@5"]["unseen"] is not None  # labels 10 and 11 are in test sets only
    for metric in TESTED:
        reference = scipy.stats.ttest_rel(100 * values_a[metric], 100 * values_b[metric])
        test_result = report["scores_vs_compare"][metric]
        np.testing.assert_allclose([test_result["t"], test_result["p_value"], test_result["mean_diff"]],
                                   [reference.statistic, reference.pvalue,
                                    np.mean(100 * values_a[metric] - 100 * values_b[metric])],
                                   rtol=0, atol=1e-5)  # the per-input values are kept in float32
    assert "P@1" in report_table(report) and "(p " in report_table(report)


def test_the_command_takes_a_propensity_pair(hand_made):
    root, train, test, filtered, (a, _) = hand_made
    proc = raexmc("evaluate", "--dataset", root / "data", "--scores", root / "a.npz", "--propensity", "0.5,0.4",
                  "--out", root / "wiki.json")
    assert proc.returncode == 0, proc.stderr
    written = json.loads((root / "wiki.json").read_text())
    assert written["propensity"] == {"A": 0.5, "B": 0.4, "source": "--propensity"}
    expected, _ = brute_force(train, test, filtered, a, 0.5, 0.4)
    for name in ("PSP@1", "PSP@3", "PSP@5", "PSnDCG@5"):
        assert written["scores"][name] == pytest.approx(expected[name], abs=0.011), name


def test_float32_scores_keep_the_ranking_they_were_ranked_by():
    """Two float64 scores that round to one float32 would rank by label afterwards; the file keeps their order."""
    scores = sp.csr_matrix(np.array([[0.0, 0.0, 0.3, 0.3 + 1e-12, 0.0, 0.1], [0.2, 0.2, 0.0, 0.0, 0.0, 0.0]]))
    ranked = top_k(scores, 100)
    assert [list(row[row >= 0]) for row in ranked] == [[3, 2, 5], [0, 1]]
    assert top_k(sp.csr_matrix(scores, dtype=np.float32), 100)[0, 0] == 2  # a plain cast swaps 3 and 2
    kept = TopScores(6)
    kept.add(ranked, scores)
    np.testing.assert_array_equal(top_k(kept.matrix(), 100), ranked)


def descending_by_score(matrix: sp.csr_matrix, larger_label_first: bool) -> list[list[int]]:
    """Each row's labels sorted by descending score alone, exact ties to the larger (or smaller) label: how an
    evaluator with another tie rule than ours would rank the file."""
    rows = []
    for row in range(matrix.shape[0]):
        labels = matrix.indices[matrix.indptr[row]:matrix.indptr[row + 1]]
        values = matrix.data[matrix.indptr[row]:matrix.indptr[row + 1]]
        sign = -1 if larger_label_first else 1
        rows.append([int(label) for _, label in sorted(zip(-values, sign * labels))])
    return [[abs(label) for label in row] for row in rows]


def test_exact_ties_are_broken_in_the_file_so_any_tie_rule_ranks_it_alike():
    """Rows of exact ties (a run of 120 equal scores, as identical label texts give the dual encoder), ranked to the
    smaller label: the file's rows strictly decrease in that order, rank alike under either tie rule, stay within a
    few hundred ulps of the scores, and PECOS's evaluator gives the P@k of the ranking itself."""
    from pecos.utils import smat_util

    rng = np.random.default_rng(4)
    scores = np.zeros((3, 300))
    scores[0, rng.permutation(300)[:120]] = 0.25                               # 120 tied, more than k
    scores[1, :10] = [0.5, 0.5, 0.4, 0.4, 0.4, 0.3, 0.2, 0.2, 0.1, 0.05]
    scores[2, rng.permutation(300)[:150]] = rng.integers(1, 4, size=150) / 8   # three levels of ties
    ranked = top_k(sp.csr_matrix(scores), 100)
    kept = TopScores(300)
    kept.add(ranked, sp.csr_matrix(scores))
    written = kept.matrix()
    expected = [list(row[row >= 0]) for row in ranked]
    assert descending_by_score(written, False) == descending_by_score(written, True) == expected
    for row, labels in enumerate(expected):
        values = np.asarray(written[row, labels].todense()).ravel()
        assert np.all(np.diff(values) < 0), row
        assert np.max(np.abs(values - scores[row, labels])) < 1e-4
    truth = sp.csr_matrix((rng.random((3, 300)) < 0.2).astype(np.float32))
    by_hand = [100 * np.mean([truth[row, labels[:k]].sum() / k for row, labels in enumerate(expected)])
               for k in range(1, 6)]
    pecos = smat_util.Metrics.generate(truth, written, topk=5)
    np.testing.assert_allclose(100 * np.asarray(pecos.prec), by_hand, atol=1e-9)


def test_ranked_values_are_the_scores_ranked_duplicates_added_pads_minus_inf():
    """Unsorted indices (as a sparse product leaves them) and a label stored twice, against the dense matrix."""
    rng = np.random.default_rng(3)
    rows = [rng.permutation(40)[:25] for _ in range(6)]
    indices = np.concatenate([np.append(row, row[0]) for row in rows])  # each row stores its first label twice
    scores = sp.csr_matrix((rng.random(indices.size), indices, np.arange(0, indices.size + 1, 26)), shape=(6, 40))
    dense = scores.toarray()  # adds the duplicates
    ranked = top_k(scores, 30)
    assert (ranked[:, 25:] == -1).all() and (ranked[:, :25] >= 0).all()
    expected = np.where(ranked >= 0, np.take_along_axis(dense, np.maximum(ranked, 0), axis=1), -np.inf)
    np.testing.assert_array_equal(ranked_values(scores, ranked), expected)
    np.testing.assert_array_equal(ranked_values(dense, ranked), expected)


def write_csr(path, shape, indptr, indices, data):
    """A CSR .npz as scipy writes one, with arrays scipy would refuse to build itself."""
    np.savez(path, indices=np.asarray(indices, np.int32), indptr=np.asarray(indptr, np.int32), format=b"csr",
             shape=np.asarray(shape), data=np.asarray(data, np.float32))
    return path


BAD = {
    "wrong shape": (lambda p: write_csr(p, (3, 5), [0, 1, 1, 1], [0], [1.0]),
                    "shape 3 x 5, but the test set has 2 inputs and 5 labels"),
    "label out of range": (lambda p: write_csr(p, (2, 5), [0, 1, 2], [0, 7], [1.0, 2.0]),
                           "row 1: label index 7 outside [0, 5)"),
    "label index L": (lambda p: write_csr(p, (2, 5), [0, 1, 2], [0, 5], [1.0, 2.0]),  # one past the last label
                      "row 1: label index 5 outside [0, 5)"),
    "NaN": (lambda p: write_csr(p, (2, 5), [0, 1, 2], [0, 1], [1.0, np.nan]), "row 1: score nan of label 1"),
    "inf": (lambda p: write_csr(p, (2, 5), [0, 1, 2], [0, 1], [np.inf, 1.0]), "row 0: score inf of label 0"),
    "dense": (lambda p: np.save(p.with_suffix(".npy"), np.ones((2, 5))) or p.with_suffix(".npy").rename(p) or p,
              "not a scipy.sparse .npz matrix"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_matrix_is_one_line_naming_the_file(tmp_path, case):
    make, expected = BAD[case]
    path = make(tmp_path / "preds.npz")
    with pytest.raises(DataError) as refused:
        read_scores(path, 2, 5, 100)
    line = refused.value.one_line()
    assert "\n" not in line and line.startswith(f"DataError: {path}") and expected in line, line


def test_a_row_of_exactly_k_scores_is_a_score_file_and_more_is_refused_with_k(tmp_path):
    """Exactly k: what the evaluate stage writes wherever 100 or more labels are scored (each row's top 100)."""
    path = tmp_path / "top100.npz"
    sp.save_npz(path, sp.csr_matrix(np.ones((3, 120), np.float32)[:, :100], shape=(3, 120)))
    assert np.diff(read_scores(path, 3, 120, 100).indptr).tolist() == [100, 100, 100]
    path = tmp_path / "full.npz"
    sp.save_npz(path, sp.csr_matrix(np.ones((3, 120), np.float32)))
    with pytest.raises(DataError, match=r"full.npz:row 0: 120 scores in a row, more than k = 100"):
        read_scores(path, 3, 120, 100)


def test_the_command_refuses_a_bad_matrix_in_one_line_and_writes_nothing(stage_run, tmp_path):
    bad = write_csr(tmp_path / "preds.npz", (2, 5), [0, 1, 2], [0, 1], [1.0, np.nan])
    proc = raexmc("evaluate", "--dataset", stage_run / "data" / "tiny", "--scores", bad, "--out", tmp_path / "m.json")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"DataError: {bad}:row 1: score nan of label 1: scores must be finite"]
    assert not (tmp_path / "m.json").exists()

