"""Query job: hybrid retrieval over a built index (score fusion, then cross-document dedup).

    python -m pipelines.query --index OUT [--k 5] [--where KEY=VALUE ...] [--json] [--verbose] "question"
    ragsieve query --index OUT "question"

or from Python, loading the index, the BM25 index and the model once:

    retriever = Retriever('OUT')
    result = retriever.search('question', k=5, where={'release': '3.12'})

Ranking: candidates are the union of the dense (FAISS) top-N and the BM25
top-N; each is scored by both signals (its cosine, its BM25 score), the two
are normalized over the candidates (min-max; a cosine below the relevance
floor `min_relevance` counts 0, its BM25 score still counts) and combined as
`alpha * dense + (1 - alpha) * bm25` (alpha 0.4); salience and recency raise
a score by at most `tie_epsilon` of the best one, so they only reorder
near-ties (see transforms/query/fusion.py). A question whose best candidate
is below `floor_gate` looks off-topic: its candidates below the relevance
floor (cosine < `min_relevance`) are dropped. `--fusion rrf --prior fused
--below_floor drop --floor_gate -1` is the ranking before issue 40: the
floor drops, then reciprocal rank fusion of the four signals' ranks,
`weight / (60 + rank)` (docs/querying.md). The fused list is walked
in order (score descending, then chunk_id); a chunk whose cosine to an already
selected chunk is >= `dedup_threshold` is skipped, until k are selected.
`--where` restricts every candidate to an allow-list computed before the
search (transforms/where.py).

Output: `--json` prints one JSON list on stdout, one object per result, best
first: chunk_id, doc_id, char_start, char_end, text, score (fused), cosine
(dense, to the query), ranks ({dense, bm25, salience, recency}, null where
the chunk got no contribution from that signal), matched_by (with --where:
the documents whose metadata admitted the chunk) and duplicates: the chunks
skipped as duplicates of this one ({chunk_id, doc_id, cosine, score, ranks}).
Without `--json` the results are printed as text, and `--verbose` adds the
skipped duplicates. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Optional, Sequence

from pipelines.common import ranking_flags
from pipelines.common.flags import OneLineParser
from transforms.features.models import check_device
from transforms.query import retrieval
from transforms.query import where as where_filter
from transforms.query.retriever import Retriever, SearchResult

LOG = logging.getLogger('ragsieve.query')

def parser() -> argparse.ArgumentParser:
    """The query flags."""
    p = OneLineParser(prog='ragsieve query', description='Query a built ragsieve index.')
    p.add_argument('question', type=str, help='The question to retrieve chunks for.')
    p.add_argument('--index', type=str, required=True, help='Directory of a built index, or a versioned root (--versioned '
                        'builds), whose LATEST run is used: local, s3://BUCKET/PREFIX or gs://BUCKET/PREFIX.')
    p.add_argument('--k', type=int, default=5, help='Number of chunks to return.')
    p.add_argument('--json', action='store_true', help='Print the results as one JSON list on stdout.')
    p.add_argument('--verbose', action='store_true',
                   help='Also print the chunks skipped as duplicates, and their ranks.')
    p.add_argument('--embedding_model', type=str, default=None,
                   help="Model to embed the question with; the index's own by default, and it "
                        'must be that one.')
    p.add_argument('--device', type=str, default='cpu', help='Torch device for the embedding model.')
    p.add_argument('--where', type=str, action='append', default=None, metavar='KEY=VALUE',
                   help='Only chunks whose document, or a document they represent, has this metadata '
                        'value; repeatable: AND across keys, OR for one key given twice.')
    p.add_argument('--nprobe', type=int, default=None,
                   help='IVF index types: inverted lists searched per query (more: slower, better recall).')
    p.add_argument('--ef_search', type=int, default=None,
                   help='HNSW index types: candidate list size of the search (more: slower, better recall).')
    ranking_flags.add_ranking_flags(p)
    return p


def format_text(result: SearchResult, verbose: bool) -> str:
    """The results as text for a terminal."""
    def ranks(h):
        return ' '.join(f'{s}={h.ranks[s] if h.ranks[s] is not None else "-"}' for s in retrieval.SIGNALS)

    lines = []
    for i, h in enumerate(result.hits, 1):
        lines.append(f'{i}. {h.chunk_id} [{h.doc_id} {h.char_start}:{h.char_end}] '
                     f'score={h.score:.5f} cosine={h.cosine:.3f} {ranks(h)}'
                     + (f' matched_by={",".join(h.matched_by)}' if h.matched_by else ''))
        lines.append('   ' + ' '.join(h.text.split()))
        if verbose:
            for s in result.skipped:
                if s.duplicate_of == h.chunk_id:
                    lines.append(f'   skipped duplicate {s.hit.chunk_id} (cosine {s.cosine:.3f}, '
                                 f'score={s.hit.score:.5f} {ranks(s.hit)})')
    if not result.hits:
        lines.append('no chunk above the minimum relevance')
    return '\n'.join(lines)


def run(argv: Optional[Sequence[str]] = None, model=None) -> SearchResult:
    """Runs one query and prints it; returns the result.

    Args:
      argv: The flags and the question.
      model: An already loaded model (tests); the index's model by default.

    Raises:
      ValueError: for bad settings, an empty question, a missing or
        incomplete index or a model other than the index's.
    """
    logging.basicConfig(format='%(levelname)s %(name)s: %(message)s', stream=sys.stderr)
    args = parser().parse_args(argv)
    LOG.setLevel(logging.INFO)
    retrieval.check_question(args.question)
    retrieval.check_k(args.k, '--k')
    check_device(args.device)
    config = ranking_flags.ranking_config(args)
    where = where_filter.parse_where(args.where) if args.where else None
    retriever = Retriever(args.index, config, model=model, model_name=args.embedding_model, device=args.device,
                          nprobe=args.nprobe, ef_search=args.ef_search)
    result = retriever.search(args.question, args.k, where)
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False, indent=2))
    else:
        print(format_text(result, args.verbose))
    return result


if __name__ == '__main__':
    from pipelines.common.failures import run_and_report

    sys.exit(run_and_report('query', run, sys.argv[1:]))
