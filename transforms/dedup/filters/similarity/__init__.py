"""The similarity family (Similarity, +Topics, +NER, +Topics+NER): decision, candidates, Beam stage."""
