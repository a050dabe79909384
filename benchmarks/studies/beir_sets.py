"""Writes IR sets in the BEIR layout for `ragsieve evaluate --dataset beir`, with gold-passage groups.

    python benchmarks/studies/beir_sets.py musique  --questions musique_train.json --corpus musique_train_corpus.json --out DIR
    python benchmarks/studies/beir_sets.py hotpotqa --questions hotpotqa_train.json --corpus hotpotqa_train_corpus.json --out DIR
    python benchmarks/studies/beir_sets.py chroma   --data ../shared/data/chroma --out DIR

- `musique`, `hotpotqa`: multi-hop questions in the files of HippoRAG's
  repository (`data/*_train.json` and `*_train_corpus.json`, 100 questions
  each): the corpus is every passage of the corpus file; a question's relevant
  passages are its supporting ones, one group per hop (MuSiQue's
  `question_decomposition[].paragraph_support_idx`, HotpotQA's supporting
  titles).
- `chroma`: a proxy made of the Chroma evaluation set: each corpus split into
  its paragraphs (blank-line separated), a question's relevant passages those
  overlapping one of its references, one group per reference.

Passage ids are positions in the corpus file (`p0`, `p1`, ...), or `corpus:N`
for Chroma; nothing is sampled, so the output is the same on every run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def multihop(kind: str, questions_path: Path, corpus_path: Path):
    """`(corpus, queries, qrels)` of HippoRAG's MuSiQue or HotpotQA files."""
    corpus_items = json.loads(corpus_path.read_text(encoding="utf-8"))
    if isinstance(corpus_items, dict):  # HotpotQA: title -> sentences
        corpus_items = [{'title': t, 'text': ''.join(s)} for t, s in corpus_items.items()]
    corpus = [(f'p{i}', p['title'], p['text']) for i, p in enumerate(corpus_items)]
    by_title: dict[str, list[str]] = {}
    by_passage: dict[tuple[str, str], str] = {}
    for doc_id, title, text in corpus:
        by_title.setdefault(title, []).append(doc_id)
        by_passage[(title, text.strip())] = doc_id
    queries, qrels = [], []
    for n, item in enumerate(json.loads(questions_path.read_text(encoding='utf-8'))):
        query_id = str(item.get('id') or item.get('_id') or n)
        queries.append((query_id, item['question']))
        if kind == 'musique':
            paragraphs = {p['idx']: p for p in item['paragraphs']}
            for hop, step in enumerate(item['question_decomposition']):
                p = paragraphs[step['paragraph_support_idx']]
                qrels.append((query_id, by_passage[(p['title'], p['paragraph_text'].strip())], 1, f'hop{hop + 1}'))
        else:
            for title in dict.fromkeys(t for t, _ in item['supporting_facts']):
                for doc_id in by_title[title]:
                    qrels.append((query_id, doc_id, 1, title))
    return corpus, queries, qrels


def chroma(folder: Path):
    """`(corpus, queries, qrels)` of the Chroma set: paragraphs as passages, references as groups."""
    from transforms.evaluation.datasets import read_chroma

    documents, questions, _ = read_chroma(folder)
    corpus, spans = [], {}
    for d in documents:
        for n, m in enumerate(m for m in re.finditer(r'\S(?:.*?\S)?(?=\n\s*\n|\s*\Z)', d.text, re.S)):
            doc_id = f'{d.doc_id}:{n}'
            corpus.append((doc_id, '', m.group()))
            spans.setdefault(d.doc_id, []).append((doc_id, m.start(), m.end()))
    queries, qrels = [], []
    for n, q in enumerate(questions):
        query_id = f'q{n}'
        queries.append((query_id, q.question))
        seen = set()
        for g, (start, end) in enumerate(q.references):
            for doc_id, s, e in spans[q.doc_id]:
                if s < end and start < e and (doc_id, g) not in seen:
                    seen.add((doc_id, g))
                    qrels.append((query_id, doc_id, 1, f'ref{g + 1}'))
    return corpus, queries, qrels


def main(argv=None) -> int:
    from transforms.evaluation.beir import write_beir

    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('kind', choices=('musique', 'hotpotqa', 'chroma'))
    parser.add_argument('--questions', type=Path, help='musique, hotpotqa: the questions file.')
    parser.add_argument('--corpus', type=Path, help='musique, hotpotqa: the corpus file (beside the questions).')
    parser.add_argument('--data', type=Path, help='chroma: the Chroma evaluation folder.')
    parser.add_argument('--out', type=Path, required=True, help='The BEIR folder to write.')
    args = parser.parse_args(argv)
    if args.kind == 'chroma':
        corpus, queries, qrels = chroma(args.data)
    else:
        corpus, queries, qrels = multihop(args.kind, args.questions, args.corpus)
    write_beir(args.out, corpus, queries, qrels)
    print(f'{args.out}: {len(corpus)} passages, {len(queries)} queries, {len(qrels)} qrels')
    return 0


if __name__ == '__main__':
    sys.exit(main())
