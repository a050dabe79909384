"""The segmenter benchmark's sample: marked boundaries read back, and the labels of every excerpt in range."""

import json

from benchmarks.studies.sentence_segmenters import SAMPLE, marked_text, scores
from transforms.lineage.sentences import sentence_spans


def test_marked_boundaries_are_sentence_starts():
    text, gold = marked_text('One.\u27c2 Two\n\u27c2- three')
    assert text == 'One. Two\n- three' and gold == {5, 9}


def test_the_handwritten_sample_and_the_labels():
    with open(f'{SAMPLE}/handwritten.md', encoding='utf-8') as f:
        text, gold = marked_text(f.read())
    assert len(gold) == 39 and all(not text[b].isspace() for b in gold)
    precision, recall, _, expected = scores(sentence_spans, [(text, gold)])
    assert (precision, recall, expected) == (1.0, 1.0, 39)
    with open(f'{SAMPLE}/chroma_gold.json', encoding='utf-8') as f:
        excerpts = json.load(f)['excerpts']
    assert {e['split'] for e in excerpts} == {'dev', 'test'} and len(excerpts) == 30
    for e in excerpts:
        assert e['boundaries'] == sorted(set(e['boundaries'])) and 0 < e['boundaries'][0]
        assert e['boundaries'][-1] < e['end'] - e['start']
