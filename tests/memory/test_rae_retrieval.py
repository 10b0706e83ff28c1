"""Which keys RAE scores (memory.merge.RaeRetrieval), through the real searches: split takes the top b_x input keys
and the top b_z label keys, each of its own key set. (Joint, the top-b of the stacked keys: tests/memory/test_merge.py;
the scores of both against the paper's dense formula: tests/rae/test_reference.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from raexmc.memory.exact import ExactIndex
from raexmc.memory.merge import JointSearch, RaeRetrieval, rae_keys
from tests.helpers import brute_top_k

N_INPUTS, N_LABELS, DIM = 30, 12, 8


def rae_search(search: JointSearch, Q, b: int, retrieval: RaeRetrieval):
    """RAE's keys at b from the two searches, the way RaeModel takes them (no prior here)."""
    return rae_keys(retrieval, *search.search_parts(Q, retrieval.depth(b)), search.inputs.count, b, None, 0.04)


# (b, label share, input keys, label keys), the counts by hand: b_z = share x b rounded half up
@pytest.mark.parametrize(("b", "share", "num_x", "num_z"), [
    (7, 0.25, 5, 2), (7, 0.5, 3, 4), (5, 0.1, 4, 1), (6, 0.0, 6, 0), (6, 1.0, 0, 6), (20, 0.5, 10, 10)])
def test_split_takes_the_top_keys_of_each_key_set_in_its_share(b, share, num_x, num_z):
    rng = np.random.default_rng(0)
    X, Z, Q = (rng.normal(size=(n, DIM)).astype(np.float32) for n in (N_INPUTS, N_LABELS, 9))
    retrieval = RaeRetrieval("split", share)
    assert retrieval.counts(b) == (num_x, num_z) and retrieval.depth(b) == max(num_x, num_z)
    ids, _ = rae_search(JointSearch(ExactIndex(X), ExactIndex(Z)), Q, b, retrieval)
    for row, query in zip(ids, Q):
        assert set(row) == set(brute_top_k(query[None], X, num_x)[0][0]) | set(
            N_INPUTS + brute_top_k(query[None], Z, num_z)[0][0])


def test_split_keeps_label_keys_the_joint_top_b_crowds_out():
    """Labels far from the queries beside inputs near them: the joint top-b holds no label key, the split
    one its share."""
    rng = np.random.default_rng(2)
    Z, Q = rng.normal(size=(N_LABELS, DIM)).astype(np.float32), rng.normal(size=(9, DIM)).astype(np.float32)
    near_inputs = np.vstack([Q + 0.01 * i for i in range(1, 4)])  # each query's 3 nearest keys
    search = JointSearch(ExactIndex(near_inputs), ExactIndex(0.01 * Z))
    joint_ids, _ = rae_search(search, Q, 3, RaeRetrieval())
    split_ids, _ = rae_search(search, Q, 3, RaeRetrieval("split", 0.5))
    assert (joint_ids >= len(near_inputs)).sum() == 0
    assert ((split_ids >= len(near_inputs)).sum(axis=1) == 2).all()  # b_z = 1.5 rounded half up


@pytest.mark.parametrize(("mode", "share"), [("both", None), ("split", None), ("joint", 0.5)])
def test_a_retrieval_without_its_share_or_with_one_it_has_not_is_refused(mode, share):
    with pytest.raises(ValueError, match="split retrieval needs a label share"):
        RaeRetrieval(mode, share)
