"""rae-xmc: extreme multi-label classification with Retrieval-augmented Encoders."""

__version__ = "0.1.0"
