"""The build's stages, assembled: documents -> chunks -> filtered, embedded chunks -> tables and indexes."""

from __future__ import annotations

from typing import Optional

import apache_beam as beam

from pipelines.build_index.options import BuildConfig
from transforms.chunking.chunk_documents import ChunkDocuments
from transforms.dedup.stages import FilterChunks
from transforms.features import cache as feature_cache
from transforms.features.embedding import SharedModel
from transforms.ingest import read
from transforms.lineage import lossless, represents
from transforms.output.writers import WriteIndex
from transforms.types import Chunk, Dropped


def build_pipeline(
    p: beam.Pipeline,
    config: BuildConfig,
    output: str,
    dim: int,
    model: Optional[SharedModel] = None,
    cache: Optional[feature_cache.CacheRun] = None,
) -> dict:
    """Adds the build stages to `p`, writing under `output`.

    Args:
      p: The pipeline.
      config: The validated build settings.
      output: Directory the outputs are written to.
      dim: Embedding dimension (for an empty index).
      model: Handle of the embedding model; a new one by default. Passing the
        handle the launcher already loaded lets an in-process runner reuse it.
      cache: The feature cache to read and to write this run's generation
        to; per-chunk features are computed only for chunks it misses.

    Returns:
      The PCollections 'documents', 'rejected', 'chunks' (before filtering,
      with cached features only: the rest are computed lazily), 'kept'
      (Chunk: the index's rows, kept chunks, all embedded, with `represents`,
      and delta chunks) and 'dropped' (Dropped, with the features each chunk
      had when dropped).
    """
    model = model or SharedModel.of(config.embedding)
    inputs = p | 'ReadDocuments' >> read.ReadDocuments(
        config.input, config.max_doc_chars, config.max_file_bytes, config.max_metadata_bytes)
    chunks = inputs['documents'] | 'ChunkDocuments' >> ChunkDocuments(
        model, config.chunker, config.embedding.batch_size, cache)
    if cache:
        chunks = chunks | 'JoinCachedFeatures' >> feature_cache.JoinCachedFeatures(cache)
    # Features are computed lazily, just before the first filter that needs
    # each; the kept chunks come out embedded.
    filtered = chunks | 'FilterChunks' >> FilterChunks(config.filters, model, config.embedding)
    kept = filtered['kept']
    if cache:
        _ = ((kept, filtered['dropped'] | 'DroppedChunks' >> beam.Map(dropped_chunk))
             | 'FilteredChunks' >> beam.Flatten()
             | 'WriteFeatureCache' >> feature_cache.WriteFeatureCache(cache))
    traced = {'documents': inputs['documents'], 'kept': kept, 'dropped': filtered['dropped']} | (
        'TraceDuplicates' >> represents.TraceDuplicates(
            len(config.filters.specs), config.filters.deltas, config.filters.semantic_deltas, model,
            config.embedding))
    kept = traced['chunks']
    _ = traced['tallies'] | 'WriteLosslessAudit' >> lossless.WriteLosslessAudit(output)
    _ = {
        'chunks': kept, 'rejected': inputs['rejected'], 'dropped': filtered['dropped'],
        'documents': inputs['documents'],
    } | 'WriteIndex' >> WriteIndex(output, dim, config.num_shards, config.index)
    return {
        'documents': inputs['documents'], 'rejected': inputs['rejected'], 'chunks': chunks,
        'kept': kept, 'dropped': filtered['dropped'],
    }


def dropped_chunk(dropped: Dropped) -> Chunk:
    """The chunk of a dropped row, with the features it had when dropped."""
    return dropped.chunk
