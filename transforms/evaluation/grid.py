"""The evaluation grid: parsing and naming its chunkers and filters (`NAME:SIZE[:OVERLAP]`, `NAME@THR`).

It lives beside the evaluation job, not in `transforms/`, because the grid is
the job's input language (flag values, table row names, file labels); the
things it names (chunkers, filters) keep their one home in `transforms/`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from transforms.chunking.chunkers import ChunkerConfig
from transforms.dedup import registry
from transforms.dedup.config import FilterSpec, parse_filters

# The study's grid (Section 3.3 and Tables 1-10).
DEFAULT_CHUNKERS = (
    'fixed:200:0,fixed:400:0,fixed:400:200,fixed:800:400,'
    'recursive:200:0,recursive:400:0,recursive:400:200,recursive:800:400,'
    'cluster_semantic:400,semantic_breakpoint:400'
)
DEFAULT_FILTERS = (
    'none,exact,minhash@0.6,minhash@0.7,minhash@0.8,'
    'random@0.2,random@0.4,random@0.6,random@0.8,'
    'similarity@0.8,similarity_topics@0.8,similarity_ner@0.8,similarity_topics_ner@0.8,'
    'ner_exact,ner_half,intra_doc,cascade'
)

NONE = 'none'
CASCADE = 'cascade'
# Joins the steps of one grid row run in sequence: `cascade+covered`.
THEN = '+'
# Suffixes of a row with `covered` among its steps, and the words they add to its method:
# `:pool` indexes each kept chunk with the mean vector of itself and the covered chunks it
# holds (`covered.pooled_vectors`); `:expand` returns each hit with their spans (`query.expand`).
POOL = ':pool'
EXPAND = ':expand'
MODIFIERS = {POOL: 'vectors pooled', EXPAND: 'hits expanded'}

# Row names of the study's tables.
METHOD_NAMES = {
    NONE: 'No filtering',
    **{name: f.label for name, f in registry.definitions().items()},
    CASCADE: 'Cascade (exact, minhash, intra_doc)',
}


@dataclasses.dataclass(frozen=True)
class GridFilter:
    """One row of the grid: a filter (or the cascade, or none) and its settings.

    Attributes:
      name: `none`, `cascade` or a filter of the registry (`dedup.registry`).
      specs: The filters run in order (empty for `none`).
      modifiers: Its suffixes among `MODIFIERS`, in `MODIFIERS` order, as its name ends.
    """

    name: str
    specs: tuple[FilterSpec, ...]
    modifiers: tuple[str, ...] = ()

    @property
    def steps(self) -> list[str]:
        """The name's steps, without its modifiers."""
        return self.name.removesuffix(''.join(self.modifiers)).split(THEN)

    @property
    def expand(self) -> bool:
        return EXPAND in self.modifiers

    @property
    def pool(self) -> bool:
        return POOL in self.modifiers

    @property
    def method(self) -> str:
        """The study's name of the method; a sequence names its steps (`..., then Covered`)."""
        method = ', then '.join(METHOD_NAMES[step.partition('@')[0]] for step in self.steps)
        return ', '.join([method] + [MODIFIERS[m] for m in self.modifiers])

    @property
    def threshold(self) -> Optional[float]:
        """The filter's threshold; None for `none`, `cascade`, sequences and filters without one."""
        if len(self.steps) > 1 or self.steps[0] in (NONE, CASCADE):
            return None
        return self.specs[0].threshold


def parse_filter_grid(spec: str) -> list[GridFilter]:
    """Parses `none,exact,minhash@0.8,cascade+covered,...`: each item is scored on its own.

    An item of steps joined by `+` runs them in that order, as `--filter`
    runs a comma-separated list (`cascade+covered`: the cascade, then
    `covered` on what it kept); its name keeps the steps' thresholds. An
    item with `covered` among its steps may end in `MODIFIERS`
    (`covered:pool:expand`).

    Raises:
      ValueError: For an unknown or repeated item, a bad threshold or `none` in a sequence.
    """
    out = []
    for item in (i.strip() for i in spec.split(',')):
        if not item:
            raise ValueError(f'empty filter in {spec!r}')
        body, modifiers = item, []
        for suffix in reversed(MODIFIERS):
            if body.endswith(suffix):
                body, modifiers = body.removesuffix(suffix), [suffix, *modifiers]
        steps = [s.strip() for s in body.split(THEN)]
        if len(steps) > 1:
            if NONE in steps or not all(steps):
                raise ValueError(f'a sequence joins filters with {THEN!r}, got {item!r}')
            name = THEN.join(steps)
        else:
            name = steps[0].partition('@')[0].strip()
        # parse_filters validates names and thresholds, expands `cascade` and refuses repeats.
        specs = tuple(parse_filters(','.join(steps)))
        if modifiers and 'covered' not in [s.name for s in specs]:
            raise ValueError(f'{"".join(modifiers)} reads the chunks covered holds, so {item!r} needs covered')
        out.append(GridFilter(name + ''.join(modifiers), specs, tuple(modifiers)))
    keys = [(g.name, g.threshold) for g in out]
    repeated = sorted({f'{n}@{t}' for n, t in keys if keys.count((n, t)) > 1})
    if repeated:
        raise ValueError(f'filters listed more than once in {spec!r}: {repeated}')
    return out


def grid_needs(grid) -> set[str]:
    """The filter names run by the grid, i.e. which features must be computed."""
    return {s.name for g in grid for s in g.specs}


def parse_chunker(item: str) -> ChunkerConfig:
    """Parses `NAME:SIZE[:OVERLAP][:KEY=VALUE...]`, e.g. `semantic_breakpoint:200:0:window=3`.

    `KEY=VALUE` items are the chunker's own integer parameters
    (`ChunkerConfig.params`), validated by the config.

    Raises:
      ValueError: For a malformed item or invalid chunker settings.
    """
    parts = item.strip().split(':')
    sizes = [p for p in parts[1:] if '=' not in p]
    params = [p for p in parts[1:] if '=' in p]
    if not parts[0] or not 1 <= len(sizes) <= 2 or parts[1 + len(sizes):] != params:
        raise ValueError(f'chunker must be NAME:SIZE[:OVERLAP][:KEY=VALUE...], got {item!r}')
    try:
        numbers = [int(p) for p in sizes]
        values = tuple((k.strip(), int(v)) for k, _, v in (p.partition('=') for p in params))
    except ValueError:
        raise ValueError(f'chunker sizes and parameters must be integers, got {item!r}') from None
    return ChunkerConfig(parts[0], *numbers, params=values)


def parse_chunkers(spec: str) -> list[ChunkerConfig]:
    """Parses a comma-separated list of `parse_chunker` items (overlap defaults to 0).

    Raises:
      ValueError: For a malformed or repeated item or invalid chunker settings.
    """
    out = [parse_chunker(item) for item in spec.split(',')]
    labels = [chunker_label(c) for c in out]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f'chunkers listed more than once: {repeated}')
    return out


def chunker_label(config: ChunkerConfig) -> str:
    """File-name label of a chunker, e.g. `recursive_400_200` or `semantic_breakpoint_200_0_window3`."""
    own = ''.join(f'_{k}{v}' for k, v in config.params)
    return f'{config.name}_{config.chunk_size}_{config.chunk_overlap}{own}'
