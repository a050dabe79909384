"""How close `--embed_precision bf16` comes to fp32 on the Chroma corpora: cosines and the top 5 per question.

Chunks the five Chroma corpora (recursive 400/200 by default) as the build
does, embeds every chunk in fp32 and in bf16 with one loaded model (native
kernels: bf16 needs them, and fp32 native differs from portable only in
the last bits), embeds the 472 questions in fp32 as `ragsieve query` does,
and prints the min / mean cosine of each chunk's two vectors and the mean
overlap of the dense top 5 (target: min cosine >= 0.999, overlap >= 0.99).

  python benchmarks/studies/precision_quality.py --data ../shared/data/chroma
"""

import argparse
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'))
    parser.add_argument('--chunker', type=str, default='recursive:400:200')
    parser.add_argument('--k', type=int, default=5)
    args = parser.parse_args()

    from transforms.chunking.chunk_documents import document_spans
    from transforms.evaluation.datasets import read_dataset
    from transforms.evaluation.grid import parse_chunker
    from transforms.features import precision
    from transforms.features.embedding import embed_texts
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    model = precision.set_precision(load_embedding_model(DEFAULT_EMBEDDING_MODEL, kernel_mode='native'), 'bf16')
    documents, questions, _ = read_dataset('chroma', args.data)
    chunker = parse_chunker(args.chunker)
    texts = [d.text[s:e] for d in documents for s, e, _ in document_spans(d, chunker, model)]
    reduced = embed_texts(model, texts)
    with precision.fp32_forward(model):
        full = embed_texts(model, texts)
        queries = embed_texts(model, [q.question for q in questions])
    cosines = (reduced * full).sum(axis=1)
    k = args.k
    top_full = np.argsort(-(queries @ full.T), axis=1, kind='stable')[:, :k]
    top_reduced = np.argsort(-(queries @ reduced.T), axis=1, kind='stable')[:, :k]
    overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(top_full, top_reduced)])
    print(f'{len(texts)} chunks ({args.chunker}), {len(questions)} questions')
    print(f'cosine bf16 to fp32: min {cosines.min():.6f}, mean {cosines.mean():.7f}  (target min >= 0.999)')
    print(f'top-{k} overlap: {overlap:.4f}  (target >= 0.99); questions with the same top {k}: '
          f'{np.mean([set(a) == set(b) for a, b in zip(top_full, top_reduced)]):.3f}')


if __name__ == '__main__':
    main()
