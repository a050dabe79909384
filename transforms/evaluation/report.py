"""Reporting of the evaluation grid: results.csv, one Markdown table and one plot per chunker."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Sequence

from transforms.evaluation.grid import METHOD_NAMES, NONE

# `method` is the study's display name; `filter` the machine-readable name
# (`none`, `cascade` or a registry name such as `ner_exact`).
CSV_COLUMNS = (
    'dataset', 'chunker', 'retrieval', 'method', 'filter', 'threshold', 'variant', 'chunks', 'kept',
    'reduction', 'precision', 'recall', 'iou', 'oracle', 'char_precision', 'char_recall', 'char_iou',
)

# Short point labels for the plots, where the study's names would overlap.
PLOT_LABELS = {
    'No filtering': 'none',
    'ExactNorm': 'exact',
    'MinHash-LSH': 'minhash',
    'Similarity': 'sim',
    'Similarity + Topics': 'sim+T',
    'Similarity + NER': 'sim+N',
    'Similarity + Topics + NER': 'sim+T+N',
    'NER Exact': 'ner_exact',
    'NER Half': 'ner_half',
    'Intra-doc (klarRAG)': 'intra_doc',
    'Cascade (exact, minhash, intra_doc)': 'cascade',
}


# The columns of an IR set's results.csv (`--dataset beir`); the group ones stay empty
# for a set without groups.
IR_CSV_COLUMNS = (
    'dataset', 'chunker', 'retrieval', 'method', 'filter', 'passages', 'chunks', 'kept', 'reduction',
    'ndcg@10', 'recall@10', 'recall@100', 'mrr@10', 'coverage@10', 'all_groups@10',
)


def write_csv(rows: Sequence[dict], path: Path, columns: Sequence[str] = CSV_COLUMNS) -> None:
    """Writes results.csv, floats with 6 decimals."""
    with path.open('w', newline='', encoding='utf-8') as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()})


def markdown_table(rows: Sequence[dict], title: str) -> str:
    """The study's table layout, one section per variant plus the character ranges."""
    lines = [f'# {title}', '']
    variants = list(dict.fromkeys(r['variant'] for r in rows))
    for variant in variants:
        lines += [f'## Tokens, {variant}', '',
                  '| Method | Threshold | Reduction (%) | Precision | Recall | IoU | Oracle |',
                  '|---|---|---|---|---|---|---|']
        for r in (r for r in rows if r['variant'] == variant):
            lines.append(
                f"| {r['method']} | {_threshold(r)} | {r['reduction']:.3f} | {r['precision']:.3f} "
                f"| {r['recall']:.3f} | {r['iou']:.3f} | {r['oracle']:.3f} |")
        lines.append('')
    lines += ['## Character ranges (Chroma study metric)', '',
              '| Method | Threshold | Reduction (%) | Precision | Recall | IoU |',
              '|---|---|---|---|---|---|']
    for r in (r for r in rows if r['variant'] == variants[0]):
        lines.append(
            f"| {r['method']} | {_threshold(r)} | {r['reduction']:.3f} | {r['char_precision']:.4f} "
            f"| {r['char_recall']:.3f} | {r['char_iou']:.4f} |")
    return '\n'.join(lines) + '\n'


def write_rejected(rejected: Sequence, path: Path) -> None:
    """Writes rejected.csv: `where, reason` of each question left out (a header only when none was)."""
    with path.open('w', newline='', encoding='utf-8') as f:
        writer = csv.writer(f)
        writer.writerow(('where', 'reason'))
        writer.writerows((r.where, r.reason) for r in rejected)


def rejected_summary(rejected: Sequence) -> dict:
    """The rejections for summary.json: their count, and a count per reason (spans' numbers left out)."""
    reasons: dict[str, int] = {}
    for r in rejected:
        reason = re.sub(r'\[-?\d+, -?\d+\)|\(\d+ characters\)|\'[^\']*\'', '…', r.reason)
        reasons[reason] = reasons.get(reason, 0) + 1
    return {'count': len(rejected), 'reasons': dict(sorted(reasons.items()))}


def ir_markdown_table(rows: Sequence[dict], title: str) -> str:
    """One row per filter and retrieval: index size beside nDCG@10, recall@10/@100, MRR@10 (and groups)."""
    grouped = any('coverage@10' in r for r in rows)
    metrics = IR_CSV_COLUMNS[9:] if grouped else IR_CSV_COLUMNS[9:13]
    lines = [f'# {title}', '', '| Method | Retrieval | Chunks kept | Reduction (%) | ' + ' | '.join(metrics) + ' |',
             '|---|---|---|---|' + '---|' * len(metrics)]
    for r in rows:
        lines.append(f"| {r['method']} | {r['retrieval']} | {r['kept']} | {r['reduction']:.1f} | "
                     + ' | '.join(f'{r[m]:.4f}' if m in r else '-' for m in metrics) + ' |')
    return '\n'.join(lines) + '\n'


def _threshold(row: dict) -> str:
    return '-' if row['threshold'] == '' else f"{row['threshold']:.3f}"


def plot_chunker(rows: Sequence[dict], title: str, path: Path) -> None:
    """Reduction vs recall and vs IoU, one labelled point per filter, one row per variant."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r['variant'] for r in rows))
    fig, axes = plt.subplots(len(variants), 2, figsize=(13, 5.5 * len(variants)), squeeze=False)
    for row_axes, variant in zip(axes, variants):
        points = [r for r in rows if r['variant'] == variant]
        for ax, metric in zip(row_axes, ('recall', 'iou')):
            for r in points:
                label = PLOT_LABELS.get(r['method'], r['method']) + (
                    '' if r['threshold'] == '' else f"@{r['threshold']:g}")
                baseline = r['method'] == METHOD_NAMES[NONE]
                ax.scatter(r['reduction'], r[metric], marker='*' if baseline else 'o',
                           s=180 if baseline else 30, color='red' if baseline else 'tab:blue', zorder=3)
                ax.annotate(label, (r['reduction'], r[metric]), fontsize=7,
                            xytext=(4, 3), textcoords='offset points')
                if baseline:
                    ax.axhline(r[metric], color='red', linestyle='--', linewidth=0.8,
                               label='no filtering')
            ax.set_xlabel('Reduction (% of chunks removed)')
            ax.set_ylabel(f'{"Recall" if metric == "recall" else "IoU"} ({variant} tokens)')
            ax.set_title(f'{title}: reduction vs {"recall" if metric == "recall" else "IoU"}')
            ax.grid(alpha=0.3)
            if any(r['method'] == METHOD_NAMES[NONE] for r in points):
                ax.legend(loc='lower left', fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
