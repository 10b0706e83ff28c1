"""bench/peers/peer_eval.py: a peer's scores ranked and measured by our Evaluator, written for results_table."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import ConfigError, DataError
from tests.helpers import REPO, load_module


@pytest.fixture
def peer_eval():
    return load_module(REPO / "bench/peers/peer_eval.py")


def write_toy_dataset(folder):
    """Two test inputs over 4 labels. Input 0: positives {1, 2}, its own label 0 filtered; input 1: positive {3}."""
    folder.mkdir()
    (folder / "stats.json").write_text(json.dumps({"L": 4, "N_train": 3, "N_test": 2}))
    sp.save_npz(folder / "Y_train.npz", sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]])))
    sp.save_npz(folder / "Y_test.npz", sp.csr_matrix(np.array([[0, 1, 1, 0], [0, 0, 0, 1]])))
    sp.save_npz(folder / "filter_test.npz", sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 0, 0, 0]])))
    return folder


def test_peer_result_ranks_with_the_filter_writes_json_and_per_instance_arrays_and_refuses_bad_scores(peer_eval,
                                                                                                       tmp_path):
    split = peer_eval.load_split("toy", write_toy_dataset(tmp_path / "toy"))
    assert split.predict_depth == 101  # 100 left after the one filtered label per input
    # input 0 scores its filtered label 0 highest: it must not count; then 1 (hit), 3 (miss)
    scores = peer_eval.scores_from_pairs([[(0, 0.9), (1, 0.8), (3, 0.5)], [(2, 0.7), (3, 0.6)]], 4)
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"\0" * 2_000_000)
    results = tmp_path / "results"
    report = peer_eval.write_peer_result(split, "toy_peer", "a toy peer", scores, train_s=1.25, predict_s=0.5,
                                         model_path=model, settings={"k": 1}, results=results)

    # by hand: P@1 = (1 + 0) / 2; R@100 = (1/2 + 1/1) / 2
    assert report["metrics"]["P@1"] == 50.0
    assert report["metrics"]["R@100"] == 75.0
    assert report["predict_s_per_1k"] == 250.0
    assert report["model_mb"] == 2.0
    assert json.loads((results / "toy_peer_toy.json").read_text()) == report
    with np.load(results / "toy_peer_toy.npz") as arrays:
        np.testing.assert_array_equal(arrays["toy_peer/P@1"], [1.0, 0.0])
        np.testing.assert_array_equal(arrays["toy_peer/R@100"], [0.5, 1.0])
    with pytest.raises(DataError, match="outside"):  # a label outside the label set
        peer_eval.scores_from_pairs([[(4, 1.0)]], 4)
    with pytest.raises(DataError, match="shape"):  # scores of another shape: nothing written
        peer_eval.write_peer_result(split, "p", "p", sp.csr_matrix((3, 4)), 0.0, 0.0, tmp_path, {},
                                    results=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_the_grid_takes_typed_values_from_its_arguments_and_names_a_bad_axis(peer_eval):
    axes = {"word_ngrams": (2, 1, 3), "char_ngrams": (False, True), "input_fields": ("title+content", "title")}
    grid = peer_eval.parse_grid(["word_ngrams=3,1", "char_ngrams=true", "input_fields="], axes)
    assert grid == {"word_ngrams": (3, 1), "char_ngrams": (True,), "input_fields": ("title+content",)}
    with pytest.raises(ConfigError, match="no axis 'ngrams'"):
        peer_eval.parse_grid(["ngrams=1"], axes)
    with pytest.raises(ConfigError, match="word_ngrams must be ints"):
        peer_eval.parse_grid(["word_ngrams=two"], axes)


def test_the_search_moves_one_axis_at_a_time_and_keeps_the_earlier_value_on_a_tie(peer_eval):
    # a score by hand: a is best at 2, b at "y" once a is 2; a tie (b "z") keeps "y"
    table = {(1, "x"): 1.0, (2, "x"): 3.0, (3, "x"): 2.0, (2, "y"): 4.0, (2, "z"): 4.0}
    tried = []

    def score(point, best):
        tried.append((point["a"], point["b"]))
        return table[point["a"], point["b"]]

    chosen = peer_eval.coordinate_search({"a": (1, 2, 3), "b": ("x", "y", "z")}, score)
    assert chosen == {"a": 2, "b": "y"}
    assert tried == [(1, "x"), (1, "x"), (2, "x"), (3, "x"), (2, "x"), (2, "y"), (2, "z")]


def test_tfidf_features_are_scikit_learns_word_and_char_blocks_each_normalised_then_the_row(peer_eval):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    fit, other = ["alpha beta gamma", "alpha beta", "gamma delta alpha"], ["alpha delta", "beta beta omega"]
    X_fit, X_other = peer_eval.tfidf_features(fit, other, word_ngrams=2, char_ngrams=True, min_df=1)
    word = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(fit)
    char = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True).fit(fit)
    expected = normalize(sp.hstack([word.transform(other), char.transform(other)]))
    assert X_fit.dtype == np.float32 and X_fit.shape == (3, expected.shape[1])
    np.testing.assert_allclose(X_other.toarray(), expected.toarray(), atol=1e-6)
