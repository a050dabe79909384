"""Intra-doc (klarRAG): the decision and its Beam stage."""
