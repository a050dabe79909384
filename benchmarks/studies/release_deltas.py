"""What near-duplicate drops cost in lost sentences, and what delta chunks cost in index size.

Makes three "releases" of the articles of a Chroma corpus (wikitexts.md by
default): release 2 changes the first number of every 4th paragraph (e.g.
2011 -> 2012), release 3 also appends a new sentence to every 5th paragraph.
With `--wrap 75` every paragraph is hard-wrapped at 75 characters and
paragraphs are separated by a blank line, as plain-text documentation is
written. Builds the three releases together (one document per release and
article, metadata {"release": N}) with no filter, with the default cascade
and `--deltas off`, and with the default cascade (deltas on), sharing one
feature cache so each chunk is embedded once. Prints, per build: index rows
(kept chunks + deltas) and their tokens, dropped chunks by reason, index
bytes (chunks/ + index/), the distinct sentences (as a reader sees them:
transforms/lineage/sentences.py) found whole in a row of the unfiltered build
that no row of the filtered build contains, and the build's own audit
(manifest.json's `lossless`) when it has one.

    python -m benchmarks.studies.release_deltas [--wrap 75] [--chunk_size 200]
"""

import argparse
import json
import os
import re
import tempfile
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from benchmarks.studies.hard_wrap import hard_wrap  # noqa: E402

RELEASES = (1, 2, 3)
_NUMBER = re.compile(r'\b(1[89]\d\d|20\d\d|\d{1,3})\b')


def articles(path: str, limit: int) -> list[tuple[str, str]]:
    """`(title, text)` of the first `limit` articles (lines ` = Title = ` start one)."""
    out, title, lines = [], None, []
    with open(path, encoding='utf-8') as f:
        for line in f:
            m = re.match(r'^ = ([^=].*?) = $', line.rstrip('\n'))
            if m:
                if title and len(''.join(lines).strip()) > 200:
                    out.append((title, ''.join(lines).strip()))
                title, lines = m.group(1), []
            else:
                lines.append(line)
    if title and len(''.join(lines).strip()) > 200:
        out.append((title, ''.join(lines).strip()))
    return out[:limit]


def release_text(text: str, release: int, wrap: int = 0) -> str:
    """The article as of `release`: numbers bumped (>= 2), sentences added (3), hard-wrapped at `wrap`."""
    paragraphs = text.split('\n')
    out = []
    for i, p in enumerate(paragraphs):
        if release >= 2 and i % 4 == 0:
            p = _NUMBER.sub(lambda m: str(int(m.group(1)) + 1), p, count=1)
        if release >= 3 and i % 5 == 0 and p.strip():
            p = p.rstrip() + f' In release 3 this paragraph gained note number {i} about its sources .'
        out.append(p)
    if wrap:
        return '\n\n'.join(hard_wrap(p.strip(), wrap) for p in out if p.strip())
    return '\n'.join(out)


def write_corpus(data: str, limit: int, root: str, wrap: int = 0) -> list[str]:
    os.makedirs(root, exist_ok=True)
    texts = []
    with open(os.path.join(root, 'releases.jsonl'), 'w', encoding='utf-8') as f:
        for k, (title, text) in enumerate(articles(data, limit)):
            for r in RELEASES:
                body = release_text(text, r, wrap)
                texts.append(body)
                f.write(json.dumps({'id': f'r{r}/{k:03d}', 'text': body,
                                    'metadata': {'release': str(r), 'title': title}}) + '\n')
    return texts


def rows_text(out: str) -> tuple[list[dict], str]:
    import pyarrow.parquet as pq

    from transforms.text import normalize_text

    rows = pq.read_table(os.path.join(out, 'chunks')).select(['chunk_id', 'kind', 'text', 'n_tokens']).to_pylist()
    return rows, '\n'.join(normalize_text(r['text']) for r in rows)


def size(out: str) -> int:
    total = 0
    for sub in ('chunks', 'index'):
        for name in os.listdir(os.path.join(out, sub)):
            total += os.path.getsize(os.path.join(out, sub, name))
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str,
                        default=os.path.join(REPO, '..', 'shared', 'data', 'chroma', 'wikitexts.md'),
                        help='A Chroma corpus with " = Title = " article headings.')
    parser.add_argument('--articles', type=int, default=40, help='Articles taken from it.')
    parser.add_argument('--chunk_size', type=int, default=400, help='The build\'s --chunk_size.')
    parser.add_argument('--wrap', type=int, default=0,
                        help='Hard-wrap every paragraph at this width, paragraphs apart by a blank line (0: as is).')
    args = parser.parse_args()

    from pipelines.build_index import job as build_index
    from transforms.lineage.sentences import sentence_spans
    from transforms.text import normalize_text

    with tempfile.TemporaryDirectory() as tmp:
        texts = write_corpus(args.data, args.articles, os.path.join(tmp, 'corpus'), args.wrap)
        sentences = {normalize_text(t[s:e]) for t in texts for s, e in sentence_spans(t)}
        common = ['--input', os.path.join(tmp, 'corpus'), '--chunk_size', str(args.chunk_size),
                  '--chunk_overlap', '0', '--cache', os.path.join(tmp, 'cache')]
        present = unfiltered_rows = None
        print(f'{len(texts)} documents, {len(sentences)} distinct sentences, wrap {args.wrap or "none"}, '
              f'chunk_size {args.chunk_size}')
        for name, flags in (('none', ['--filter', 'none']), ('cascade, deltas off', ['--deltas', 'off']),
                            ('cascade, deltas on', [])):
            out = os.path.join(tmp, name.replace(' ', '_').replace(',', ''))
            started = time.perf_counter()
            manifest = build_index.run(common + ['--output', out] + flags)
            seconds = time.perf_counter() - started
            rows, joined = rows_text(out)
            found = {s for s in sentences if s in joined}
            if present is None:
                present, unfiltered_rows = found, len(rows)
            lost = present - found
            counts = manifest['counts']
            tokens = {kind: sum(r['n_tokens'] for r in rows if r['kind'] == kind) for kind in ('chunk', 'delta')}
            audit = manifest.get('lossless')
            audited = (f'audit {audit["sentences_lost"]} of {audit["sentences_checked"]} lost'
                       if audit else 'no audit')
            print(f'{name}: {len(rows)} index rows ({counts["chunks"]} chunks + {counts["deltas"]} deltas; '
                  f'{100 * (1 - len(rows) / unfiltered_rows):.1f}% fewer than unfiltered), '
                  f'tokens {tokens["chunk"]} + {tokens["delta"]} '
                  f'(deltas {100 * tokens["delta"] / max(tokens["chunk"], 1):.1f}% of the kept rows\' tokens), '
                  f'{counts["dropped"]} dropped {counts["dropped_by_reason"]}, {size(out)} bytes, '
                  f'sentences lost {len(lost)}/{len(present)} ({100 * len(lost) / len(present):.2f}%), '
                  f'{audited}, lineage ok {manifest["lineage"]["ok"]}, {seconds:.0f} s', flush=True)
            for sentence in sorted(lost)[:3]:
                print(f'    lost: {sentence[:160]}')


if __name__ == '__main__':
    main()
