"""The shared encoder: load it, tokenise texts (one recipe) into a cache, and encode them into unit vectors."""
