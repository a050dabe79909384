"""Sentence segmenters against hand-labelled boundaries: the deltas' rules, the old line regex, spaCy.

The sample (`benchmarks/studies/sentence_sample/`): excerpts of the five Chroma
corpora whose sentence boundaries were labelled by hand (`chroma_gold.json`
holds offsets only, the text is read from --data; "dev" excerpts were
labelled while the rules were written, "test" ones after they were frozen),
the same excerpts hard-wrapped at 75 characters (`hard_wrap`: spaces become
line breaks, so the labels stay valid), and a Markdown page written for it
(`handwritten.md`: hard-wrapped paragraphs, lists, headings, code, a table,
a quote; `⟂` marks each sentence start). Prints boundary precision, recall
and F1 of each segmenter on each part, and its speed in characters per
second over the five whole corpora, as they are and hard-wrapped.

Segmenters: `line regex` (ragsieve before issue 23: `.!?` + space, and every
line break), `reader` (`transforms.lineage.sentences`), `reader, no width
rule` (every line break inside a paragraph is a space), `spaCy sentencizer`
(rule-based, `spacy.blank('en')`, on the raw text) and `reader blocks +
sentencizer` (the sentencizer inside each of the reader's blocks).

    python -m benchmarks.studies.sentence_segmenters --data ../shared/data/chroma
"""

import argparse
import json
import os
import re
import sys
import time
from unittest import mock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from benchmarks.studies.hard_wrap import hard_wrap  # noqa: E402

SAMPLE = os.path.join(REPO, 'benchmarks', 'studies', 'sentence_sample')
CORPORA = ('chatlogs.md', 'finance.md', 'pubmed.md', 'state_of_the_union.md', 'wikitexts.md')
MARK = '\u27c2'
# ragsieve's sentence regex before issue 23 (transforms/lineage/deltas.py).
_LINE_REGEX = re.compile(r'(?:(?<=[.!?])|(?<=[.!?]["\'\)\]]))\s+|\s*\n\s*')


def stripped(text, spans):
    out = []
    for s, e in spans:
        piece = text[s:e]
        if piece.strip():
            s += len(piece) - len(piece.lstrip())
            out.append((s, s + len(piece.strip())))
    return out


def line_regex(text):
    spans, start = [], 0
    for m in _LINE_REGEX.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    return stripped(text, spans + [(start, len(text))])


def segmenters():
    import spacy

    from transforms.lineage import sentences

    nlp = spacy.blank('en')
    nlp.add_pipe('sentencizer')
    nlp.max_length = 10_000_000

    def sentencizer(text, start=0, end=None):
        end = len(text) if end is None else end
        doc = nlp(text[start:end])
        return stripped(text, [(start + s.start_char, start + s.end_char) for s in doc.sents])

    def no_width_rule(text):
        with mock.patch.object(sentences, 'soft_break', lambda *_: True):
            return sentences.sentence_spans(text)

    def blocks_and_sentencizer(text):
        return [span for s, e in sentences.block_spans(text) for span in sentencizer(text, s, e)]

    return {
        'line regex (before)': line_regex,
        'reader (after)': sentences.sentence_spans,
        'reader, no width rule': no_width_rule,
        'spaCy sentencizer': sentencizer,
        'reader blocks + sentencizer': blocks_and_sentencizer,
    }


def load_sample(data):
    """`{part: [(text, gold boundaries)]}`: dev and test excerpts as they are and hard-wrapped, handwritten."""
    with open(os.path.join(SAMPLE, 'chroma_gold.json'), encoding='utf-8') as f:
        excerpts = json.load(f)['excerpts']
    corpora = {}
    parts = {}
    for e in excerpts:
        if e['corpus'] not in corpora:
            with open(os.path.join(data, e['corpus']), encoding='utf-8') as f:
                corpora[e['corpus']] = f.read()
        text = corpora[e['corpus']][e['start']:e['end']]
        if e['unescape']:
            text = text.replace('\\n', '\n').replace("\\'", "'")
        gold = set(e['boundaries'])
        parts.setdefault(f'Chroma {e["split"]}', []).append((text, gold))
        parts.setdefault(f'Chroma {e["split"]}, hard-wrapped', []).append((hard_wrap(text), gold))
    with open(os.path.join(SAMPLE, 'handwritten.md'), encoding='utf-8') as f:
        parts['handwritten Markdown'] = [marked_text(f.read())]
    return parts


def marked_text(raw):
    """`(text, boundaries)` of a text whose sentence starts are marked with MARK (the first one not)."""
    text, gold = [], set()
    for i, piece in enumerate(raw.split(MARK)):
        if i:
            at = sum(map(len, text))
            gold.add(at + len(piece) - len(piece.lstrip()))
        text.append(piece)
    return ''.join(text), gold


def scores(segment, items):
    found = hits = expected = 0
    for text, gold in items:
        predicted = {s for s, _ in segment(text)[1:]}
        found += len(predicted)
        hits += len(predicted & gold)
        expected += len(gold)
    precision, recall = hits / max(found, 1), hits / max(expected, 1)
    return precision, recall, 2 * precision * recall / max(precision + recall, 1e-9), expected


def speed(segment, texts, rounds=2):
    best = float('inf')
    for _ in range(rounds):
        started = time.perf_counter()
        for text in texts:
            segment(text)
        best = min(best, time.perf_counter() - started)
    return sum(map(len, texts)) / best


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='The folder of the Chroma corpora.')
    args = parser.parse_args()
    parts = load_sample(args.data)
    corpora = []
    for name in CORPORA:
        with open(os.path.join(args.data, name), encoding='utf-8') as f:
            corpora.append(f.read())
    wrapped = [hard_wrap(t) for t in corpora]
    heads = [f'{p} ({sum(len(g) for _, g in items)} boundaries)' for p, items in parts.items()]
    print('| segmenter | ' + ' | '.join(heads) + ' | chars/s as is | chars/s hard-wrapped |')
    print('| --- ' * (len(parts) + 3) + '|')
    for name, segment in segmenters().items():
        cells = []
        for part, items in parts.items():
            p, r, f1, _ = scores(segment, items)
            cells.append(f'P {p:.3f} R {r:.3f} F1 {f1:.3f}')
        cells.append(f'{speed(segment, corpora) / 1e6:.2f} M')
        cells.append(f'{speed(segment, wrapped) / 1e6:.2f} M')
        print(f'| {name} | ' + ' | '.join(cells) + ' |', flush=True)


if __name__ == '__main__':
    main()
