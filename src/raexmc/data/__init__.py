"""Datasets: sources and on-disk layouts, the catalogue, the normalised dataset folder, label-frequency segments."""
