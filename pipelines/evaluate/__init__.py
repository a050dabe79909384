"""The evaluation job: the chunk-filtering study's grid (chunkers x filters) scored on a QA or IR dataset."""
