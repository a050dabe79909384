"""Evaluation job: the chunk-filtering study's grid (chunkers x filters) scored on a QA dataset.

This job runs in one process and calls the build's own stage functions
directly (`evaluation.features`: `document_spans`, `embed_texts`,
`extract_entities`, `compute.with_minhash`/`with_topics`, and
`in_memory.apply_filter`); it is not a Beam pipeline. The grid chunks, embeds and
computes the filter features once per chunker and then scores 17 filters
that only *select subsets* of those chunks: as a Beam pipeline each subset
would re-run or re-materialize the whole chain, while in process a filter
costs one pass of its `dedup` function and one exact FAISS search. The build
job (`pipelines/build_index/`) is where the same functions run at scale. Grid
parsing is `evaluation.grid`, one chunker's run `evaluation.scoring`, the
metrics `evaluation.metrics`, reporting `evaluation.report`.

Protocol (study Section 3.6): one index holds the chunks of every document
of the dataset; each question retrieves the exact top-k (cosine) among the
chunks a filter kept. Only retrieved chunks of the question's own document
can hit its reference; chunks of other documents still count as retrieved
text, as in the Chroma chunking study's evaluation (one collection for all
corpora, queried without a corpus filter). See `transforms/evaluation/metrics.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import os
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from pipelines.common import progress as progress_view
from pipelines.common import ranking_flags
from pipelines.common.flags import OneLineParser
from transforms.chunking.chunkers import CHUNKER_PARAMS, CHUNKERS, ChunkerConfig
from transforms.dedup import registry
from transforms.dedup.config import FilterConfig
from transforms.evaluation import metrics
from transforms.evaluation import report as eval_report
from transforms.evaluation import ir_scoring
from transforms.evaluation.datasets import BEIR, CHROMA, DATASETS, read_dataset, sample_questions
from transforms.evaluation.features import (
    DEFAULT_CACHE_MAX_BYTES,
    FeatureStore,
    open_cache,
)
from transforms.evaluation.grid import (
    DEFAULT_CHUNKERS,
    DEFAULT_FILTERS,
    GridFilter,
    chunker_label,
    grid_needs,
    parse_chunkers,
    parse_filter_grid,
)
from transforms.evaluation.lemmas import DEFAULT_LEMMA_MODEL, LemmaTable, lemma_tables, load_lemmatizer
from transforms.evaluation.scoring import DENSE, RETRIEVALS, evaluate_chunker
from transforms.features import cache as feature_cache
from transforms.features import kernels
from transforms.features import precision as precisions
from transforms.features.embedding import EmbeddingConfig, embed_texts
from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model
from transforms.output import snapshots
from transforms.query import retrieval as ranking

LOG = logging.getLogger('ragsieve.evaluate')

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CHROMA_DATA = REPO_ROOT.parent / 'shared' / 'data' / 'chroma'

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
    # bf16: chunks embedded as `build --embed_precision bf16` embeds them; questions in fp32, as `query` does.
    embed_precision: str = precisions.FP32
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


# --- one chunker: the build's stages once, then every filter of the grid ---------------------


# --- the job -------------------------------------------------------------------------------


def evaluate(config: EvaluateConfig, model=None) -> dict:
    """Runs the grid and writes results.csv, table_*.md, plot_*.png and summary.json.

    Args:
      config: The run's settings.
      model: The loaded embedding model, if the caller has it; loaded from
        `config.embedding_model` otherwise.

    Returns:
      The summary: settings, question count and wall seconds per chunker and stage.

    Raises:
      ValueError: For unreadable data or models.
    """
    with progress_view.View(config.progress, config.progress_interval, LOG) as view:
        return _evaluate_all(config, model, view)


def _evaluate_all(config: EvaluateConfig, model, view: progress_view.View) -> dict:
    """`evaluate`, its steps and grid shown by `view`."""
    started = time.perf_counter()
    with view.step('read dataset', config.data) as step:
        documents, questions, rejected = read_dataset(config.dataset, config.data, config.split)
        questions = sample_questions(questions, config.max_questions, config.seed)
        step.detail = f'{len(documents):,} documents, {len(questions):,} questions'
    if not questions:
        raise ValueError(f'no questions in {config.data}' + (f' ({len(rejected)} rejected)' if rejected else ''))
    output = Path(config.output)
    output.mkdir(parents=True, exist_ok=True)
    eval_report.write_rejected(rejected, output / 'rejected.csv')

    mode = precisions.kernel_mode(config.embed_precision, kernels.DEFAULT_MODE)
    if model is None:
        with view.step('load embedding model', config.embedding_model):
            model = precisions.set_precision(
                load_embedding_model(config.embedding_model, kernel_mode=mode), config.embed_precision)
    lock = snapshots.lock(config.cache) if config.cache else contextlib.nullcontext()
    with lock:
        if config.cache:
            feature_cache.delete_incomplete(config.cache)
        settings = FilterConfig()
        store = FeatureStore(model, config.batch_size, settings.features, open_cache(
            config.cache, EmbeddingConfig(config.embedding_model, config.batch_size,
                                          kernels=mode,
                                          precision=config.embed_precision), model, settings.features,
            grid_needs(config.filters)))
        run_grid = _evaluate_ir if config.dataset == BEIR else _evaluate
        summary = run_grid(config, documents, questions, store, output, started, view)
        summary['rejected'] = eval_report.rejected_summary(rejected)
        t = time.perf_counter()
        store.save(config.cache_max_bytes)
        summary['seconds']['save_cache'] = time.perf_counter() - t
    summary['cache'] = {
        'root': config.cache, 'loaded': store.loaded, 'computed': store.computed,
        'max_bytes': config.cache_max_bytes}
    summary['seconds']['total'] = time.perf_counter() - started
    (output / 'summary.json').write_text(json.dumps(summary, indent=2) + '\n', encoding='utf-8')
    return summary


def question_vectors(store: FeatureStore, questions: Sequence[str]) -> np.ndarray:
    """The questions' vectors: in fp32 whatever the chunks' precision, as `ragsieve query` embeds them.

    Reduced-precision runs embed them outside the store, whose cache holds that precision's vectors only.
    """
    if precisions.precision_of(store.model) == precisions.FP32:
        return store.embed(questions)
    with precisions.fp32_forward(store.model):
        return embed_texts(store.model, list(questions), store.batch_size)


# The count of grid cells scored (a chunker x a filter).
CELLS = 'cells'


def show_grid(view: progress_view.View, config: EvaluateConfig) -> dict:
    """Shows the grid's meter: cells scored, of chunkers x filters, and the chunker being scored.

    Returns:
      `{'chunker': label}`, for the caller to set as it moves on.
    """
    current = {'chunker': ''}
    view.show([progress_view.Meter('grid', CELLS, 'cells', total=len(config.chunkers) * len(config.filters), rate=True,
                              note=lambda counts: current['chunker'])])
    return current


def _evaluate(config, documents, questions, store: FeatureStore, output: Path, started: float,
              view: progress_view.View) -> dict:
    """Scores the grid; writes results.csv, the tables and the plots; returns the summary."""
    with view.step('embed questions', f'{len(questions):,}'):
        query_vectors = question_vectors(store, [q.question for q in questions])
    lemmas: dict[str, LemmaTable] = {}
    setup = {'load_and_queries': time.perf_counter() - started}
    if metrics.PREPROCESSED in config.variants:
        t = time.perf_counter()
        with view.step('lemmatize documents', config.lemma_model):
            nlp = load_lemmatizer(config.lemma_model)
            tables = lemma_tables(nlp, [d.text for d in documents])
        lemmas = {d.doc_id: table for d, table in zip(documents, tables)}
        setup['lemmatize'] = time.perf_counter() - t

    all_rows, timings = [], {}
    current = show_grid(view, config)
    for chunker in config.chunkers:
        label = current['chunker'] = chunker_label(chunker)
        t = time.perf_counter()
        rows, stages = evaluate_chunker(
            chunker, documents, questions, query_vectors, lemmas, config, store, functools.partial(view.add, CELLS))
        stages['total'] = time.perf_counter() - t
        timings[label] = stages
        all_rows.extend(rows)
        (output / f'table_{label}.md').write_text(
            eval_report.markdown_table(rows, f'{config.dataset}, {label}, k={config.k}, '
                                 f'{len(questions)} questions'), encoding='utf-8')
        eval_report.plot_chunker(rows, f'{config.dataset} {label}', output / f'plot_{label}.png')
        eval_report.write_csv(all_rows, output / 'results.csv')
    view.finish()
    summary = {
        'dataset': config.dataset,
        'data': str(config.data),
        'documents': len(documents),
        'questions': len(questions),
        'k': config.k,
        'retrieval': config.retrieval,
        'chunkers': [chunker_label(c) for c in config.chunkers],
        'filters': [f'{g.name}' + ('' if g.threshold is None else f'@{g.threshold:g}') for g in config.filters],
        'variants': list(config.variants),
        'seconds': {'setup': setup, 'chunkers': timings},
    }
    return summary


def _evaluate_ir(config, documents, queries, store: FeatureStore, output: Path, started: float,
                 view: progress_view.View) -> dict:
    """Scores an IR set (BEIR layout); writes results.csv and a table per chunker; returns the summary."""
    with view.step('embed queries', f'{len(queries):,}'):
        query_vectors = question_vectors(store, [q.text for q in queries])
    setup = {'load_and_queries': time.perf_counter() - started}
    all_rows, timings = [], {}
    # The hybrid ranking logs each query's dedup at INFO, as the query job does: too many lines here.
    logging.getLogger('ragsieve.query').setLevel(logging.WARNING)
    current = show_grid(view, config)
    for chunker in config.chunkers:
        label = current['chunker'] = chunker_label(chunker)
        t = time.perf_counter()
        rows, stages = ir_scoring.evaluate_ir_chunker(chunker, documents, queries, query_vectors, config, store,
                                                      functools.partial(view.add, CELLS))
        stages['total'] = time.perf_counter() - t
        timings[label] = stages
        all_rows.extend(rows)
        (output / f'table_{label}.md').write_text(eval_report.ir_markdown_table(
            rows, f'{config.dataset} {Path(config.data).name} ({config.split}), {label}, '
                  f'{len(queries)} queries, {len(documents)} passages'), encoding='utf-8')
        eval_report.write_csv(all_rows, output / 'results.csv', eval_report.IR_CSV_COLUMNS)
    view.finish()
    return {
        'dataset': config.dataset,
        'data': str(config.data),
        'split': config.split,
        'documents': len(documents),
        'questions': len(queries),
        'retrievals': list(config.retrievals),
        'ranking': dataclasses.asdict(config.ranking),
        'chunkers': [chunker_label(c) for c in config.chunkers],
        'filters': [f'{g.name}' + ('' if g.threshold is None else f'@{g.threshold:g}') for g in config.filters],
        'seconds': {'setup': setup, 'chunkers': timings},
    }


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
                             'questions are embedded in fp32, as by `ragsieve query`.')
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


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Parses flags, runs the evaluation and prints where the results are.

    Raises:
      ValueError: For invalid flags or unreadable data.
    """
    logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
    config = config_from_args(parse_args(argv))
    summary = evaluate(config)
    rejected = summary['rejected']['count']
    print(f"evaluated {len(summary['chunkers'])} chunkers x {len(summary['filters'])} filters on "
          f"{summary['questions']} questions" + (f" ({rejected} rejected: rejected.csv)" if rejected else '')
          + f" in {summary['seconds']['total']:.0f} s -> {config.output}")
    return summary

