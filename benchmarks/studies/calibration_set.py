"""Writes the calibration set `--embed_precision int8` quantizes the model on (issue 56).

    python benchmarks/studies/calibration_set.py --out transforms/features/calibration/texts.txt

The set ships with ragsieve and is never the corpus being built, so the
quantized model, and every vector it computes, is the same whatever the input.
Its texts are ragsieve's own prose (Apache-2.0): the paragraphs of README.md
and docs/*.md with tables, code blocks and markup removed, cut at sentence
ends into passages of about a chunk's length, plus the headings as short,
query-like texts (a build embeds questions too). A passage is picked by the
hash of its text, not its place, so the set is stable for a given docs tree;
the shipped file was written once and is not regenerated with every change
of the docs (the model's int8 bits would follow them).
"""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PASSAGES = 240
HEADINGS = 60
WORDS = (40, 160)  # a passage's length in words: about a recursive 400-character chunk to a 256-token one


def _plain(text: str) -> str:
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)  # links and images: their text
    text = re.sub(r'[`*_]{1,3}', '', text)
    return re.sub(r'\s+', ' ', text).strip()


def blocks(markdown: str) -> tuple[list[str], list[str]]:
    """(paragraphs, headings) of a Markdown text, as plain one-line strings."""
    paragraphs, headings, current, fenced = [], [], [], False
    for line in markdown.splitlines() + ['']:
        if line.lstrip().startswith('```'):
            fenced = not fenced
            continue
        if fenced or line.lstrip().startswith('|'):
            continue
        if line.startswith('#'):
            headings.append(_plain(line.lstrip('#')))
            line = ''
        if line.strip():
            current.append(line)
        elif current:
            paragraphs.append(_plain(' '.join(current)))
            current = []
    return paragraphs, headings


def passages(paragraph: str) -> list[str]:
    """A paragraph cut at sentence ends into passages of `WORDS` words (shorter ones dropped)."""
    out, current = [], []
    for sentence in re.split(r'(?<=[.!?])\s+', paragraph):
        current.append(sentence)
        if len(' '.join(current).split()) >= WORDS[1] // 2:
            out.append(' '.join(current))
            current = []
    if current:
        out.append(' '.join(current))
    return [p for p in out if WORDS[0] <= len(p.split()) <= WORDS[1]]


def _by_hash(texts) -> list[str]:
    return sorted(set(texts), key=lambda t: hashlib.blake2b(t.encode('utf-8'), digest_size=8).digest())


def calibration_texts(files) -> list[str]:
    every_passage, every_heading = [], []
    for path in files:
        paragraphs, headings = blocks(Path(path).read_text(encoding='utf-8'))
        every_passage += [p for paragraph in paragraphs for p in passages(paragraph)]
        every_heading += [h for h in headings if 2 <= len(h.split()) <= 16]
    return _by_hash(every_passage)[:PASSAGES] + _by_hash(every_heading)[:HEADINGS]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=Path, required=True)
    args = parser.parse_args()
    files = [REPO / 'README.md'] + sorted((REPO / 'docs').glob('*.md'))
    texts = calibration_texts(files)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(''.join(t + '\n' for t in texts), encoding='utf-8')
    print(f'{len(texts)} texts from {len(files)} files -> {args.out}')


if __name__ == '__main__':
    main()
