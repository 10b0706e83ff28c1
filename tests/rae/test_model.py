"""RaeModel on a hand-built memory: rae/reference.py's scores, with and without the prior; a saved model loads back
scoring identically after a move; a folder whose parts disagree is refused in one line naming file and key."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import DataError
from raexmc.memory.exact import ExactIndex
from raexmc.memory.hnsw import build_hnsw
from raexmc.memory.merge import JointSearch, RaeRetrieval
from raexmc.memory.persistence import save_index
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.reference import reference_scores
from tests.helpers import reseal, softmax_error

# 4 training inputs and 3 labels in 3 dimensions; V's input rows are Y (inputs x labels), its label rows I.
X = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 1.0, 0.0], [0.0, 0.6, 0.8]], dtype=np.float32)
Z = np.array([[0.6, 0.0, 0.8], [0.0, 0.0, 1.0], [0.7, 0.7, 0.1]], dtype=np.float32)
Y = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 1, 1]], dtype=np.float64))
Q = np.array([[0.9, 0.3, 0.1], [0.1, 0.2, 0.95], [0.3, 0.9, 0.3]], dtype=np.float32)
LAM, TAU, B = 0.3, 0.5, 4
COUNTS = np.array([3, 1, 2, 5])
# The model's similarities are fp32, the reference's float64 from the same fp32 vectors: a 3-term dot product of unit
# or shorter vectors is within 3u of it (u = eps/2, fp32's unit roundoff), and adding the prior's τ·log n (below
# 0.81, itself rounded) to it costs 3u more: within 8u = 4 eps in all. The scores, a softmax at τ mixed with
# weights in [0, 1], are then within softmax_error of the reference's (some 2e-6, of scores up to 1).
SCORE_ERROR = softmax_error(4 * float(np.finfo(np.float32).eps), TAU)


def expected(lam: float = LAM, counts: np.ndarray | None = None) -> np.ndarray:
    """rae/reference.py's dense scores of Q on this memory, at b = B."""
    log_counts = None if counts is None else np.log(counts.astype(np.float64))
    return reference_scores(Q, X, Z, Y.toarray(), lam, TAU, B, log_counts=log_counts)


def model(retrieval: RaeRetrieval = RaeRetrieval(), log_counts: np.ndarray | None = None,
          lam: float = LAM, search: JointSearch | None = None) -> RaeModel:
    return RaeModel(Y, RaeSettings(lam, TAU, B, retrieval), log_counts,
                    JointSearch(ExactIndex(X), ExactIndex(Z)) if search is None else search)


def test_top_k_ranks_the_scores_best_first_and_pads_what_no_key_reaches():
    rae = model(lam=0.0)  # λ 0: only the label keys among the top 4 score, fewer than 3 for some query
    labels, values = rae.top_k(Q, 3)
    for row, scores in enumerate(expected(lam=0.0)):
        scored = np.flatnonzero(scores > 0)
        order = scored[np.argsort(-scores[scored], kind="stable")]
        assert labels[row].tolist() == [*order.tolist(), *[-1] * (3 - len(order))]
        np.testing.assert_allclose(values[row, :len(order)], scores[order], rtol=0, atol=SCORE_ERROR)
        assert (values[row, len(order):] == 0).all()
    assert (labels == -1).any(), "some query reaches fewer than 3 labels"


def hnsw_search() -> JointSearch:
    return JointSearch(*(build_hnsw(keys, M=8, ef_construction=50, threads=1, progress=False) for keys in (X, Z)))


@pytest.mark.parametrize("search", ["exact", "hnsw"])
@pytest.mark.parametrize(("retrieval", "prior"), [(RaeRetrieval(), False), (RaeRetrieval("split", 0.25), True),
                                                  (RaeRetrieval(), True)])
def test_a_saved_model_loads_back_scoring_identically(tmp_path, search, retrieval, prior):
    """Wherever it moved, at its saved beam."""
    saved = model(retrieval, np.log(COUNTS.astype(np.float64)) if prior else None,
                  search=hnsw_search() if search == "hnsw" else None)
    if search == "hnsw":
        saved.search.inputs.ef_search = saved.search.labels.ef_search = 7
    saved.save(tmp_path / "model")
    shutil.move(tmp_path / "model", tmp_path / "moved")  # nothing inside points back at where it was saved
    loaded = RaeModel.load(tmp_path / "moved", needs=())
    assert loaded.settings.retrieval == retrieval
    if search == "hnsw":
        assert (loaded.search.inputs.ef_search, loaded.search.labels.ef_search) == (7, 7)
    np.testing.assert_array_equal(loaded.scores_for(Q).toarray(), saved.scores_for(Q).toarray())
    for got, want in zip(loaded.top_k(Q, 2), saved.top_k(Q, 2)):
        np.testing.assert_array_equal(got, want)


def test_a_bare_scoring_model_saves_without_search_encoder_or_labels_with_its_model_card(tmp_path):
    """It loads where the caller needs no part, and is refused where it needs those that answer texts (the default,
    as predict and serve load), or where its format is another. Its card says where it came from, how it scores."""
    RaeModel(Y, RaeSettings(LAM, TAU, B), about={"dataset": "tiny", "commit": "0123abc", "metrics": {"P@1": 0.75}}
             ).save(tmp_path / "model")
    card = (tmp_path / "model" / "README.md").read_text()
    assert card.startswith("# RAE-XMC model: tiny\n")
    assert "| P@1 | 0.75 |" in card and "- commit: 0123abc" in card
    assert f"- lambda {LAM}, tau {TAU}, b {B}, retrieval joint\n" in card and "RaeModel.load(" in card
    code = card.split("```python\n")[1].split("```")[0]
    imports = [line for line in code.splitlines() if line.startswith(("from ", "import "))]
    assert imports == ["from raexmc import RaeModel"], "the public import, not rae/model.py's path"
    exec(imports[0], namespace := {})
    assert namespace["RaeModel"] is RaeModel
    loaded = RaeModel.load(tmp_path / "model", needs=())
    assert loaded.search is None and loaded.encoder is None and loaded.labels is None
    with pytest.raises(ValueError, match="no search"):
        loaded.scores_for(Q)
    np.testing.assert_array_equal(loaded.values.toarray(), Y.toarray())
    with pytest.raises(DataError, match=r"a model without its encoder, labels, search \(manifest.json lists the "
                                        r"parts none\): rerun the package stage"):
        RaeModel.load(tmp_path / "model")
    manifest = tmp_path / "model" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format": 1}))
    with pytest.raises(DataError, match="its contents are not those it was written with"):
        RaeModel.load(tmp_path / "model", needs=())
    reseal(tmp_path / "model")
    with pytest.raises(DataError) as error:
        RaeModel.load(tmp_path / "model", needs=())
    assert error.value.one_line() == (f"DataError: {manifest}:format: format 1, this code reads format 2: "
                                      "rerun the package stage")


def test_bad_models_and_folders_are_refused_naming_what(tmp_path):
    with pytest.raises(ValueError, match="3 member counts for 4 input keys"):
        RaeModel(Y, RaeSettings(), np.zeros(3))
    model().save(tmp_path / "model")
    settings = json.loads((tmp_path / "model" / "settings.json").read_text())
    (tmp_path / "model" / "settings.json").write_text(json.dumps({k: v for k, v in settings.items() if k != "tau"}))
    reseal(tmp_path / "model")
    with pytest.raises(DataError, match="lacks tau: rerun the package stage") as error:
        RaeModel.load(tmp_path / "model", needs=())
    assert str(tmp_path / "model" / "settings.json") in error.value.one_line()
    with pytest.raises(DataError, match="model folder not found"):
        RaeModel.load(tmp_path / "nothing")
    with pytest.raises(ValueError, match="needs its b"):
        RaeModel(Y, RaeSettings(LAM, TAU, None)).save(tmp_path / "unsaved")
    assert not (tmp_path / "unsaved").exists()


@pytest.mark.parametrize(("key", "value"), [("lambda", 1.5), ("lambda", "half"), ("tau", 0), ("tau", None),
                                            ("b", 0), ("b", 2.5), ("ef_search", -1), ("ef_search", True),
                                            ("retrieval", "both"), ("label_share", 0.5), ("prior", "yes"),
                                            ("query_lambda", True), ("input_fields", "content"), ("about", [])])
def test_a_bad_settings_value_is_one_line_naming_settings_json_and_its_key(tmp_path, key, value):
    """Cause 7 of issue 50: a bad value gave a traceback, or a line that blamed params.yaml."""
    model().save(tmp_path / "model")
    path = tmp_path / "model" / "settings.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    reseal(tmp_path / "model")
    with pytest.raises(DataError) as error:
        RaeModel.load(tmp_path / "model", needs=())
    line = error.value.one_line()
    assert line.startswith(f"DataError: {path}:{key}: ") and "params.yaml" not in line and "\n" not in line
    assert line.endswith("rerun the package stage")


def reindexed(folder, key_set: str, dim: int, one_more: bool = False) -> None:
    """The model folder's `key_set` index rebuilt on its keys (and a copy of the first) padded with zeros to `dim`
    dimensions."""
    keys = {"inputs": X, "labels": Z}[key_set]
    keys = np.vstack([keys, keys[:1]]) if one_more else keys
    shutil.rmtree(folder / key_set)
    padded = np.hstack([keys, np.zeros((len(keys), dim - keys.shape[1]), np.float32)])
    save_index(build_hnsw(padded, M=8, ef_construction=50, threads=1, progress=False), folder / key_set)
    reseal(folder)  # the manifest would refuse the changed index first


def test_indexes_that_do_not_fit_the_values_or_the_queries_are_refused_naming_the_index(tmp_path):
    """An index (either) with one key more than V's rows or columns, or a labels' index of another width, is refused
    at load; both of another width than the queries, at the first query, naming the index."""
    for key_set in ("inputs", "labels"):
        model(search=hnsw_search()).save(tmp_path / key_set)
        reindexed(tmp_path / key_set, key_set, 3, one_more=True)
        with pytest.raises(DataError, match="rerun the package stage") as error:
            RaeModel.load(tmp_path / key_set, needs=())
        assert error.value.one_line().startswith(f"DataError: {tmp_path / key_set / key_set}: holds")
    model(search=hnsw_search()).save(tmp_path / "model")
    reindexed(tmp_path / "model", "labels", 4)
    with pytest.raises(DataError, match="the inputs' index has dimension 3, the labels' 4") as error:
        RaeModel.load(tmp_path / "model", needs=())
    assert error.value.one_line().startswith(f"DataError: {tmp_path / 'model' / 'labels'}: ")
    reindexed(tmp_path / "model", "inputs", 4)
    with pytest.raises(DataError, match="queries have dimension 3, the index has 4") as error:
        RaeModel.load(tmp_path / "model", needs=()).scores_for(Q)
    assert error.value.one_line().startswith(f"DataError: {tmp_path / 'model' / 'inputs'}: ")
