"""RAE inference: the RAE model (label scores from retrieved keys: softmax over them, times V), top-k ranking, and
the self-contained folder it saves to and loads from."""
