"""Cutting documents into chunks: the pure chunkers and the ChunkDocuments stage."""
