"""Answering questions over a built index: ranking, metadata filters, the Retriever."""
