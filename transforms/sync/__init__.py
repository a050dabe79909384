"""Syncing a published run into the vector stores RAG services read: rows, stores, the sync itself."""
