"""Decoupled InfoNCE loss and its batch masks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from raexmc.training.loss import batch_label_masks, decoupled_infonce, shared_label_mask


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def reference_loss(x, z, positive_col, is_positive, share_label, tau):
    """Plain loop over inputs, in float64 with a max-shifted log-sum-exp."""
    x = x.double().tolist()
    z = z.double().tolist()
    dot = lambda a, b: sum(p * q for p, q in zip(a, b))  # noqa: E731
    total = 0.0
    for i in range(len(x)):
        positive = dot(x[i], z[int(positive_col[i])]) / tau
        terms = [positive]
        for m in range(len(z)):
            if not bool(is_positive[i, m]):
                terms.append(dot(x[i], z[m]) / tau)
        if share_label is not None:
            for j in range(len(x)):
                if j != i and not bool(share_label[i, j]):
                    terms.append(dot(x[i], x[j]) / tau)
        top = max(terms)
        total += top + math.log(sum(math.exp(t - top) for t in terms)) - positive
    return total / len(x)


def random_batch(seed, batch=5, n_labels=7, dim=4, n_truth=10):
    """Random unit embeddings and random multi-label truth with a sampled positive in the batch."""
    rng = np.random.default_rng(seed)
    x = torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(batch, dim))).float(), dim=1)
    z = torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(n_labels, dim))).float(), dim=1)
    batch_ids = rng.choice(n_truth, size=n_labels, replace=False)
    labels = []
    positive_col = []
    for _ in range(batch):
        sampled_col = int(rng.integers(n_labels))
        others = rng.choice(n_truth, size=int(rng.integers(0, 3)), replace=False)
        labels.append(np.unique(np.concatenate([[batch_ids[sampled_col]], others])))
        positive_col.append(sampled_col)
    is_positive = batch_label_masks(labels, batch_ids)
    share = shared_label_mask(labels)
    return x, z, torch.tensor(positive_col), is_positive, share


# --- a worked example -------------------------------------------------------------------------
#
# tau = 1, d = 2.  Labels (columns):  z0 = (1, 0), z1 = (0, 1), z2 = (1, 1), z3 = (-1, 0).
# Inputs:  x0 = (1, 0)   positives {L0, L2}, sampled L0 (col 0)
#          x1 = (0, 1)   positives {L1},     sampled L1 (col 1)
#          x2 = (0, -1)  positives {L2},     sampled L2 (col 2)
# Label logits x_i . z_m:
#          x0: [ 1,  0,  1, -1]
#          x1: [ 0,  1,  1,  0]
#          x2: [ 0, -1, -1,  0]
# Input logits x_i . x_j:  x0.x1 = 0,  x0.x2 = 0,  x1.x2 = -1.  Inputs 0 and 2 share L2.

X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
Z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
POSITIVE_COL = torch.tensor([0, 1, 2])
IS_POSITIVE = torch.tensor([[True, False, True, False],
                            [False, True, False, False],
                            [False, False, True, False]])
SHARE = torch.tensor([[True, False, True], [False, True, False], [True, False, True]])
E = math.e


def test_worked_example_label_negatives_only():
    # loss0: numerator e^1; col 2 (L2) is another positive of input 0, so it is dropped;
    #        denominator e^1 + e^0 (col 1) + e^-1 (col 3)          -> log(e + 1 + 1/e) - 1 = 0.4076
    # loss1: numerator e^1; negatives cols 0, 2, 3: e^0 + e^1 + e^0 -> log(2e + 2) - 1    = 1.0064
    # loss2: numerator e^-1; negatives cols 0, 1, 3: 1 + 1/e + 1     -> log(2 + 2/e) + 1   = 2.0064
    # mean = (0.4076 + 1.0064 + 2.0064) / 3 = 1.1401
    expected = ((math.log(E + 1 + 1 / E) - 1) + (math.log(2 * E + 2) - 1) + (math.log(2 + 2 / E) + 1)) / 3
    loss = decoupled_infonce(X, Z, POSITIVE_COL, IS_POSITIVE, None, tau=1.0)
    assert loss.item() == pytest.approx(expected, abs=1e-6)  # fp32 losses near 1: a few units of 1.2e-7
    assert loss.item() == pytest.approx(1.1401, abs=1e-4)


def test_worked_example_with_instance_negatives():
    # loss0: adds x1 (logit 0) only; x2 shares L2 with x0      -> log(e + 1 + 1/e + 1) - 1
    # loss1: adds x0 (0) and x2 (-1)                            -> log(2e + 2 + 1 + 1/e) - 1
    # loss2: adds x1 (-1) only; x0 shares L2                    -> log(2 + 2/e + 1/e) + 1
    expected = ((math.log(E + 2 + 1 / E) - 1) + (math.log(2 * E + 3 + 1 / E) - 1) + (math.log(2 + 3 / E) + 1)) / 3
    loss = decoupled_infonce(X, Z, POSITIVE_COL, IS_POSITIVE, SHARE, tau=1.0)
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_worked_example_half_temperature():
    # tau = 0.5 doubles every logit: loss0 = log(e^2 + 1 + e^-2) - 2, and so on.
    expected = ((math.log(E**2 + 1 + E**-2) - 2) + (math.log(2 * E**2 + 2) - 2)
                + (math.log(2 + 2 * E**-2) + 2)) / 3
    loss = decoupled_infonce(X, Z, POSITIVE_COL, IS_POSITIVE, None, tau=0.5)
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_worked_example_masks_from_label_ids():
    labels = [np.array([10, 12]), np.array([11]), np.array([12])]
    assert torch.equal(batch_label_masks(labels, np.array([10, 11, 12, 13])), IS_POSITIVE)
    assert torch.equal(shared_label_mask(labels), SHARE)


# --- agreement with the loop reference ---------------------------------------------------------

@pytest.mark.parametrize("instance_negatives", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_loop_reference(seed, instance_negatives):
    x, z, positive_col, is_positive, share = random_batch(seed)
    share = share if instance_negatives else None
    loss = decoupled_infonce(x, z, positive_col, is_positive, share, tau=0.1)
    assert loss.item() == pytest.approx(reference_loss(x, z, positive_col, is_positive, share, 0.1),
                                         abs=1e-5)  # fp32 losses of 5 to 12: some 10 units of 1e-6


def test_instance_negatives_change_the_loss_when_inputs_share_nothing():
    x, z, positive_col, is_positive, _ = random_batch(3)
    nothing_shared = torch.eye(len(x), dtype=torch.bool)
    without = decoupled_infonce(x, z, positive_col, is_positive, None, tau=0.1)
    with_instances = decoupled_infonce(x, z, positive_col, is_positive, nothing_shared, tau=0.1)
    assert with_instances.item() > without.item()


# --- decoupling --------------------------------------------------------------------------------

def single_loss(x, z, positive_col, is_positive, tau=0.5):
    return decoupled_infonce(x, z, torch.tensor([positive_col]), torch.tensor([is_positive]), None, tau).item()


def test_another_positive_in_the_batch_does_not_change_the_loss():
    x = torch.tensor([[0.6, 0.8]])
    # Input has positives {A, B}; batch labels [A (sampled), C] then [A, C, B].
    a, b, c = [1.0, 0.0], [0.0, 1.0], [-0.6, 0.8]
    base = single_loss(x, torch.tensor([a, c]), 0, [True, False])
    with_b = single_loss(x, torch.tensor([a, c, b]), 0, [True, False, True])
    assert with_b == pytest.approx(base, abs=1e-7)
    # Not decoupling (B treated as a negative) would have changed it.
    coupled = single_loss(x, torch.tensor([a, c, b]), 0, [True, False, False])
    assert coupled > base


def test_a_non_positive_label_increases_the_loss():
    x = torch.tensor([[0.6, 0.8]])
    a, c, d = [1.0, 0.0], [-0.6, 0.8], [0.0, -1.0]
    base = single_loss(x, torch.tensor([a, c]), 0, [True, False])
    with_d = single_loss(x, torch.tensor([a, c, d]), 0, [True, False, False])
    assert with_d > base


def test_the_positive_may_be_the_only_label():
    x = torch.tensor([[0.6, 0.8]])
    assert single_loss(x, torch.tensor([[1.0, 0.0]]), 0, [True]) == pytest.approx(0.0, abs=1e-7)


def test_inputs_sharing_a_label_are_not_instance_negatives():
    x = torch.tensor([[1.0, 0.0], [0.8, 0.6]])
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    positive_col = torch.tensor([0, 1])
    is_positive = torch.tensor([[True, False], [True, True]])  # input 1 also has label 0
    shared = torch.tensor([[True, True], [True, True]])
    without = decoupled_infonce(x, z, positive_col, is_positive, None, tau=0.5)
    with_shared = decoupled_infonce(x, z, positive_col, is_positive, shared, tau=0.5)
    assert with_shared.item() == pytest.approx(without.item(), abs=1e-6)
    # Had they shared nothing, each would be the other's negative.
    apart = torch.eye(2, dtype=torch.bool)
    assert decoupled_infonce(x, z, positive_col, is_positive, apart, tau=0.5).item() > without.item()


def test_self_is_never_an_instance_negative():
    x, z, positive_col, is_positive, _ = random_batch(4)
    all_false = torch.zeros(len(x), len(x), dtype=torch.bool)  # diagonal False by mistake
    eye = torch.eye(len(x), dtype=torch.bool)
    assert decoupled_infonce(x, z, positive_col, is_positive, all_false, 0.1).item() == pytest.approx(
        decoupled_infonce(x, z, positive_col, is_positive, eye, 0.1).item(), abs=1e-5)  # fp32, near 6


# --- gradients, stability, autocast -----------------------------------------------------------

@pytest.mark.parametrize("instance_negatives", [False, True])
def test_gradients_reach_inputs_and_labels(instance_negatives):
    x, z, positive_col, is_positive, share = random_batch(5)
    x.requires_grad_(True)
    z.requires_grad_(True)
    loss = decoupled_infonce(x, z, positive_col, is_positive, share if instance_negatives else None, 0.1)
    loss.backward()
    for grad in (x.grad, z.grad):
        assert grad is not None and torch.isfinite(grad).all()
        assert grad.abs().sum() > 0
    # Every input and every sampled positive gets a gradient.
    assert (x.grad.abs().sum(dim=1) > 0).all()
    assert (z.grad[positive_col].abs().sum(dim=1) > 0).all()


def test_stable_with_small_temperature_and_large_logits():
    x, z, positive_col, is_positive, share = random_batch(6)
    x = (x * 30).requires_grad_(True)  # logits up to 30 * 1 / 0.01 = 3000
    z = z.requires_grad_(True)
    loss = decoupled_infonce(x, z, positive_col, is_positive, share, tau=0.01)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(x.grad).all() and torch.isfinite(z.grad).all()
    expected = reference_loss(x.detach(), z.detach(), positive_col, is_positive, share, 0.01)
    assert loss.item() == pytest.approx(expected, abs=0.05)  # fp32 near 44,000: units of 0.004


def test_bf16_autocast_is_close_and_float32():
    x, z, positive_col, is_positive, share = random_batch(7)
    exact = decoupled_infonce(x, z, positive_col, is_positive, share, tau=0.04)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        under_autocast = decoupled_infonce(x, z, positive_col, is_positive, share, tau=0.04)
        from_bf16 = decoupled_infonce(x.bfloat16(), z.bfloat16(), positive_col, is_positive, share, tau=0.04)
    assert under_autocast.dtype == torch.float32
    assert under_autocast.item() == pytest.approx(exact.item(), abs=1e-5)  # fp32 near 10: units of 1e-6
    # bf16 embeddings lose precision before the loss; the result is still close.
    assert from_bf16.item() == pytest.approx(exact.item(), abs=0.5)  # 5% of the loss, near 10


def test_bf16_gradient_reaches_bf16_leaf():
    x, z, positive_col, is_positive, share = random_batch(8)
    x = x.bfloat16().requires_grad_(True)
    z = z.bfloat16().requires_grad_(True)
    decoupled_infonce(x, z, positive_col, is_positive, share, tau=0.04).backward()
    assert x.grad.dtype == torch.bfloat16 and torch.isfinite(x.grad.float()).all()


def test_rejects_a_sampled_positive_not_marked_positive():
    with pytest.raises(ValueError, match="sampled positive"):
        decoupled_infonce(X, Z, POSITIVE_COL, torch.zeros(3, 4, dtype=torch.bool), None, tau=1.0)


def test_rejects_bad_shapes_and_temperature():
    with pytest.raises(ValueError, match="is_positive"):
        decoupled_infonce(X, Z, POSITIVE_COL, IS_POSITIVE[:, :3], None, tau=1.0)
    with pytest.raises(ValueError, match="share_label"):
        decoupled_infonce(X, Z, POSITIVE_COL, IS_POSITIVE, SHARE[:2], tau=1.0)
    with pytest.raises(ValueError, match="tau"):
        decoupled_infonce(X, Z, POSITIVE_COL, IS_POSITIVE, None, tau=0.0)


def test_does_not_modify_the_masks():
    is_positive, share = IS_POSITIVE.clone(), SHARE.clone()
    decoupled_infonce(X, Z, POSITIVE_COL, is_positive, share, tau=1.0)
    assert torch.equal(is_positive, IS_POSITIVE) and torch.equal(share, SHARE)


# --- mask builders -----------------------------------------------------------------------------

def test_batch_label_masks_small_example():
    # Columns in z order: labels 7, 3, 9.  Label 5 of input 1 is not in the batch.
    labels = [np.array([3, 7]), np.array([5, 9]), np.array([], dtype=np.int64)]
    mask = batch_label_masks(labels, np.array([7, 3, 9]))
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[True, True, False], [False, False, True], [False, False, False]]


def test_mask_builders_accept_a_csr_slice():
    y = sp.csr_matrix(np.array([[0, 1, 0, 1, 0],
                                [1, 0, 0, 0, 0],
                                [0, 0, 1, 1, 0],
                                [0, 0, 0, 0, 1]], dtype=np.float32))
    rows = y[[0, 2, 3]]
    as_lists = [np.array([1, 3]), np.array([2, 3]), np.array([4])]
    ids = np.array([3, 4, 2, 0])
    assert torch.equal(batch_label_masks(rows, ids), batch_label_masks(as_lists, ids))
    assert batch_label_masks(rows, ids).tolist() == [[True, False, False, False],
                                                     [True, False, True, False],
                                                     [False, True, False, False]]
    assert torch.equal(shared_label_mask(rows), shared_label_mask(as_lists))


def test_shared_label_mask_small_example():
    labels = [np.array([1, 2]), np.array([2]), np.array([3]), np.array([], dtype=np.int64), np.array([3, 3])]
    shared = shared_label_mask(labels)
    assert shared.dtype == torch.bool
    assert shared.tolist() == [[True, True, False, False, False],
                               [True, True, False, False, False],
                               [False, False, True, False, True],
                               [False, False, False, True, False],
                               [False, False, True, False, True]]


def test_batch_label_masks_rejects_repeated_columns():
    with pytest.raises(ValueError, match="distinct"):
        batch_label_masks([np.array([1])], np.array([1, 2, 1]))


def test_empty_batch_label_set():
    assert batch_label_masks([np.array([1]), np.array([2])], np.array([], dtype=np.int64)).shape == (2, 0)
