"""Evaluation: XC metrics (pyxclib definitions), propensities, macro-F1 per segment, the evaluator, significance."""
