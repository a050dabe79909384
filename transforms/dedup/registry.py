"""The filter registry: every filter's definition, discovered from `transforms.dedup.filters`.

Everything that needs to know the filters iterates it: `FilterSpec`
validation and defaults, the in-memory dispatch (`in_memory.apply_filter`),
the Beam side (`stages.filter_transform`, by `strategy`, or the family's own
`stage.STAGE`), the features computed (`needs`), the build's `--filter`
help, the evaluation's row names and the docs' filter table
(`filter_table`). This module is pure: it never imports a Beam stage.
Adding a filter is one module (or folder) under `filters/` plus its test.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Callable, Mapping, Optional

from transforms.dedup import filters as filters_package

# Per-chunk features a filter may need computed before it runs are
# `types.FEATURES`; the build computes each just before the first filter
# that needs it (`stages.feature_plan`).
from transforms.types import FEATURES

# Beam strategies (see `stages.filter_transform`).
PER_CHUNK = 'per_chunk'  # the decision for a chunk depends on that chunk only
GROUPED = 'grouped'  # groups by `(scope, group_key(chunk))`, `decide` runs per group
PAIRS = 'pairs'  # candidate pairs from keys -> verified edges -> components
STRATEGIES = (PER_CHUNK, GROUPED, PAIRS)


@dataclasses.dataclass(frozen=True)
class FilterDef:
    """Everything the project knows about one filter.

    Attributes:
      name: The `--filter` name.
      label: The study's row name (e.g. `NER Exact`), used by the evaluation.
      removes: What it removes, one line for the docs' filter table.
      default: Default threshold; None for a filter that takes none.
      ratio: The threshold is a share of chunks in [0, 1] (`random`), not a
        similarity in (0, 1].
      near_copy_reasons: Its drop reasons whose dropped chunk is a copy or a
        near-copy of its keeper, so that its sentences that the kept chunk
        representing it lacks stay as delta chunks (`lineage.deltas`).
      semantic: Those near-copies are semantic (few shared sentences):
        deltas only with `--semantic_deltas on`.
      needs: Features from `FEATURES` computed before it runs.
      strategy: One of `STRATEGIES`: how the build distributes it.
      decide: The pure decision `(chunks in canonical order, threshold,
        FilterConfig) -> (kept, dropped)`, over one unscoped corpus.
      group_key: For `GROUPED`: the key within a scope whose group decides
        alone; None for a chunk that is kept without comparison.
      options: Settings of one member of a family (e.g. `same_topic` of the
        similarity family), passed to its decision and to its Beam stage.
      position: Row order in tables (the study's order).
      family: The module that declared it, set at discovery; a family
        folder's Beam stage, if it has one, is its sibling `stage` module.
    """

    name: str
    label: str
    removes: str
    default: Optional[float]
    needs: frozenset
    strategy: str
    decide: Callable
    group_key: Optional[Callable] = None
    options: Mapping = dataclasses.field(default_factory=dict)
    ratio: bool = False
    near_copy_reasons: frozenset = frozenset()
    semantic: bool = False
    position: int = 0
    family: str = ''

    def __post_init__(self):
        if not set(self.needs) <= set(FEATURES):
            raise ValueError(f'{self.name}: unknown features {sorted(set(self.needs) - set(FEATURES))}')
        if 'topics' in self.needs and 'embedding' not in self.needs:
            raise ValueError(f'{self.name}: topics cluster the embeddings, so it needs embedding too')
        if self.strategy not in STRATEGIES:
            raise ValueError(f'{self.name}: strategy must be one of {STRATEGIES}, got {self.strategy!r}')
        if (self.strategy == GROUPED) != (self.group_key is not None):
            raise ValueError(f'{self.name}: group_key is required by, and only by, the grouped strategy')


def _discover() -> dict[str, FilterDef]:
    found = []
    for info in pkgutil.iter_modules(filters_package.__path__):
        name = f'{filters_package.__name__}.{info.name}'
        # A family folder declares its filters in `decision` (its `stage` is Beam).
        module = importlib.import_module(f'{name}.decision' if info.ispkg else name)
        declared = getattr(module, 'FILTERS', ()) or ((module.FILTER,) if hasattr(module, 'FILTER') else ())
        found.extend(dataclasses.replace(f, family=name) for f in declared)
    found.sort(key=lambda f: (f.position, f.name))
    names = [f.name for f in found]
    if len(set(names)) != len(names):
        raise ValueError(f'filter names declared twice: {names}')
    return {f.name: f for f in found}


_DEFINITIONS: Optional[dict[str, FilterDef]] = None


def definitions() -> dict[str, FilterDef]:
    """`{name: FilterDef}` in table order, discovered once from `transforms.dedup.filters`."""
    global _DEFINITIONS
    if _DEFINITIONS is None:
        _DEFINITIONS = _discover()
    return _DEFINITIONS


def get(name: str) -> FilterDef:
    """The definition of filter `name`.

    Raises:
      ValueError: For an unknown name.
    """
    filters = definitions()
    if name not in filters:
        raise ValueError(f'unknown filter {name!r}; expected one of {list(filters) + ["cascade"]}')
    return filters[name]


def names() -> list[str]:
    """The filter names, in table order."""
    return list(definitions())


def delta_reasons(semantic: bool) -> frozenset:
    """The drop reasons whose chunks leave deltas: lexical near-copies, and semantic ones if `semantic`."""
    return frozenset(r for f in definitions().values() if semantic or not f.semantic for r in f.near_copy_reasons)


def needing(feature: str) -> frozenset:
    """The names of the filters that need `feature` (one of `FEATURES`)."""
    return frozenset(n for n, f in definitions().items() if feature in f.needs)


# Rows after the filters: the names `--filter` takes besides them.
EXTRA_ROWS = (
    ('cascade', '(default) `exact`, then `minhash`, then `intra_doc`: cheap filters first'),
    ('none', 'nothing'),
)
def filter_table() -> str:
    """The docs' filter table (Markdown), generated from the registry (see `pipelines.reference`)."""
    rows = ['| filter | study label | removes | default threshold |', '| --- | --- | --- | --- |']
    for f in definitions().values():
        default = '' if f.default is None else f'{f.default:g}' + (' (ratio)' if f.ratio else '')
        rows.append(f'| `{f.name}` | {f.label} | {f.removes} | {default} |')
    for name, removes in EXTRA_ROWS:
        rows.append(f'| `{name}` | | {removes} | |')
    return '\n'.join(rows) + '\n'
