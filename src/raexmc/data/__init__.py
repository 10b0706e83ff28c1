"""Datasets: sources, on-disk layouts, and the normalised dataset folder every stage reads."""
