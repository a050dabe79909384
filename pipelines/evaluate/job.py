"""Evaluation job: the chunk-filtering study's grid (chunkers x filters) scored on a QA dataset.

This job runs in one process and calls the build's own stage functions
directly (`evaluation.features`: `document_spans`, `embed_texts`,
`extract_entities`, `compute.with_minhash`/`with_topics`, and
`in_memory.apply_filter`); it is not a Beam pipeline. The grid chunks, embeds and
computes the filter features once per chunker and then scores 17 filters
that only *select subsets* of those chunks: as a Beam pipeline each subset
would re-run or re-materialize the whole chain, while in process a filter
costs one pass of its `dedup` function and one exact FAISS search. The build
job (`pipelines/build_index/`) is where the same functions run at scale. The
flags and config are options.py, grid parsing `evaluation.grid`, one
chunker's run `evaluation.scoring`, the metrics `evaluation.metrics`,
reporting `evaluation.report`.

Protocol (study Section 3.6): one index holds the chunks of every document
of the dataset; each question retrieves the exact top-k (cosine) among the
chunks a filter kept. Only retrieved chunks of the question's own document
can hit its reference; chunks of other documents still count as retrieved
text, as in the Chroma chunking study's evaluation (one collection for all
corpora, queried without a corpus filter). See `transforms/evaluation/metrics.py`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from pipelines.common import progress as progress_view
from pipelines.common.progress_meters import Meter
from pipelines.evaluate.options import SAME, EvaluateConfig, config_from_args, parse_args
from transforms.dedup.config import FilterConfig
from transforms.evaluation import ir_scoring, metrics
from transforms.evaluation import report as eval_report
from transforms.evaluation.datasets import BEIR, read_dataset, sample_questions
from transforms.evaluation.features import FeatureStore, open_cache
from transforms.evaluation.grid import chunker_label, grid_needs
from transforms.evaluation.lemmas import LemmaTable, lemma_tables, load_lemmatizer
from transforms.evaluation.scoring import evaluate_chunker
from transforms.features import cache as feature_cache
from transforms.features import kernels
from transforms.features import precision as precisions
from transforms.features.embedding import EmbeddingConfig, embed_texts
from transforms.features.models import load_embedding_model
from transforms.output import snapshots

LOG = logging.getLogger('ragsieve.evaluate')


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


def question_vectors(store: FeatureStore, questions: Sequence[str], query_precision: str = precisions.FP32
                     ) -> np.ndarray:
    """The questions' vectors: in fp32 whatever the chunks' precision, as `ragsieve query` embeds them, or in the
    chunks' own precision (`query_precision` `same`).

    Reduced-precision runs embed them outside the store, whose cache holds chunks' vectors only.
    """
    if precisions.precision_of(store.model) == precisions.FP32:
        return store.embed(questions)
    if query_precision == SAME:
        return embed_texts(store.model, list(questions), store.batch_size)
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
    view.show([Meter('grid', CELLS, 'cells', total=len(config.chunkers) * len(config.filters), rate=True,
                     note=lambda counts: current['chunker'])])
    return current


def _evaluate(config, documents, questions, store: FeatureStore, output: Path, started: float,
              view: progress_view.View) -> dict:
    """Scores the grid; writes results.csv, the tables and the plots; returns the summary."""
    with view.step('embed questions', f'{len(questions):,}'):
        query_vectors = question_vectors(store, [q.question for q in questions], config.query_precision)
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
        query_vectors = question_vectors(store, [q.text for q in queries], config.query_precision)
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
