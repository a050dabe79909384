"""A cache of per-chunk features and per-document spans, keyed by exact text.

A rebuild then computes only what is new: chunk spans of changed documents
(tokenizing, and for the semantic chunkers embedding pieces), and the
embedding, entities and MinHash signature of chunks whose text is new.

Layout under a cache root (local or any Beam filesystem):

    ROOT/<feature>/<settings_id>/settings.json                   what the values depend on
    ROOT/<feature>/<settings_id>/<generation>/part-*-of-*.parquet  text_key -> value, sharded by key
    ROOT/<feature>/<settings_id>/<generation>/COMPLETE           written after the run succeeded

`settings_id` hashes everything besides the text that determines a value
(model weights and versions, labels, MinHash parameters), so a changed
setting selects a new, empty directory instead of serving stale values. A
generation is a snapshot: the entries of every chunk of one successful run.
Reads take the newest complete generation and, once a newer one is complete,
the older ones are deleted, so the cache holds one corpus' worth of entries
and those of deleted text go away with the next run. A generation without
COMPLETE (a killed run) is never read.

Every entry carries a checksum of its key and value (`entry_check`), and is
verified when read: a part or row group that cannot be decoded, or an entry
whose checksum fails (or an embedding that is no finite unit vector), is a
miss, computed again, with one warning naming the part. A damaged cache
costs time, never a wrong value: the build's output equals a cold build's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import posixpath
from typing import Iterable, Iterator, Mapping, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from transforms import storage
from transforms.features.cache_settings import CACHED_FEATURES, CHUNK_FEATURES, SPANS, CacheSpec, other_kernels
from transforms.features.precision import TORCH
from transforms.output import tables
from transforms.output.publish import split_complete
from transforms.output.writers import WriteTable, write_parts
from transforms.storage import delete_trees, read_bytes, write_bytes, write_json
from transforms.text import text_key
from transforms.types import Chunk
from transforms.validate import vector_problem

LOG = logging.getLogger('ragsieve.cache')

VALUE_TYPES = {
    'embedding': pa.list_(pa.float32()),
    'entities': pa.list_(pa.string()),
    'minhash': pa.list_(pa.uint64()),
    # (char_start, char_end, n_tokens) of each chunk, flattened.
    SPANS: pa.list_(pa.int64()),
}
# `--cache none`: the flag value that turns the cache off, in every job.
NO_CACHE = 'none'
COMPLETE_FILE = 'COMPLETE'
SETTINGS_FILE = 'settings.json'


def chunk_value(feature: str, chunk: Chunk):
    """The chunk's value of `feature`, None when not computed."""
    return getattr(chunk, feature)


def with_value(feature: str, chunk: Chunk, value) -> Chunk:
    """The chunk with `feature` set to a value read back from the cache."""
    return dataclasses.replace(chunk, **{feature: typed_value(feature, value)})


# The column of each entry's checksum (`entry_check`); a generation without it is not read.
CHECK_COLUMN = 'check'


def entries_schema(feature: str) -> pa.Schema:
    return pa.schema([('key', pa.string()), ('value', VALUE_TYPES[feature]), (CHECK_COLUMN, pa.uint64())])


def entry_check(feature: str, key: str, value) -> int:
    """A 64-bit checksum of one entry: its feature, key and value, as `typed_value` reads it back.

    Written with the entry and compared when it is read: a flipped byte in
    a part that still decodes changes the value, and so fails the check.
    """
    value = typed_value(feature, value)
    if feature in ('embedding', 'minhash'):
        data = value.tobytes()
    else:
        data = json.dumps(value, ensure_ascii=False).encode('utf-8')
    digest = hashlib.blake2b(key.encode('utf-8') + b'\0' + data, digest_size=8, person=feature.encode()[:16])
    return int.from_bytes(digest.digest(), 'big')


def entries_spec(feature: str) -> tables.TableSpec:
    """The entries table of a feature: sharded and sorted by key, one row per key."""
    return tables.TableSpec('', entries_schema(feature), 'key', ('key',), unique=True)


def entry_row(entry: tuple[str, object], feature: str) -> dict:
    """A `(key, value)` entry as a row of `entries_spec(feature)`."""
    key, value = entry
    if feature in ('embedding', 'minhash'):
        value = np.asarray(value)
    elif feature == SPANS:
        value = [x for triple in value for x in triple]
    else:
        value = list(value)
    return {'key': key, 'value': value, CHECK_COLUMN: entry_check(feature, key, value)}


def entries_table(feature: str, entries: Iterable[tuple[str, object]]) -> pa.Table:
    """Cache entries as one table sorted by key, one row per key (equal keys hold equal values)."""
    return tables.part_table((entry_row(e, feature) for e in entries), entries_spec(feature))


def entry_problem(feature: str, key, value, check) -> Optional[str]:
    """Why a read entry must not be used (its checksum fails, an implausible embedding), or None."""
    if not isinstance(key, str) or value is None or check != entry_check(feature, key, value):
        return 'checksum mismatch'
    if feature == 'embedding':
        return vector_problem(typed_value(feature, value))
    return None


def verified_entries(path: str, feature: str) -> Iterator[tuple[str, object]]:
    """The entries of one part file that pass their checks, read one row group at a time.

    What cannot be decoded (a row group, the whole file) or fails its check
    is left out, a miss the run computes again, and one warning names the
    file with what it lost; counter `cache.<feature>_damaged` counts them.
    """
    import pyarrow.parquet as pq

    damaged = Metrics.counter('cache', f'{feature}_damaged')
    bad, lost_groups, why = 0, 0, None
    try:
        with storage.open_read(path) as f:
            part = pq.ParquetFile(f)
            for group in range(part.num_row_groups):
                try:
                    table = part.read_row_group(group, columns=['key', 'value', CHECK_COLUMN])
                except Exception as e:  # pyarrow raises several types for damaged pages
                    lost_groups += 1
                    why = why or _error_line(e)
                    continue
                for key, value, check in zip(*(table.column(c).to_pylist() for c in table.column_names)):
                    problem = entry_problem(feature, key, value, check)
                    if problem is None:
                        yield key, value
                    else:
                        bad += 1
                        why = why or problem
    except Exception as e:  # a footer or a file that cannot be opened: nothing of it is used
        lost_groups, why = lost_groups + 1, _error_line(e)
    if bad or lost_groups:
        damaged.inc(bad + lost_groups)
        lost = [f'{bad} entries fail their check'] if bad else []
        lost += [f'{lost_groups} row groups cannot be read'] if lost_groups else []
        LOG.warning('feature cache part %s is damaged (%s; first: %s): what it lost is computed again',
                    path, ', '.join(lost), why)


def _files(pattern: str) -> list[tuple[str, float]]:
    return [(f.path, f.mtime) for f in storage.match(pattern)]


def split_generations(files: Iterable[tuple[str, float]]) -> tuple[list[str], list[str]]:
    """Groups `(path, mtime)` of files `.../<generation>/<name>` into `(complete, incomplete)`
    generation dirs (see `write.split_complete`; the marker is COMPLETE)."""
    return split_complete(((*posixpath.split(path), mtime) for path, mtime in files), COMPLETE_FILE)


def generations(directory: str) -> tuple[list[str], list[str]]:
    """The `(complete, incomplete)` generation dirs of one settings directory."""
    return split_generations(_files(posixpath.join(directory, '*', '*')))


@dataclasses.dataclass(frozen=True)
class CacheRun:
    """What one run reads from and writes to a feature cache.

    Attributes:
      root: The cache root.
      specs: One spec per feature the run computes.
      generation: Name of the generation this run writes (its run id).
      read_from: Per feature, the newest complete generation directory, or
        None when there is none yet.
      num_shards: Parts of each entries table this run writes.
    """

    root: str
    specs: tuple[CacheSpec, ...]
    generation: str
    read_from: Mapping[str, Optional[str]]
    num_shards: int = 1

    @classmethod
    def open(cls, root: str, specs: Iterable[CacheSpec], generation: str, num_shards: int = 1) -> 'CacheRun':
        """Finds the newest complete generation of each spec's directory."""
        specs = tuple(specs)
        read_from = {}
        for spec in specs:
            complete, _ = generations(spec.directory(root))
            read_from[spec.feature] = newest_readable(complete)
            if spec.feature == 'embedding' and read_from[spec.feature] is None:
                _say_if_other_kernels(root, spec)
        return cls(root.rstrip('/'), specs, generation, read_from, num_shards)

    def entries_dir(self, spec: CacheSpec) -> str:
        """Where this run writes the parts of one feature's entries."""
        return posixpath.join(spec.directory(self.root), self.generation)

    def spec_of(self, feature: str) -> CacheSpec:
        return next(s for s in self.specs if s.feature == feature)

    def features(self, among: Iterable[str] = CACHED_FEATURES) -> tuple[str, ...]:
        """The cached features of this run, among `among`."""
        among = set(among)
        return tuple(s.feature for s in self.specs if s.feature in among)

    def write_entries(self, feature: str, entries: Iterable[tuple[str, object]]) -> None:
        """Writes this run's generation of one feature in this process (it counts once `commit` ran)."""
        write_parts((entry_row(e, feature) for e in entries), entries_spec(feature),
                          self.entries_dir(self.spec_of(feature)), self.num_shards)

    def commit(self) -> None:
        """Marks this run's generations complete; call only after the pipeline succeeded."""
        for spec in self.specs:
            directory = spec.directory(self.root)
            write_json(posixpath.join(directory, SETTINGS_FILE), dict(spec.settings))
            # Not empty: an object store's writer may not write an empty object.
            write_bytes(posixpath.join(directory, self.generation, COMPLETE_FILE), f'{self.generation}\n'.encode())

    def discard(self) -> None:
        """Deletes this run's generation before its commit: a failed run leaves no entries behind.

        Called as a run fails: a store that cannot delete (the store itself
        lost) is said and the run's own error stands; the next build deletes
        the uncommitted generation (`delete_incomplete`).
        """
        try:
            delete_trees([self.entries_dir(spec) for spec in self.specs])
        except Exception as e:  # noqa: BLE001 - the failed run's error matters more
            LOG.warning('could not delete the uncommitted cache generation %s (the next build will): %s',
                        self.generation, ' '.join(str(e).split())[:300])

    def prune(self) -> None:
        """Deletes every generation of this run's settings but the one it wrote."""
        for spec in self.specs:
            complete, incomplete = generations(spec.directory(self.root))
            old = [g for g in complete + incomplete if posixpath.basename(g) != self.generation]
            delete_trees(old)


def _say_if_other_kernels(root: str, spec: CacheSpec) -> None:
    """Says in one line when the cache holds this model's embeddings from another kernel family (another CPU)."""
    cached = []
    for info in storage.match(posixpath.join(root, spec.feature, '*', SETTINGS_FILE)):
        try:
            cached.append(json.loads(read_bytes(info.path)))
        except (OSError, ValueError):  # unreadable settings name nothing usable; their entries are not read
            continue
    other = other_kernels(spec.settings, [c for c in cached if isinstance(c, dict)])
    if other is None:
        return
    # Settings name the backend only off their precision's own (OpenVINO in fp32).
    theirs, ours = other.get('backend', TORCH), spec.settings.get('backend', TORCH)
    if theirs != ours:
        LOG.warning('feature cache %s holds embeddings of other kernels (probe %s, on %s; this build computes %s '
                    'on %s): every chunk is embedded again, none mixed. --embed_backend %s reads them',
                    root, other.get('kernels'), theirs, spec.settings.get('kernels'), ours, theirs)
    else:
        LOG.warning('feature cache %s holds embeddings of other kernels (probe %s; this CPU computes %s): every '
                    'chunk is embedded again, none mixed. --embed_kernels portable gives every CPU the same bits',
                    root, other.get('kernels'), spec.settings.get('kernels'))


def _error_line(error: Exception) -> str:
    return f'{type(error).__name__}: ' + ' '.join(str(error).split())[:200]


def generation_problem(generation: str) -> Optional[str]:
    """Why a complete generation cannot be read, in one line naming the file, or None (footers only).

    A generation written before entries carried checksums (no `check`
    column, or one `entries.parquet`) cannot be verified: it is not read.
    """
    return tables.table_problem(generation, ('key', 'value', CHECK_COLUMN))


def newest_readable(complete: list[str]) -> Optional[str]:
    """The newest of the complete generations that can be read, or None.

    A damaged generation (a part deleted or overwritten) must not fail every
    later run: it is warned of and passed over, and what it held is computed
    again and written to this run's generation.
    """
    for generation in reversed(complete):
        problem = generation_problem(generation)
        if problem is None:
            return generation
        LOG.warning('a feature cache generation cannot be read, so it is not used: %s', problem)
    return None


def read_entries(generation: str, feature: str) -> dict[str, object]:
    """All verified entries of one generation, values as `with_value` sets them (evaluation: it holds them all)."""
    return {key: typed_value(feature, value) for path in tables.part_paths(generation)
            for key, value in verified_entries(path, feature)}


def typed_value(feature: str, value):
    """A value as read from a table, in the type its stage uses (arrays, tuples)."""
    if feature == 'embedding':
        return np.asarray(value, dtype=np.float32)
    if feature == 'minhash':
        return np.asarray(value, dtype=np.uint64)
    if feature == SPANS:
        return tuple(tuple(value[i : i + 3]) for i in range(0, len(value), 3))
    return tuple(value)


def delete_incomplete(root: str) -> list[str]:
    """Deletes the generations killed runs left anywhere under `root`; returns them.

    Only safe while no other run writes to the cache (see `snapshots.lock`).
    """
    _, incomplete = split_generations(_files(posixpath.join(root, '*', '*', '*', '*')))
    delete_trees(incomplete)
    return incomplete


class _AttachCachedFn(beam.DoFn):
    def __init__(self, features: tuple[str, ...]):
        self._features = features
        self._hits = {f: Metrics.counter('cache', f'{f}_hits') for f in features}
        self._misses = {f: Metrics.counter('cache', f'{f}_misses') for f in features}

    def process(self, element) -> Iterable[Chunk]:
        _, groups = element
        cached = {f: next(iter(groups[f]), None) for f in self._features}
        for chunk in groups['chunks']:
            for feature, value in cached.items():
                if value is None:
                    self._misses[feature].inc()
                else:
                    self._hits[feature].inc()
                    chunk = with_value(feature, chunk, value)
            yield chunk


def _keyed(chunk: Chunk) -> tuple[str, Chunk]:
    return text_key(chunk.text), chunk


class JoinCachedFeatures(beam.PTransform):
    """PCollection[Chunk] -> PCollection[Chunk] with every cached feature set.

    A keyed join (CoGroupByKey on the text key) of the chunks with each
    feature's newest complete generation; the cache is never a side input.
    Features not in the cache stay None for the compute stages to fill.
    Counters `cache.<feature>_hits` / `_misses` count chunks.
    """

    def __init__(self, cache: CacheRun):
        super().__init__()
        self._cache = cache

    def expand(self, chunks):
        features = self._cache.features(CHUNK_FEATURES)
        inputs = {'chunks': chunks | 'KeyByText' >> beam.Map(_keyed)}
        for feature in features:
            inputs[feature] = chunks.pipeline | f'{feature.title()}Cache' >> ReadCacheEntries(self._cache, feature)
        return (
            inputs
            | 'JoinOnTextKey' >> beam.CoGroupByKey()
            | 'AttachCached' >> beam.ParDo(_AttachCachedFn(features))
        )


class ReadCacheEntries(beam.PTransform):
    """PBegin -> PCollection[(key, value)]: the verified entries of one feature's newest complete generation.

    One part per element (`verified_entries`): a worker holds one part's row
    group at a time, and a damaged part costs its own entries only.
    """

    def __init__(self, cache: CacheRun, feature: str):
        super().__init__()
        self._feature = feature
        path = cache.read_from[feature]
        self._parts = [] if path is None else tables.part_paths(path)

    def expand(self, pbegin):
        return (
            pbegin
            | 'Parts' >> beam.Create(self._parts)
            | 'VerifiedEntries' >> beam.FlatMap(verified_entries, self._feature)
        )


class WriteCacheEntries(beam.PTransform):
    """PCollection[(key, value)] -> this run's generation of one feature: parts sharded by key.

    Written like the output tables (`writers.WriteTable`), one part per
    worker at a time; the generation counts only once `CacheRun.commit`
    marks it complete.
    """

    def __init__(self, cache: CacheRun, feature: str):
        super().__init__()
        self._cache = cache
        self._feature = feature

    def expand(self, entries):
        cache, feature = self._cache, self._feature
        return (
            entries
            | 'Rows' >> beam.Map(entry_row, feature)
            | 'Write' >> WriteTable(entries_spec(feature), cache.entries_dir(cache.spec_of(feature)),
                                    cache.num_shards, namespace='cache')  # not the build's `write` parts
        )


def _entries(chunk: Chunk, feature: str) -> Iterator[tuple[str, object]]:
    value = chunk_value(feature, chunk)
    if value is not None:
        yield text_key(chunk.text), value


class WriteFeatureCache(beam.PTransform):
    """PCollection[Chunk] (kept and dropped) -> this run's generation of each per-chunk feature.

    Features are computed lazily (`stages.feature_plan`): a chunk dropped
    before a feature's first use has none, and writes no entry for it.
    """

    def __init__(self, cache: CacheRun):
        super().__init__()
        self._cache = cache

    def expand(self, chunks):
        for feature in self._cache.features(CHUNK_FEATURES):
            name = feature.title()
            _ = (
                chunks
                | f'{name}CacheEntries' >> beam.FlatMap(_entries, feature)
                | f'Write{name}Cache' >> WriteCacheEntries(self._cache, feature)
            )
        return chunks.pipeline
