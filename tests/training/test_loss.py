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


def csr(labels: list, width: int = 20) -> sp.csr_matrix:
    """The label rows of a batch, one list of label ids per input, as the label matrix's CSR rows."""
    return sp.csr_matrix((np.ones(sum(map(len, labels))), np.concatenate([np.asarray(row, np.int64) for row in labels]),
                          np.cumsum([0, *map(len, labels)])), shape=(len(labels), width))


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
    is_positive = batch_label_masks(csr(labels), batch_ids)
    share = shared_label_mask(csr(labels))
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


# Label negatives only, tau 1:
# loss0: numerator e^1; col 2 (L2) is another positive of input 0, so it is dropped;
#        denominator e^1 + e^0 (col 1) + e^-1 (col 3)          -> log(e + 1 + 1/e) - 1 = 0.4076
# loss1: numerator e^1; negatives cols 0, 2, 3: e^0 + e^1 + e^0 -> log(2e + 2) - 1    = 1.0064
# loss2: numerator e^-1; negatives cols 0, 1, 3: 1 + 1/e + 1     -> log(2 + 2/e) + 1   = 2.0064
# mean = (0.4076 + 1.0064 + 2.0064) / 3 = 1.1401
# With instance negatives:
# loss0: adds x1 (logit 0) only; x2 shares L2 with x0      -> log(e + 1 + 1/e + 1) - 1
# loss1: adds x0 (0) and x2 (-1)                            -> log(2e + 2 + 1 + 1/e) - 1
# loss2: adds x1 (-1) only; x0 shares L2                    -> log(2 + 2/e + 1/e) + 1
# tau = 0.5 doubles every logit: loss0 = log(e^2 + 1 + e^-2) - 2, and so on.
@pytest.mark.parametrize(("share", "tau", "expected"), [
    (None, 1.0, ((math.log(E + 1 + 1 / E) - 1) + (math.log(2 * E + 2) - 1) + (math.log(2 + 2 / E) + 1)) / 3),
    (SHARE, 1.0, ((math.log(E + 2 + 1 / E) - 1) + (math.log(2 * E + 3 + 1 / E) - 1) + (math.log(2 + 3 / E) + 1)) / 3),
    (None, 0.5, ((math.log(E**2 + 1 + E**-2) - 2) + (math.log(2 * E**2 + 2) - 2) + (math.log(2 + 2 * E**-2) + 2)) / 3)])
def test_worked_example(share, tau, expected):
    is_positive, masks = IS_POSITIVE.clone(), (SHARE.clone() if share is not None else None)
    loss = decoupled_infonce(X, Z, POSITIVE_COL, is_positive, masks, tau=tau)
    assert loss.item() == pytest.approx(expected, abs=1e-6)  # fp32 losses near 1: a few units of 1.2e-7
    assert torch.equal(is_positive, IS_POSITIVE) and (share is None or torch.equal(masks, SHARE)), "masks unchanged"
    if share is None and tau == 1.0:
        assert loss.item() == pytest.approx(1.1401, abs=1e-4)


def test_worked_example_masks_from_label_ids():
    labels = csr([[10, 12], [11], [12]])
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


# --- decoupling --------------------------------------------------------------------------------

def single_loss(x, z, positive_col, is_positive, tau=0.5):
    return decoupled_infonce(x, z, torch.tensor([positive_col]), torch.tensor([is_positive]), None, tau).item()


def test_another_positive_in_the_batch_leaves_the_loss_and_a_negative_raises_it():
    x = torch.tensor([[0.6, 0.8]])
    # Input has positives {A, B}; batch labels [A (sampled), C] then [A, C, B]; D is no positive.
    a, b, c, d = [1.0, 0.0], [0.0, 1.0], [-0.6, 0.8], [0.0, -1.0]
    base = single_loss(x, torch.tensor([a, c]), 0, [True, False])
    assert single_loss(x, torch.tensor([a, c, b]), 0, [True, False, True]) == pytest.approx(base, abs=1e-7)
    # Not decoupling (B treated as a negative) would have changed it.
    assert single_loss(x, torch.tensor([a, c, b]), 0, [True, False, False]) > base
    assert single_loss(x, torch.tensor([a, c, d]), 0, [True, False, False]) > base
    # The positive may be the only label.
    assert single_loss(x, torch.tensor([a]), 0, [True]) == pytest.approx(0.0, abs=1e-7)


def test_inputs_sharing_a_label_are_not_instance_negatives_but_inputs_sharing_none_are():
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
    # on a random batch too, and the diagonal (self) is never a negative, set or not
    x, z, positive_col, is_positive, _ = random_batch(3)
    nothing_shared = torch.eye(len(x), dtype=torch.bool)
    without = decoupled_infonce(x, z, positive_col, is_positive, None, tau=0.1)
    with_instances = decoupled_infonce(x, z, positive_col, is_positive, nothing_shared, tau=0.1)
    assert with_instances.item() > without.item()
    all_false = torch.zeros(len(x), len(x), dtype=torch.bool)  # diagonal False by mistake
    assert decoupled_infonce(x, z, positive_col, is_positive, all_false, 0.1).item() == pytest.approx(
        with_instances.item(), abs=1e-5)  # fp32, near 6


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


def test_bf16_autocast_is_close_and_float32_and_a_bf16_leaf_gets_its_gradient():
    x, z, positive_col, is_positive, share = random_batch(7)
    exact = decoupled_infonce(x, z, positive_col, is_positive, share, tau=0.04)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        under_autocast = decoupled_infonce(x, z, positive_col, is_positive, share, tau=0.04)
        from_bf16 = decoupled_infonce(x.bfloat16(), z.bfloat16(), positive_col, is_positive, share, tau=0.04)
    assert under_autocast.dtype == torch.float32
    assert under_autocast.item() == pytest.approx(exact.item(), abs=1e-5)  # fp32 near 10: units of 1e-6
    # bf16 embeddings lose precision before the loss; the result is still close.
    assert from_bf16.item() == pytest.approx(exact.item(), abs=0.5)  # 5% of the loss, near 10
    x = x.bfloat16().requires_grad_(True)  # a bf16 leaf gets a bf16 gradient
    decoupled_infonce(x, z.bfloat16(), positive_col, is_positive, share, tau=0.04).backward()
    assert x.grad.dtype == torch.bfloat16 and torch.isfinite(x.grad.float()).all()


@pytest.mark.parametrize(("is_positive", "share", "tau", "error"), [
    (torch.zeros(3, 4, dtype=torch.bool), None, 1.0, "sampled positive"),
    (IS_POSITIVE[:, :3], None, 1.0, "is_positive"), (IS_POSITIVE, SHARE[:2], 1.0, "share_label"),
    (IS_POSITIVE, None, 0.0, "tau")])
def test_rejects_bad_masks_and_temperature(is_positive, share, tau, error):
    with pytest.raises(ValueError, match=error):
        decoupled_infonce(X, Z, POSITIVE_COL, is_positive, share, tau=tau)


# --- mask builders -----------------------------------------------------------------------------

def test_mask_builders_small_examples():
    # Columns in z order: labels 7, 3, 9; label 5 of input 1 is not in the batch; a relevance of 0 is no label.
    labels = csr([[3, 7], [5, 9], []])
    mask = batch_label_masks(labels, np.array([7, 3, 9]))
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[True, True, False], [False, False, True], [False, False, False]]
    weighted = sp.csr_matrix(([0.5, 0.0, 1.0, 2.0], [1, 3, 0, 3], [0, 2, 4]), shape=(2, 4))  # (0, 3) stored as 0
    assert batch_label_masks(weighted, np.array([3, 1, 0])).tolist() == [[False, True, False], [True, False, True]]
    assert batch_label_masks(labels, np.array([], dtype=np.int64)).shape == (3, 0)
    shared = shared_label_mask(csr([[1, 2], [2], [3], [], [3, 3]]))
    assert shared.dtype == torch.bool
    assert shared.tolist() == [[True, True, False, False, False],
                               [True, True, False, False, False],
                               [False, False, True, False, True],
                               [False, False, False, True, False],
                               [False, False, True, False, True]]
    with pytest.raises(ValueError, match="distinct"):
        batch_label_masks(csr([[1]]), np.array([1, 2, 1]))


def test_a_stored_zero_relevance_leaves_the_callers_matrix_and_the_next_mask_intact():
    """plan_batch builds both masks from one float32 label matrix; a stored 0 (LF and NGAME files allow one) must
    not compact that matrix's indices under its data, which would drop input 1's label 2 from the shared mask."""
    labels = sp.csr_matrix((np.array([1, 0, 1, 1], dtype=np.float32), [0, 1, 2, 2], [0, 2, 3, 4]), shape=(3, 3))
    before = labels.toarray()
    assert batch_label_masks(labels, np.array([0, 1, 2])).tolist() == [[True, False, False], [False, False, True],
                                                                       [False, False, True]]
    np.testing.assert_array_equal(labels.toarray(), before)
    assert shared_label_mask(labels).tolist() == [[True, False, False], [False, True, True], [False, True, True]]
