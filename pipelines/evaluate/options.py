"""The evaluation's flags and its validated config (`EvaluateConfig`): datasets, the grid, retrieval, cache."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Optional, Sequence

from pipelines.common import progress as progress_view
from pipelines.common import ranking_flags
from pipelines.common.flags import OneLineParser
from transforms.chunking.chunkers import CHUNKER_PARAMS, CHUNKERS, ChunkerConfig
from transforms.dedup import registry
from transforms.evaluation import ir_scoring, metrics
from transforms.evaluation.datasets import BEIR, CHROMA, DATASETS
from transforms.evaluation.features import DEFAULT_CACHE_MAX_BYTES
from transforms.evaluation.grid import DEFAULT_CHUNKERS, DEFAULT_FILTERS, GridFilter, parse_chunkers, parse_filter_grid
from transforms.evaluation.lemmas import DEFAULT_LEMMA_MODEL
from transforms.evaluation.scoring import DENSE, RETRIEVALS
from transforms.features import cache as feature_cache
from transforms.features import precision as precisions
from transforms.features.models import DEFAULT_EMBEDDING_MODEL
from transforms.query import retrieval as ranking

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CHROMA_DATA = REPO_ROOT.parent / 'shared' / 'data' / 'chroma'
# --query_precision: the questions in the chunks' precision.
SAME = 'same'


def default_cache() -> Path:
    """Where a grid run keeps embeddings and entities for the next: the user's cache folder."""
    return Path(os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache') / 'ragsieve' / 'evaluate'


@dataclasses.dataclass(frozen=True)
class EvaluateConfig:
    """Settings of an evaluation run.

    Attributes:
      dataset: `chroma` or `squad`.
      data: The Chroma folder or the SQuAD JSON file.
      output: Folder for results.csv, the tables and the plots.
      chunkers: Chunker configurations, each scored with every filter.
      filters: The filter grid (see `parse_filter_grid`).
      k: Chunks retrieved per question (5 in the study).
      max_questions: Deterministic sample size (see `sample_questions`); None for all.
      seed: Key of the question sample's hash.
      variants: Token variants among `metrics.VARIANTS`.
      batch_size: Texts per forward pass of the embedding model.
      embedding_model: sentence-transformers model name or path.
      lemma_model: spaCy package for the `preprocessed` lemmas.
      progress: `auto`, `bar`, `log` or `none` (`pipelines.common.progress.MODES`): how the
        run shows its steps and the grid cells scored.
      progress_interval: Seconds between two lines of `log`.
      cache: Root of a feature cache (embeddings, entities) kept between
        runs, or None for none.
      cache_max_bytes: Bound of the cache generation a run writes: every
        entry this run used, plus earlier runs' entries up to this many
        (estimated) bytes in all; 0 keeps only this run's, as a build does.
      retrieval: `dense` (the study's protocol: exact top-k by cosine) or
        `hybrid` (the query job's ranking: dense + BM25 + salience + recency
        fused (transforms/query/retrieval.py), then cross-document dedup).
      retrievals: For `beir`: the rankings scored, among `dense`, `bm25`, `hybrid`.
      split: For `beir`: the qrels file, `qrels/<split>.tsv`.
      ranking: The hybrid ranking's settings (floor, candidates, weights).
    """

    dataset: str
    data: str
    output: str
    chunkers: tuple[ChunkerConfig, ...]
    filters: tuple[GridFilter, ...]
    k: int = 5
    max_questions: Optional[int] = None
    seed: int = 0
    variants: tuple[str, ...] = metrics.VARIANTS
    batch_size: int = 64
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    # bf16, int8: chunks embedded as `build --embed_precision` embeds them; questions in fp32, as `query` does,
    # or (query_precision `same`) in the chunks' precision, as a service embedding with the reduced model does.
    embed_precision: str = precisions.FP32
    query_precision: str = precisions.FP32
    lemma_model: str = DEFAULT_LEMMA_MODEL
    progress: str = progress_view.AUTO
    progress_interval: float = progress_view.DEFAULT_INTERVAL
    retrieval: str = DENSE
    retrievals: tuple[str, ...] = ir_scoring.IR_RETRIEVALS
    split: str = 'test'
    ranking: ranking.RetrievalConfig = ranking.RetrievalConfig()
    cache: Optional[str] = None
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES

    def __post_init__(self):
        if self.retrieval not in RETRIEVALS:
            raise ValueError(f'unknown retrieval {self.retrieval!r}; choose one of {list(RETRIEVALS)}')
        unknown = [r for r in self.retrievals if r not in ir_scoring.IR_RETRIEVALS]
        if unknown or not self.retrievals or len(set(self.retrievals)) != len(self.retrievals):
            raise ValueError(f'retrievals must be distinct, among {list(ir_scoring.IR_RETRIEVALS)}, '
                             f'got {list(self.retrievals)}')
        if self.dataset not in DATASETS:
            raise ValueError(f'unknown dataset {self.dataset!r}; choose one of {list(DATASETS)}')
        if not self.chunkers:
            raise ValueError('at least one chunker is needed')
        if not self.filters:
            raise ValueError('at least one filter (or none) is needed')
        if self.k <= 0:
            raise ValueError(f'k must be > 0, got {self.k}')
        if self.max_questions is not None and self.max_questions <= 0:
            raise ValueError(f'max_questions must be > 0, got {self.max_questions}')
        if self.cache_max_bytes < 0:
            raise ValueError(f'cache_max_bytes must be >= 0, got {self.cache_max_bytes}')
        if self.batch_size <= 0:
            raise ValueError(f'batch_size must be > 0, got {self.batch_size}')
        progress_view.resolve_mode(self.progress)
        progress_view.check_interval(self.progress_interval)
        unknown = [v for v in self.variants if v not in metrics.VARIANTS]
        if unknown or not self.variants:
            raise ValueError(f'variants must be among {list(metrics.VARIANTS)}, got {list(self.variants)}')


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    return parser().parse_args(argv)


def parser() -> argparse.ArgumentParser:
    """The evaluation's flags."""
    parser = OneLineParser(
        prog='ragsieve evaluate',
        description='Score chunkers x redundancy filters on a QA dataset, as the chunk-filtering study.')
    parser.add_argument('--dataset', type=str, choices=DATASETS, default=CHROMA,
                        help='chroma: folder of *.md corpora + questions_df.csv; squad: SQuAD v1.1 JSON; '
                             'beir: an IR set in the BEIR layout (corpus.jsonl, queries.jsonl, '
                             'qrels/SPLIT.tsv), scored by nDCG@10, recall@10/@100, MRR@10.')
    parser.add_argument('--split', type=str, default='test',
                        help='beir: the qrels file scored, qrels/SPLIT.tsv.')
    parser.add_argument('--data', type=str, default=None,
                        help='Dataset path; for chroma defaults to ../shared/data/chroma beside the repository.')
    parser.add_argument('--output', type=str, required=True,
                        help='Folder for results.csv, table_*.md, plot_*.png and summary.json.')
    parser.add_argument('--chunkers', type=str, default=DEFAULT_CHUNKERS,
                        help=f'Comma-separated NAME:SIZE[:OVERLAP][:KEY=VALUE...], NAME one of {list(CHUNKERS)}; '
                             f'KEY=VALUE sets a chunker\'s own integer parameter, among {CHUNKER_PARAMS} '
                             '(e.g. semantic_breakpoint:200:0:window=3).')
    parser.add_argument('--filters', type=str, default=DEFAULT_FILTERS,
                        help='Comma-separated grid, each scored alone: none, cascade, NAME or '
                             f'NAME@THRESHOLD with NAME one of {sorted(registry.names())}; steps joined '
                             'by + run in sequence (cascade+covered); a row ending in :expand returns '
                             'each hit with the covered chunks it holds (covered:expand).')
    parser.add_argument('--k', type=int, default=5, help='Chunks retrieved per question.')
    parser.add_argument('--max_questions', type=int, default=None,
                        help='Score a deterministic sample of this many questions (default: all).')
    parser.add_argument('--seed', type=int, default=0, help='Key of the question sample hash.')
    parser.add_argument('--variants', type=str, default=','.join(metrics.VARIANTS),
                        help=f'Token variants, comma-separated, among {list(metrics.VARIANTS)}.')
    parser.add_argument('--batch_size', type=int, default=64,
                        help='Texts per forward pass of the embedding model.')
    parser.add_argument('--embedding_model', type=str, default=DEFAULT_EMBEDDING_MODEL,
                        help='sentence-transformers model name or local path.')
    parser.add_argument('--embed_precision', type=str, default=precisions.FP32, choices=list(precisions.PRECISIONS),
                        help='Precision the chunks are embedded in, as by `ragsieve build --embed_precision`; '
                             'questions are embedded in fp32, as by `ragsieve query` (see --query_precision).')
    parser.add_argument('--query_precision', type=str, default=precisions.FP32, choices=[precisions.FP32, SAME],
                        help='Precision the questions are embedded in: fp32 (as by `ragsieve query`), or same: '
                             '--embed_precision\'s, as by a service that embeds its questions with the reduced model.')
    parser.add_argument('--lemma_model', type=str, default=DEFAULT_LEMMA_MODEL,
                        help='spaCy package lemmatizing the preprocessed variant.')
    parser.add_argument('--retrieval', type=str, default=None,
                        help=f'chroma, squad: one of {list(RETRIEVALS)} (default dense): exact top-k by cosine '
                             '(the study), or the query job\'s fusion of dense and BM25 (salience and recency break near-ties), then '
                             'cross-document dedup. beir: comma-separated, among '
                             f'{list(ir_scoring.IR_RETRIEVALS)} (default all).')
    ranking_flags.add_ranking_flags(parser, prefix='Hybrid: ')
    parser.add_argument('--cache', type=str, default=None,
                        help='Root of the feature cache (embeddings, entities) kept between runs, '
                             'in the build\'s layout; default: $XDG_CACHE_HOME/ragsieve/evaluate '
                             '(~/.cache/...); "none" turns it off.')
    parser.add_argument('--cache_max_bytes', type=int, default=DEFAULT_CACHE_MAX_BYTES,
                        help='Bound of the cache: each run keeps every entry it used plus earlier '
                             'runs\' entries up to this many bytes in all (older generations are '
                             'deleted); 0 keeps only this run\'s, as a build does.')
    progress_view.add_flags(parser)
    parser.add_argument('--no_progress', action='store_true', help='The same as --progress none.')
    return parser


def config_from_args(args: argparse.Namespace) -> EvaluateConfig:
    """Builds and validates the config from parsed flags.

    Raises:
      ValueError: For invalid or missing settings.
    """
    data = args.data
    kinds = tuple(r.strip() for r in (args.retrieval or '').split(',') if r.strip())
    if args.dataset != BEIR and len(kinds) > 1:
        raise ValueError(f'--retrieval takes one of {list(RETRIEVALS)} for --dataset {args.dataset}, '
                         f'got {args.retrieval!r}')
    if data is None:
        if args.dataset != CHROMA:
            raise ValueError(f'--data is required for --dataset {args.dataset}')
        data = str(DEFAULT_CHROMA_DATA)
    return EvaluateConfig(
        dataset=args.dataset,
        data=data,
        output=args.output,
        chunkers=tuple(parse_chunkers(args.chunkers)),
        filters=tuple(parse_filter_grid(args.filters)),
        k=args.k,
        max_questions=args.max_questions,
        seed=args.seed,
        variants=tuple(v.strip() for v in args.variants.split(',')),
        batch_size=args.batch_size,
        embedding_model=args.embedding_model,
        embed_precision=args.embed_precision,
        query_precision=args.query_precision,
        lemma_model=args.lemma_model,
        progress=progress_view.NONE if args.no_progress else args.progress,
        progress_interval=args.progress_interval,
        retrieval=kinds[0] if kinds and args.dataset != BEIR else DENSE,
        retrievals=kinds if kinds and args.dataset == BEIR else ir_scoring.IR_RETRIEVALS,
        split=args.split,
        ranking=ranking_flags.ranking_config(args),
        cache_max_bytes=args.cache_max_bytes,
        cache=None if args.cache == feature_cache.NO_CACHE else (args.cache or str(default_cache())),
    )
