"""The knowledge memory: keys K = [X; Z] and values V, and the nearest-key indexes that search the keys."""
