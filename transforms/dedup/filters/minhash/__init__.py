"""MinHash-LSH: the decision and its Beam stage."""
