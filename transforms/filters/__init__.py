"""The filter registry: one module per redundancy filter, each declaring a `FILTER`.

Everything that needs to know the filters iterates `REGISTRY`: `FilterSpec`
validation and defaults, `dedup.apply_filter` (the in-memory dispatch), the
Beam stage (`filter_chunks.filter_transform`, by `strategy`), the features
computed (`needs`), the build's `--filter` help, the evaluation's row names
and the README table (`readme_table`). Adding a filter is one module here
that defines `FILTER`, plus its test.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Callable, Optional, Sequence

# Per-chunk features a filter may need computed before it runs.
FEATURES = ('minhash', 'entities', 'topics')

# Beam strategies (see `filter_chunks.filter_transform`).
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
      removes: What it removes, one line for the README table.
      default: Default threshold; None for a filter that takes none.
      threshold_note: Shown after the default in the README (e.g. `(ratio)`).
      needs: Features from `FEATURES` computed before it runs.
      strategy: One of `STRATEGIES`: how the build distributes it.
      decide: The pure decision `(chunks in canonical order, threshold,
        FilterConfig) -> (kept, dropped)`, over one unscoped corpus.
      group_key: For `GROUPED`: the key within a scope whose group decides
        alone; None for a chunk that is kept without comparison.
      beam_transform: `(index, spec, FilterConfig) -> PTransform` when the
        filter needs its own Beam stage rather than the strategy's generic one.
      position: Row order in tables (the study's order).
    """

    name: str
    label: str
    removes: str
    default: Optional[float]
    needs: frozenset
    strategy: str
    decide: Callable
    group_key: Optional[Callable] = None
    beam_transform: Optional[Callable] = None
    threshold_note: str = ''
    position: int = 0

    def __post_init__(self):
        if not set(self.needs) <= set(FEATURES):
            raise ValueError(f'{self.name}: unknown features {sorted(set(self.needs) - set(FEATURES))}')
        if self.strategy not in STRATEGIES:
            raise ValueError(f'{self.name}: strategy must be one of {STRATEGIES}, got {self.strategy!r}')
        if (self.strategy == GROUPED) != (self.group_key is not None):
            raise ValueError(f'{self.name}: group_key is required by, and only by, the grouped strategy')


def _discover() -> dict[str, FilterDef]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f'{__name__}.{info.name}')
        if hasattr(module, 'FILTER'):
            found.append(module.FILTER)
    found.sort(key=lambda f: (f.position, f.name))
    names = [f.name for f in found]
    if len(set(names)) != len(names):
        raise ValueError(f'filter names declared twice: {names}')
    return {f.name: f for f in found}


_REGISTRY: Optional[dict[str, FilterDef]] = None


def registry() -> dict[str, FilterDef]:
    """`{name: FilterDef}` in table order, discovered once from this package's modules."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _discover()
    return _REGISTRY


def get(name: str) -> FilterDef:
    """The definition of filter `name`.

    Raises:
      ValueError: For an unknown name.
    """
    filters = registry()
    if name not in filters:
        raise ValueError(f'unknown filter {name!r}; expected one of {list(filters) + ["cascade"]}')
    return filters[name]


def names() -> list[str]:
    """The filter names, in table order."""
    return list(registry())


def needing(feature: str) -> frozenset:
    """The names of the filters that need `feature` (one of `FEATURES`)."""
    return frozenset(n for n, f in registry().items() if feature in f.needs)


def readme_table(extra_rows: Sequence[tuple[str, str, str]] = ()) -> str:
    """The README's filter table (markdown), generated from the registry.

    Args:
      extra_rows: `(name, removes, default)` rows after the filters (cascade, none).
    """
    rows = ['| filter | study label | removes | default threshold |', '| --- | --- | --- | --- |']
    for f in registry().values():
        default = '' if f.default is None else f'{f.default:g}' + (f' {f.threshold_note}' if f.threshold_note else '')
        rows.append(f'| `{f.name}` | {f.label} | {f.removes} | {default} |')
    for name, removes, default in extra_rows:
        rows.append(f'| `{name}` | | {removes} | {default} |')
    return '\n'.join(rows) + '\n'
