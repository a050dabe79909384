"""Which filters run, in which order, with which settings: FilterSpec, parse_filters, FilterConfig."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from transforms.features.config import FeatureConfig
from transforms.validate import check_fraction, check_threshold

# `cascade`: cheap lexical filters corpus-wide, then the per-document semantic one.
CASCADE = ('exact', 'minhash', 'intra_doc')


@dataclasses.dataclass(frozen=True)
class FilterSpec:
    """One filter to apply, with its threshold.

    Unpacks as `name, threshold = spec`.

    Attributes:
      name: A filter of the registry (`dedup.registry`).
      threshold: Cosine (`similarity*`, `intra_doc`), estimated Jaccard
        (`minhash`) or fraction of chunks to drop (`random`); None for the
        filters that take none (`exact`, `ner_*`). Filled from
        the filter's registered default when not given.
    """

    name: str
    threshold: Optional[float] = None

    def __post_init__(self):
        from transforms.dedup import registry

        definition = registry.get(self.name)
        default = definition.default
        if default is None:
            if self.threshold is not None:
                raise ValueError(f'filter {self.name!r} takes no threshold, got {self.threshold}')
            return
        if self.threshold is None:
            object.__setattr__(self, 'threshold', default)
            return
        t = float(self.threshold)
        if definition.ratio:
            check_fraction(f'{self.name} ratio', t)
        else:
            check_threshold(f'{self.name} threshold', t)
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
        takes none, unparsable or out-of-range threshold, a filter listed
        twice, or `none` with other filters.
    """
    items = [item.strip() for item in spec.split(',')]
    if items == ['none']:
        return []
    if 'none' in items:
        raise ValueError(f"'none' stands alone (it keeps every chunk): give --filter none, or filters "
                         f'without it, not {spec!r}')
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
      features: How their features are computed (MinHash, entities, topics).
      random_seed: Seed of the `random` filter (default 0).
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
        compare them (`dedup.scope`); empty (default) for one corpus.
      deltas: Keep the novel sentences of chunks dropped as lexical
        near-duplicates as delta chunks (`lineage.deltas`; default True).
      semantic_deltas: Also for the similarity* filters' drops (default
        False: a semantic near-copy may share few sentences with its keeper,
        so most of it would come back as deltas).
    """

    specs: tuple[FilterSpec, ...] = ()
    features: FeatureConfig = FeatureConfig()
    random_seed: int = 0
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
        from transforms.dedup import registry

        return any(feature in registry.get(n).needs for n in self.names)

    @property
    def needs_minhash(self) -> bool:
        return self.needs('minhash')

    @property
    def needs_entities(self) -> bool:
        return self.needs('entities')

    @property
    def needs_topics(self) -> bool:
        return self.needs('topics')
