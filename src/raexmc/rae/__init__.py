"""RAE inference: label scores from retrieved keys (softmax over them, times the values), top-k ranking, and the Predictor for raw texts."""
