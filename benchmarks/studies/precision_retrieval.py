"""fp32, bf16 and int8 embeddings judged by retrieval: what each reduced precision loses against fp32 (issue 56).

    python benchmarks/studies/precision_retrieval.py --sets /tmp/beir/musique /tmp/beir/hotpotqa /tmp/beir/chroma \\
        --out /tmp/precision

For each variant, one loaded model runs `ragsieve evaluate` in-process
(`pipelines.evaluate.job.evaluate`) on:
- the Chroma evaluation (recursive 400/200, every chunk kept): token recall
  and IoU of the top 5, dense and hybrid (the query job's ranking);
- each IR set in the BEIR layout (`beir_sets.py`: MuSiQue, HotpotQA, the
  Chroma proxy; recursive 256/0, every chunk kept): nDCG@10, recall@100 and
  coverage@10, dense and hybrid;
with the questions in fp32 (`mixed`: as `ragsieve query` embeds them, and
as a RAG service with its own fp32 model does) and, for reduced precisions,
in the chunks' precision (`same`). Each row prints its loss against fp32 in
points (absolute x 100); a precision is accepted when no set loses more than
0.5. Beside the losses, the proxy a build can afford to check: on the 64
chunks a build samples (the first >= 256 chunks in input order, seeded
sample), the min and mean cosine to fp32 and the mean overlap of each
chunk's 5 nearest among the sample. Losses are differences of means over
100 (MuSiQue, HotpotQA) or 472 questions: one question moves a set's
coverage@10 by 0.25-0.5 points. `int8/N` variants calibrate on the
first N texts of the shipped set only (a worse int8, to see whether the
proxy follows the losses). Scores land in OUT/scores.json; a rerun only
computes what is missing.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CHROMA_CHUNKER, IR_CHUNKER = 'recursive:400:200', 'recursive:256:0'
SAMPLE, NEAREST = 64, 5
BOUND = 0.5  # points


def load(variant: str):
    """The model of `variant`: fp32 (torch), bf16, int8, or int8/N (calibrated on N texts of the set)."""
    from transforms.features import precision, quantize
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    name, _, n = variant.partition('/')
    model = load_embedding_model(DEFAULT_EMBEDDING_MODEL, kernel_mode='native')
    if name == precision.FP32:
        return model
    shipped = quantize.calibration_texts
    if n:
        quantize.calibration_texts = lambda: shipped()[:int(n)]
    try:
        return precision.set_precision(model, name)
    finally:
        quantize.calibration_texts = shipped


def evaluate(model, args, dataset: str, data: str, chunker: str, retrieval: str, query: str, out: Path) -> dict:
    """`ragsieve evaluate`'s rows (filter none) on one set: {retrieval: {metric: value}}."""
    from pipelines.evaluate import job, options
    from transforms.features import precision

    flags = ['--dataset', dataset, '--data', data, '--output', str(out), '--chunkers', chunker, '--filters', 'none',
             '--progress', 'none', '--cache', args.cache, '--query_precision', query,
             '--embed_precision', precision.precision_of(model)]
    if retrieval:
        flags += ['--retrieval', retrieval]
    job.evaluate(options.config_from_args(options.parse_args(flags)), model)
    rows = list(csv.DictReader(open(out / 'results.csv', encoding='utf-8')))
    if dataset == 'chroma':
        row = next(r for r in rows if r['variant'] == 'raw')
        return {retrieval: {'recall': float(row['recall']), 'iou': float(row['iou'])}}
    return {r['retrieval']: {m: float(r[m]) for m in ('ndcg@10', 'recall@100', 'coverage@10')}
            for r in rows if r['retrieval'] != 'bm25'}


def sample_texts(model, dataset: str, data: str, chunker: str) -> list[str]:
    """The chunks a build would sample for its check: the first >= 256 in input order, then 64 seeded."""
    from transforms.chunking.chunk_documents import document_spans
    from transforms.evaluation.datasets import read_dataset
    from transforms.evaluation.grid import parse_chunker
    from transforms.features import precision

    documents, _, _ = read_dataset(dataset, data)
    texts = []
    for d in documents:
        texts += [d.text[s:e] for s, e, _ in document_spans(d, parse_chunker(chunker), model)]
        if len(texts) >= 4 * SAMPLE:
            break
    return precision.sample_texts(texts, SAMPLE)


def proxy(model, texts: list[str]) -> dict:
    """Min and mean cosine to fp32, and the mean overlap of each chunk's nearest among the sample."""
    from transforms.features import precision
    from transforms.features.embedding import embed_texts

    reduced = embed_texts(model, texts)
    with precision.fp32_forward(model):
        full = embed_texts(model, texts)
    cosines = (reduced * full).sum(axis=1)

    def nearest(v):
        sims = v @ v.T
        np.fill_diagonal(sims, -np.inf)
        return np.argsort(-sims, axis=1, kind='stable')[:, :NEAREST]

    overlap = np.mean([len(set(a) & set(b)) / NEAREST for a, b in zip(nearest(full), nearest(reduced))])
    return {'min_cosine': float(cosines.min()), 'mean_cosine': float(cosines.mean()), 'nearest': float(overlap)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sets', nargs='*', default=[], help='IR sets in the BEIR layout.')
    parser.add_argument('--chroma', type=str, default=str(REPO.parent / 'shared' / 'data' / 'chroma'))
    parser.add_argument('--variants', type=str, default='fp32,bf16,int8')
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('--cache', type=str, default=None, help='Feature cache (default: OUT/cache).')
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    args.cache = args.cache or str(args.out / 'cache')
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / 'scores.json'
    scores = json.loads(path.read_text()) if path.exists() else {}
    sets = [('chroma_eval', 'chroma', args.chroma, CHROMA_CHUNKER)] + [
        (Path(s).name, 'beir', s, IR_CHUNKER) for s in args.sets]
    for variant in args.variants.split(','):
        model = None
        queries = ['fp32'] if variant == 'fp32' else ['fp32', 'same']
        for name, dataset, data, chunker in sets:
            for query in queries:
                key = f'{variant}|{query}|{name}'
                if key in scores:
                    continue
                model = model or load(variant)
                found = {}
                with tempfile.TemporaryDirectory() as tmp:
                    for retrieval in (['dense', 'hybrid'] if dataset == 'chroma' else [None]):
                        found.update(evaluate(model, args, dataset, data, chunker, retrieval, query, Path(tmp)))
                scores[key] = found
                path.write_text(json.dumps(scores, indent=1, sort_keys=True))
            proxy_key = f'{variant}|proxy|{name}'
            if variant != 'fp32' and proxy_key not in scores:
                model = model or load(variant)
                scores[proxy_key] = proxy(model, sample_texts(model, dataset, data, chunker))
                path.write_text(json.dumps(scores, indent=1, sort_keys=True))
    report(scores, [s[0] for s in sets], args.variants.split(','))


def report(scores: dict, sets: list[str], variants: list[str]) -> None:
    """One row per set, retrieval and metric: fp32's value, then each variant's loss in points against it."""
    runs = [(v, q) for v in variants if v != 'fp32' for q in ('fp32', 'same')
            if all(f'{v}|{q}|{s}' in scores for s in sets)]
    print('| set | retrieval | metric | fp32 | ' + ' | '.join(
        f'{v}, {"fp32 questions" if q == "fp32" else v + " questions"}' for v, q in runs) + ' |')
    print('|' + '---|' * (4 + len(runs)))
    worst = {run: 0.0 for run in runs}
    for s in sets:
        for retrieval, metrics in scores[f'fp32|fp32|{s}'].items():
            for metric, base in metrics.items():
                losses = [round(100 * (base - scores[f'{v}|{q}|{s}'][retrieval][metric]), 2) for v, q in runs]
                worst = {run: max(worst[run], x) for run, x in zip(runs, losses)}
                print(f'| {s} | {retrieval} | {metric} | {base:.4f} | ' + ' | '.join(f'{x:+.2f}' for x in losses)
                      + ' |')
    print('| **worst loss** | | | | ' + ' | '.join(f'**{worst[r]:+.2f}**' for r in runs) + ' |')
    print('| accepted (<= 0.5) | | | | ' + ' | '.join('yes' if worst[r] <= BOUND else 'no' for r in runs) + ' |')
    print('\nproxy on the 64 chunks a build samples (min cosine / mean cosine / nearest-5 overlap):')
    for variant in variants:
        if variant == 'fp32':
            continue
        cells = [scores.get(f'{variant}|proxy|{s}') for s in sets]
        print(f'{variant:8} ' + '  '.join(f'{s}: {c["min_cosine"]:.4f} / {c["mean_cosine"]:.5f} / {c["nearest"]:.3f}'
                                          for s, c in zip(sets, cells) if c))


if __name__ == '__main__':
    main()
