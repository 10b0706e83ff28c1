"""The training history as the table DVC plots."""

from raexmc.training.train import as_table


def test_as_table_gives_every_row_every_column_with_none_where_a_round_had_no_value():
    history = [{"step": 0, "elapsed_s": 1.0, "val_rae_P@1": 40.0},
               {"step": 2, "elapsed_s": 3.0, "loss": 1.5, "lr": 1e-4, "val_rae_P@1": 45.0},
               {"step": 4, "elapsed_s": 5.0, "loss": 1.2, "val_rae_P@1": 50.0}]
    assert as_table(history) == [
        {"elapsed_s": 1.0, "loss": None, "lr": None, "step": 0, "val_rae_P@1": 40.0},
        {"elapsed_s": 3.0, "loss": 1.5, "lr": 1e-4, "step": 2, "val_rae_P@1": 45.0},
        {"elapsed_s": 5.0, "loss": 1.2, "lr": None, "step": 4, "val_rae_P@1": 50.0}]
    assert as_table([]) == []
