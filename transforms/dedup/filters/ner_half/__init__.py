"""NER Half: the decision and its Beam stage."""
