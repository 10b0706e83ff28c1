"""Label prototypes: RAE's label keys unit(z + α·unit(mean of the label's inputs)), worked by hand, and a
memory's weight from its settings (a memory that searches them: tests/memory/test_memory.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import ConfigError
from raexmc.memory.input_memory import MemorySettings, chosen_memory
from raexmc.memory.prototypes import label_prototypes, prototype_weight
from raexmc.settings import load_settings, read_params_tree, settings_from
from tests.helpers import REPO

LABELS = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, -0.8]], dtype=np.float32)
INPUTS = np.array([[0.0, 1.0], [0.6, 0.8], [-1.0, 0.0]], dtype=np.float32)
# input 0 has label 0; input 1 labels 0 and 1; input 2 none; label 2 no input
VALUES = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=np.float64))


def test_prototypes_worked_by_hand_of_graded_values_and_of_a_subset_of_rows():
    """Label 0: its inputs sum to (0.6, 1.8), unit (0.31623, 0.94868); z + 0.5 of that = (1.15811, 0.47434),
    unit (0.92539, 0.37902). Label 1: its one input's unit key (0.6, 0.8); z + 0.5 of it = (0.3, 1.4), unit
    (0.20953, 0.97780). Label 2 has no input and keeps its key."""
    got = label_prototypes(INPUTS, VALUES, LABELS, 0.5)
    want = np.array([[0.92539, 0.37902], [0.20953, 0.97780], [0.6, -0.8]])
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(label_prototypes(INPUTS, VALUES, LABELS, 0.0), LABELS, atol=1e-7)
    graded = VALUES.multiply(np.array([[3.0], [0.5], [1.0]])).tocsr()  # graded values: only which labels count
    np.testing.assert_allclose(label_prototypes(INPUTS, graded, LABELS, 0.5), got, atol=1e-7)
    # the tune stage's memory inputs are rows of the training inputs (1 and 2 here): no copy, the copy's prototypes
    rows = np.array([1, 2])
    np.testing.assert_allclose(label_prototypes(INPUTS, VALUES[rows], LABELS, 0.5, rows=rows),
                               label_prototypes(INPUTS[rows], VALUES[rows], LABELS, 0.5), atol=1e-7)


@pytest.mark.parametrize("setting, keep, backend, chosen, want", [
    ("auto", 0.1, "hnsw", 0.25, 0.25), ("auto", 0.0, "hnsw", 2, 2.0), ("auto", 1.0, "hnsw", None, 0.0),
    ("auto", 1.0, "hnsw", 0.5, 0.0), ("auto", 0.1, "exact", None, 0.0), (0, 1.0, "exact", None, 0.0),
    (0.25, 1.0, "hnsw", None, 0.25), (2, 0.5, "hnsw", 0.5, 2.0)])
def test_weight_from_the_setting(setting, keep, backend, chosen, want):
    """auto takes the tune stage's α below keep 1 with graphs, and is 0 elsewhere; a number stays as written."""
    assert prototype_weight(setting, keep, backend, chosen=chosen) == want


@pytest.mark.parametrize(("setting", "backend", "says"), [
    ("auto", "hnsw", "memory.prototypes auto below keep 1 is chosen by the tune stage"),
    (0.5, "exact", "label prototypes need")])
def test_a_weight_auto_or_on_exact_is_refused_naming_the_key(setting, backend, says):
    """auto below keep 1 without the tune stage's choice; a weight with the exact backend, which builds no graph."""
    with pytest.raises(ConfigError) as caught:
        prototype_weight(setting, 0.5, backend)
    assert caught.value.one_line().startswith(f"ConfigError: params.yaml:memory.prototypes: {says}")


@pytest.mark.parametrize("setting", [-0.5, "half", True, float("nan")])
def test_a_bad_weight_is_refused_naming_the_key(setting):
    with pytest.raises(ConfigError) as caught:
        settings_from(memory_with(prototypes=setting))
    assert caught.value.one_line().startswith("ConfigError: params.yaml:memory.prototypes: ")


def memory_with(**memory) -> dict:
    """The project's params tree with these memory keys."""
    tree = read_params_tree(REPO / "params.yaml")
    tree["memory"].update(memory)
    return tree


def test_the_project_default_keeps_today_s_full_memory(tmp_path):
    """keep 1 with prototypes auto is the label texts' keys: today's memory, the same numbers, with no choice of the
    tune stage needed; below keep 1 the memory stage builds the α the tune stage chose."""
    assert load_settings(REPO / "params.yaml").memory.prototypes == "auto"
    memory = settings_from(memory_with(keep=1.0)).memory
    assert chosen_memory(memory, "hnsw").prototypes == 0.0
    smaller = settings_from(memory_with(keep=0.1)).memory
    (tmp_path / "choice.json").write_text('{"keep": 0.1, "prototypes": 0.25}')
    assert chosen_memory(smaller, "hnsw", tmp_path / "choice.json").prototypes == 0.25
    assert MemorySettings.from_section(smaller, "hnsw", prototypes=1).prototypes == 1.0
    assert chosen_memory(smaller, "exact").prototypes == 0.0, "auto at a size auto searches exactly"
