"""Per-chunk features: the embedding model and its kernels, entities, MinHash, topics, their cache."""
