"""What the redundancy filters share: their selection and settings, the keep rule, the in-memory dispatch.

Holds `FilterSpec`, `parse_filters` and `FilterConfig` (which filters run,
in order, with what settings), `keep_order_key` (the one rule deciding which
chunk of a redundant group survives), the helpers the decisions share and
`apply_filter`. Each filter's pure decision lives in its module of
`transforms.filters` (the study's filters, Section 3.5, plus klarRAG's
`intra_doc`) and returns `(kept, dropped)`: `len(kept) + len(dropped) ==
len(chunks)`, both in input order, each `Dropped` naming the filter, the kept
chunk it duplicates and the score behind the decision.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from transforms.entities import DEFAULT_LABELS, DEFAULT_NER_MODEL
from transforms import scope
from transforms.minhash import MinHashConfig
from transforms.types import Chunk, Dropped

# `cascade`: cheap lexical filters corpus-wide, then the per-document semantic one.
CASCADE = ('exact', 'minhash', 'intra_doc')

# Cosines are computed from float32 vectors, so a vector's cosine with an
# identical copy can come out as 0.99999994; scores this close to the
# threshold count as reaching it.
SIM_EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class FilterSpec:
    """One filter to apply, with its threshold.

    Unpacks as `name, threshold = spec`.

    Attributes:
      name: A filter of the registry (`transforms.filters`).
      threshold: Cosine (`similarity*`, `intra_doc`), estimated Jaccard
        (`minhash`) or fraction of chunks to drop (`random`); None for the
        filters that take none (`exact`, `ner_*`). Filled from
        the filter's registered default when not given.
    """

    name: str
    threshold: Optional[float] = None

    def __post_init__(self):
        from transforms import filters

        default = filters.get(self.name).default
        if default is None:
            if self.threshold is not None:
                raise ValueError(f'filter {self.name!r} takes no threshold, got {self.threshold}')
            return
        if self.threshold is None:
            object.__setattr__(self, 'threshold', default)
            return
        t = float(self.threshold)
        if self.name == 'random':
            if not 0.0 <= t <= 1.0:
                raise ValueError(f'random ratio must be in [0, 1], got {t}')
        elif not 0.0 < t <= 1.0:
            raise ValueError(f'{self.name} threshold must be in (0, 1], got {t}')
        object.__setattr__(self, 'threshold', t)

    def __iter__(self):
        yield self.name
        yield self.threshold


def parse_filters(spec: str) -> list[FilterSpec]:
    """Parses a comma-separated filter list such as `exact,minhash@0.7,random@0.4`.

    Each item is `name` or `name@threshold`; `cascade` expands to
    `exact,minhash,intra_doc` with default thresholds, and `none` alone gives
    no filters. Order is kept: it is the order the filters run in.

    Args:
      spec: The filter list.

    Returns:
      The filters, thresholds filled from the registry's defaults where omitted.

    Raises:
      ValueError: For an empty item, unknown name, threshold on a filter that
        takes none, unparsable or out-of-range threshold, or a filter listed
        twice.
    """
    items = [item.strip() for item in spec.split(',')]
    if items == ['none']:
        return []
    out: list[FilterSpec] = []
    for item in items:
        if not item:
            raise ValueError(f'empty filter name in {spec!r}')
        name, sep, value = item.partition('@')
        name = name.strip()
        if name == 'cascade':
            if sep:
                raise ValueError(f'cascade takes no threshold, got {item!r}')
            out.extend(FilterSpec(n) for n in CASCADE)
            continue
        threshold = None
        if sep:
            try:
                threshold = float(value)
            except ValueError:
                raise ValueError(f'bad threshold in {item!r}') from None
            if not math.isfinite(threshold):
                raise ValueError(f'bad threshold in {item!r}')
        out.append(FilterSpec(name, threshold))
    names = [f.name for f in out]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f'filters listed more than once in {spec!r}: {repeated}')
    return out


BOOST_MODES = ('log', 'linear')


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    """Which redundancy filters run, in order, and the settings of each.

    Attributes:
      specs: The filters in the order they run (see `parse_filters`); empty
        for no filtering.
      minhash_num_perm: MinHash signature length (default 128).
      minhash_shingle_size: Words per shingle (default 3).
      minhash_seed: Seed of the MinHash permutations (default 1, datasketch's).
      spacy_model: spaCy package or path whose `ner` extracts entities.
      entity_labels: Entity labels kept, sorted; None keeps every label
        (default: the eleven OntoNotes name types, `entities.DEFAULT_LABELS`).
      entity_batch_size: Texts per `nlp.pipe` batch (default 64).
      random_seed: Seed of the `random` filter (default 0).
      n_topics: KMeans clusters for the `*_topics` filters; None picks
        `topics.default_n_topics(n)`.
      topic_seed: KMeans random state (default 0).
      similarity_probes: In the build, each chunk is compared with the
        members of this many of its nearest candidate clusters for the
        `similarity*` filters (default 3); more probes find more of the
        close pairs a cluster border splits, at more comparisons.
      intra_doc_min_salience: `intra_doc` drops chunks below this salience
        (default 0.05).
      intra_doc_boost: Salience added per merged near-duplicate (default 0.15).
      intra_doc_boost_mode: `log` (default) or `linear`.
      warn_doc_loss: Warn when a document loses more than this fraction of
        its chunks to the filters (default 0.5).
      warn_salience: Warn when a boost lifts a salience above this (default 0.6)
        from below it.
      scope: Metadata keys two chunks must agree on before any filter may
        compare them (`transforms.scope`); empty (default) for one corpus.
      deltas: Keep the novel sentences of chunks dropped as lexical
        near-duplicates as delta chunks (`transforms.deltas`; default True).
      semantic_deltas: Also for the similarity* filters' drops (default
        False: a semantic near-copy may share few sentences with its keeper,
        so most of it would come back as deltas).
    """

    specs: tuple[FilterSpec, ...] = ()
    minhash_num_perm: int = 128
    minhash_shingle_size: int = 3
    minhash_seed: int = 1
    spacy_model: str = DEFAULT_NER_MODEL
    entity_labels: Optional[tuple[str, ...]] = tuple(sorted(DEFAULT_LABELS))
    entity_batch_size: int = 64
    random_seed: int = 0
    n_topics: Optional[int] = None
    topic_seed: int = 0
    similarity_probes: int = 3
    intra_doc_min_salience: float = 0.05
    intra_doc_boost: float = 0.15
    intra_doc_boost_mode: str = 'log'
    warn_doc_loss: float = 0.5
    warn_salience: float = 0.6
    scope: tuple[str, ...] = ()
    deltas: bool = True
    semantic_deltas: bool = False

    def __post_init__(self):
        names = [s.name for s in self.specs]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f'filters listed more than once: {repeated}')
        # Builds (and so validates) the MinHash settings even if unused.
        self.minhash_config()
        if self.entity_labels is not None and not self.entity_labels:
            raise ValueError('entity_labels must name at least one label (or be None for all)')
        if self.entity_batch_size <= 0:
            raise ValueError(f'entity_batch_size must be > 0, got {self.entity_batch_size}')
        if self.n_topics is not None and self.n_topics <= 0:
            raise ValueError(f'n_topics must be > 0, got {self.n_topics}')
        if self.similarity_probes <= 0:
            raise ValueError(f'similarity_probes must be > 0, got {self.similarity_probes}')
        if not 0.0 <= self.intra_doc_min_salience <= 1.0:
            raise ValueError(
                f'intra_doc_min_salience must be in [0, 1], got {self.intra_doc_min_salience}')
        if self.intra_doc_boost < 0.0:
            raise ValueError(f'intra_doc_boost must be >= 0, got {self.intra_doc_boost}')
        if self.intra_doc_boost_mode not in BOOST_MODES:
            raise ValueError(
                f'intra_doc_boost_mode must be one of {list(BOOST_MODES)}, '
                f'got {self.intra_doc_boost_mode!r}')
        if not 0.0 <= self.warn_doc_loss <= 1.0:
            raise ValueError(f'warn_doc_loss must be in [0, 1], got {self.warn_doc_loss}')
        if not 0.0 <= self.warn_salience <= 1.0:
            raise ValueError(f'warn_salience must be in [0, 1], got {self.warn_salience}')
        if any(not k for k in self.scope) or list(self.scope) != sorted(set(self.scope)):
            raise ValueError(f'scope must be sorted, unique, non-empty metadata keys, got {self.scope}')
        if self.semantic_deltas and not self.deltas:
            raise ValueError('semantic_deltas needs deltas on')

    @property
    def names(self) -> tuple[str, ...]:
        """The filter names in run order."""
        return tuple(s.name for s in self.specs)

    def needs(self, feature: str) -> bool:
        """Whether a selected filter needs `feature` (one of `filters.FEATURES`)."""
        from transforms import filters

        return any(feature in filters.get(n).needs for n in self.names)

    @property
    def needs_minhash(self) -> bool:
        return self.needs('minhash')

    @property
    def needs_entities(self) -> bool:
        return self.needs('entities')

    @property
    def needs_topics(self) -> bool:
        return self.needs('topics')

    def minhash_config(self, threshold: float = 0.8) -> MinHashConfig:
        """The MinHash settings, with the `minhash` filter's threshold for banding."""
        return MinHashConfig(
            self.minhash_num_perm, self.minhash_shingle_size, self.minhash_seed, threshold)


def keep_order_key(chunk: Chunk) -> tuple[float, str, int]:
    """Sort key deciding which chunk of a redundant group is kept: the smallest.

    Highest salience first (None counts as 0), then earliest `(doc_id,
    chunk_index)`. The greedy filters also visit chunks in this order.
    """
    salience = chunk.salience if chunk.salience is not None else 0.0
    return (-salience, chunk.doc_id, chunk.chunk_index)


def kept_and_dropped(
    chunks: Sequence[Chunk], dropped: dict[int, Dropped]
) -> tuple[list[Chunk], list[Dropped]]:
    """A filter's result from its drops by position: `(kept, dropped)`, both in input order."""
    kept = [c for i, c in enumerate(chunks) if i not in dropped]
    return kept, [dropped[i] for i in sorted(dropped)]


def keep_order(chunks: Sequence[Chunk]) -> list[int]:
    """The chunks' positions by `keep_order_key`: the order the greedy filters visit them in."""
    return sorted(range(len(chunks)), key=lambda i: keep_order_key(chunks[i]))


def require_field(chunks: Sequence[Chunk], field: str) -> None:
    """Raises ValueError if a chunk lacks `field` (a feature never computed)."""
    missing = [c.chunk_id for c in chunks if getattr(c, field) is None]
    if missing:
        raise ValueError(f'chunks without {field}: {missing[:5]}')


def unit_rows(embeddings: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length in float64 (zero rows stay zero)."""
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f'embeddings must be a 2-D array, got shape {x.shape}')
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def apply_filter(
    chunks: Sequence[Chunk], spec: FilterSpec, config: Optional[FilterConfig] = None
) -> tuple[list[Chunk], list[Dropped]]:
    """Applies one filter to a whole corpus held in memory.

    The one dispatch from filter names to their decisions, through the
    registry (`transforms.filters`, each filter's `decide`): the evaluation
    runs every filter through it. The build distributes the same decisions
    with Beam by each filter's `strategy` (`filter_chunks.filter_transform`).
    With `config.scope`, each scope (`transforms.scope`) is filtered as a
    corpus of its own, so no two chunks of different scopes are compared.

    Args:
      chunks: The corpus's chunks, with the features the filter needs.
      spec: The filter and its threshold.
      config: Seeds and intra_doc settings; defaults for the filters that need none.

    Returns:
      `(kept, dropped)`, kept in canonical `(doc_id, chunk_index)` order.

    Raises:
      ValueError: For an unknown filter name.
    """
    config = config or FilterConfig()
    if config.scope:
        kept, dropped = [], []
        for part in scope.partition(chunks, config.scope):
            part_kept, part_dropped = _apply_unscoped(part, spec, config)
            kept.extend(part_kept)
            dropped.extend(part_dropped)
        return sorted(kept, key=Chunk.sort_key), sorted(dropped, key=lambda d: d.chunk.sort_key())
    return _apply_unscoped(chunks, spec, config)


def _apply_unscoped(
    chunks: Sequence[Chunk], spec: FilterSpec, config: FilterConfig
) -> tuple[list[Chunk], list[Dropped]]:
    from transforms import filters

    return filters.get(spec.name).decide(sorted(chunks, key=Chunk.sort_key), spec.threshold, config)
