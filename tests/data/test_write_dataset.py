"""write_dataset: the label matrices it stores, by hand."""

from __future__ import annotations

import numpy as np

from raexmc.data.dataset import Dataset, Example, Text, write_dataset


def test_label_rows_keep_order_sum_repeats_and_allow_empty_rows(tmp_path):
    labels = [Text(f"l{i}", f"label {i}") for i in range(4)]
    train = [Example("a", "x", labels=[3, 1, 3], relevance=[1.0, 2.0, 5.0]), Example("b", "y", labels=[]),
             Example("c", "z", labels=[0])]
    test = [Example("d", "w", labels=[2, 0])]

    write_dataset(tmp_path / "ds", labels, train, test, {"test": [(0, 1)]}, {"source": "hand"})

    data = Dataset(tmp_path / "ds")
    Y_train, Y_test = data.label_matrix("train"), data.label_matrix("test")
    np.testing.assert_array_equal(Y_train.toarray(), [[0, 2, 0, 6], [0, 0, 0, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(Y_test.toarray(), [[1, 0, 1, 0]])
    assert Y_train.dtype == np.float32 and Y_train.has_canonical_format
    np.testing.assert_array_equal(data.filter_matrix("test").toarray(), [[False, True, False, False]])
    assert data.stats["N_train"] == 3 and data.stats["L"] == 4
