"""A merged key with the prior log n gets its members' softmax mass: worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from raexmc.memory.prior import add_log_prior, log_prior
from raexmc.rae.scoring import key_probabilities, score_parts

TAU = 0.1


def test_merged_key_with_prior_reproduces_its_members_mass_and_scores():
    """Two identical inputs at similarity 0.5 and a label at 0.3, τ = 0.1: the inputs hold
    2·e^5 / (2·e^5 + e^3) = 2 / (2 + e^-2) = 0.936621 of the mass. One merged key at 0.5 holds
    e^5 / (e^5 + e^3) = 0.880797 without the prior, 0.936621 with log 2 added to its logit."""
    members = key_probabilities(np.array([[0.5, 0.5, 0.3]], np.float32), np.array([[0, 1, 2]]), TAU, 3)
    assert math.isclose(members[0, 0] + members[0, 1], 0.9366210616669625, rel_tol=0, abs_tol=1e-6)

    merged = (np.array([[0, 1]]), np.array([[0.5, 0.3]], np.float32))  # key 0 merged, key 1 the label
    plain = key_probabilities(merged[1], merged[0], TAU, 2)
    assert math.isclose(plain[0, 0], 0.8807970779778824, rel_tol=0, abs_tol=1e-6)
    ids, sims = add_log_prior(merged, np.log([2.0]), TAU)
    assert ids.tolist() == [[0, 1]] and math.isclose(float(sims[0, 1]), 0.3, rel_tol=0, abs_tol=1e-7)
    with_prior = key_probabilities(sims, ids, TAU, 2)
    assert math.isclose(with_prior[0, 0], 0.9366210616669625, rel_tol=0, abs_tol=1e-6)
    # members with label rows [1, 0] and [1, 1] vs the merged key with their mean [1, 0.5] and the prior: the same
    # kNN half, p·[1,0] + p·[1,1] = 2p·[1, 0.5] with p = e^5 / (2e^5 + e^3) = 0.468311
    p = 0.9366210616669625 / 2
    members, _ = score_parts(np.array([[0, 1, 2]]), np.array([[0.5, 0.5, 0.3]], np.float32),
                             sp.csr_matrix([[1.0, 0.0], [1.0, 1.0]]), TAU)
    np.testing.assert_allclose(members.toarray(), [[2 * p, p]], rtol=0, atol=1e-6)
    np.testing.assert_allclose(score_parts(ids, sims, sp.csr_matrix([[1.0, 0.5]]), TAU)[0].toarray(), [[2 * p, p]],
                               rtol=0, atol=1e-6)


def test_prior_can_reorder_and_leaves_labels_and_padding_and_is_on_only_where_set_and_keys_were_merged():
    """A key of 3 members at 0.40 passes a single input at 0.45 (0.40 + 0.1·log 3 = 0.5099); the label key
    (joint id 2 >= 2 input keys) and the padding keep their similarity. The one rule: memory.prior on and member
    counts (a merged memory); a full memory has none."""
    ids = np.array([[1, 0, 2, -1]])
    sims = np.array([[0.45, 0.40, 0.30, -np.inf]], np.float32)
    new_ids, new_sims = add_log_prior((ids, sims), np.log([3.0, 1.0]), TAU)
    assert new_ids.tolist() == [[0, 1, 2, -1]]
    np.testing.assert_allclose(new_sims[0, :3], [0.40 + TAU * math.log(3), 0.45, 0.30], rtol=0, atol=1e-6)
    assert new_sims[0, 3] == -np.inf
    hits = (ids, sims)
    assert add_log_prior(hits, None, TAU) is hits, "no prior: the retrieval as it is"
    assert log_prior(False, np.array([2, 4])) is None
    assert log_prior(True, None) is None
    np.testing.assert_allclose(log_prior(True, np.array([1, 2, 4])), [0.0, 0.6931471805599453, 1.3862943611198906],
                               rtol=0, atol=1e-12)
