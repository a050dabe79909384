"""The hybrid ranking's flags, shared by `ragsieve query` and `ragsieve evaluate` (one default, one meaning)."""

from __future__ import annotations

import argparse
import dataclasses

from transforms.query import fusion, retrieval

# The ranking before issue 40, reachable by flags (docs/querying.md).
BEFORE = '--fusion rrf --prior fused --below_floor drop --floor_gate -1'


def add_ranking_flags(parser: argparse.ArgumentParser, prefix: str = '') -> None:
    """Adds every `RetrievalConfig` setting as a flag, with its default.

    Args:
      parser: The job's parser.
      prefix: Put before each help text (e.g. `Hybrid: ` in the evaluation).
    """
    d = retrieval.RetrievalConfig()
    add = parser.add_argument
    add('--candidates', type=int, default=d.candidates,
        help=f'{prefix}N: the union of the dense top-N and the BM25 top-N is fused.')
    add('--fusion', type=str, default=d.fusion, choices=list(retrieval.FUSIONS),
        help=f'{prefix}convex: alpha * dense + (1 - alpha) * BM25 of the scores normalized over the candidates; '
             f'rrf: reciprocal rank fusion of the ranks (--weight_*). The ranking before issue 40: {BEFORE}.')
    add('--alpha', type=float, default=d.alpha, help=f'{prefix}Convex fusion: weight of the dense score, in [0, 1].')
    add('--normalization', type=str, default=d.normalization, choices=list(fusion.NORMALIZATIONS),
        help=f'{prefix}Convex fusion: minmax over the candidates, tmm (theoretical minimum: cosine -1, BM25 0), '
             'or minmax_floor (minmax, a cosine below --min_relevance counting 0).')
    add('--min_relevance', type=float, default=d.min_relevance,
        help=f'{prefix}The relevance floor: a candidate with a dense cosine below this, unless BM25 found it '
             '(--floor_exempt_bm25), is below it (--below_floor, --floor_gate say what follows); -1: none '
             '(klarRAG: 0.25).')
    add('--floor_exempt_bm25', type=int, default=d.floor_exempt_bm25,
        help=f'{prefix}Candidates BM25 ranks in its top N are kept whatever their cosine: what another '
             'signal found is not junk (0: the floor drops every candidate below it).')
    add('--below_floor', type=str, default=d.below_floor, choices=list(retrieval.BELOW_FLOOR),
        help=f'{prefix}A candidate below the floor is dropped, ranked after every candidate above it (last), '
             'or kept in place (keep: the floor acts only through --floor_gate).')
    add('--floor_gate', type=float, default=d.floor_gate,
        help=f'{prefix}A question whose best candidate\'s cosine is below this looks off-topic: every candidate '
             'below --min_relevance is dropped, BM25\'s top N too (-1: no question is).')
    add('--relative_floor', type=float, default=d.relative_floor,
        help=f'{prefix}Candidates whose fused score is below this fraction of the best one are dropped (0: none).')
    add('--prior', type=str, default=d.prior, choices=list(retrieval.PRIORS),
        help=f'{prefix}Salience and recency: tiebreak raises a fused score by at most --tie_epsilon of the best '
             'one (they reorder near-ties only); fused ranks them as two more RRF signals (--fusion rrf).')
    add('--tie_epsilon', type=float, default=d.tie_epsilon,
        help=f'{prefix}--prior tiebreak: the largest raise, as a fraction of the best fused score.')
    add('--dedup_threshold', type=float, default=d.dedup_threshold,
        help=f'{prefix}Skip a chunk whose cosine to an already selected chunk is >= this.')
    for signal in retrieval.SIGNALS:
        role = ('RRF weight of the' if signal in ('dense', 'bm25')
                else 'Weight in the tie-break (RRF weight with --prior fused) of the')
        add(f'--weight_{signal}', type=float, default=getattr(d, f'weight_{signal}'),
            help=f'{prefix}{role} {signal} signal.')


def ranking_config(args: argparse.Namespace) -> retrieval.RetrievalConfig:
    """The `RetrievalConfig` of parsed flags (validated by its constructor).

    Raises:
      ValueError: For an invalid setting or combination.
    """
    names = [f.name for f in dataclasses.fields(retrieval.RetrievalConfig) if f.name != 'rrf_k']
    return retrieval.RetrievalConfig(**{n: getattr(args, n) for n in names})
