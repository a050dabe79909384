"""Delta chunks: whole reader sentences, widened when short or cut by the chunker, exact offsets, merged."""

import dataclasses

from tests.helpers import NEW_BULLET, make, wrapped_release
from transforms.lineage.deltas import (
    MAX_WIDEN_CHARS,
    Duplicate,
    delta_chunks,
    merge_equal_deltas,
    novel_runs,
    novel_spans,
    sentence_context,
    source_of,
)
from transforms.lineage.sentences import DocumentSentences, KeptText, is_covered, tokens
from transforms.types import DELTA, Dropped

OLD, NEW = wrapped_release('15.0.0'), wrapped_release('15.1.0')
WRAPPED_SENTENCE = (
    'A non-normative HTML file listing all\nvalid identifier characters for Unicode 15.1.0 can be found at\n'
    'https://www.unicode.org/Public/15.1.0/ucd/DerivedCoreProperties.html, and\n'
    'normalization is implemented exactly as the standard annex specifies.')
# The code line '15.1.0' alone is one token: it comes with the lines above it.
CODE_DELTA = ">>> import unicodedata\n    >>> unicodedata.unidata_version\n    '15.1.0'"


def deltas_of(text, kept_text, **cut):
    return [text[s:e] for s, e in novel_spans(text, KeptText.of(kept_text, **cut))]


def duplicate(doc_id, text, document=None, keeper='v1#0', reason='minhash'):
    """A dropped chunk `text` of `document` (itself by default), with its sentence context."""
    document = document or text
    start = document.index(text)
    chunk = dataclasses.replace(make(doc_id, 0, text), char_start=start, char_end=start + len(text),
                                metadata='{"release": "2"}')
    sentences = DocumentSentences(document)
    before, after = sentence_context(sentences, start, start + len(text))
    spans, _, _ = sentences.clip(start, start + len(text))
    return Duplicate(Dropped(chunk, reason, 'v1#7', 0.9), keeper, before, after, tuple(spans))


def test_a_changed_version_in_a_wrapped_paragraph_gives_its_whole_sentence():
    # The change is on the second line of a sentence wrapped over four: the delta is the sentence, subject included.
    assert deltas_of(NEW, OLD) == [WRAPPED_SENTENCE, CODE_DELTA]
    assert deltas_of(OLD, OLD) == []
    # A copy (same normalized text) is covered whole, whatever its document makes of its sentences.
    rewrapped = OLD.replace('for\nevery character', 'for every\ncharacter')
    assert delta_chunks(duplicate('v3', rewrapped, reason='exact'), KeptText.of(OLD, spans=[(0, 3)])) == []


def test_a_changed_number_is_news_even_in_a_long_sentence():
    long = tokens(WRAPPED_SENTENCE)
    assert len(long) > 23  # long enough that 4-gram coverage alone would call it covered
    assert not is_covered(long, KeptText((tuple(tokens(WRAPPED_SENTENCE.replace('15.1.0', '15.0.0'))),)))
    # A small wording change without numbers is covered (>= 80% of the 4-grams).
    reworded = tokens(WRAPPED_SENTENCE.replace('exactly as', 'just as'))
    assert is_covered(reworded, KeptText((tuple(long),)))
    # ... but not by a sentence the kept chunk's edge cut: the rest of it may be in no kept chunk.
    assert not is_covered(reworded, KeptText((), (tuple(long),)))
    assert is_covered(long[5:], KeptText((), (tuple(long),)))


def test_a_new_bullet_is_a_delta_of_its_own():
    newer = wrapped_release('15.0.0', bullet=True)
    assert deltas_of(newer, OLD) == [NEW_BULLET.strip()]
    # A changed bullet is news as a whole item; its wrapped continuation comes with it.
    changed = OLD.replace('skin tone modifier', 'hair colour component')
    assert deltas_of(changed, OLD) == [
        '- Grapheme cluster boundaries follow the extended rules of the segmentation\n'
        '  annex, so an emoji with a hair colour component is one cluster.']


def test_a_changed_code_line_comes_with_the_lines_before_it():
    code = "    >>> import unicodedata\n    >>> unicodedata.unidata_version\n    '15.1.0'"
    text = 'The session below prints the version.\n\n' + code
    kept = text.replace('15.1.0', '15.0.0')
    # One token alone would not read: the delta takes in the lines above until it has three.
    assert deltas_of(text, kept) == [code.strip()]


def test_short_runs_take_in_the_next_sentence_and_merge_with_a_neighbour():
    sentences = [('version', '3.13'), ('the', 'parser', 'is', 'new'), ('a', 'b', 'c', 'd'), ('e',)]
    kept = KeptText((sentences[1], sentences[2]))
    # "3.13" takes in the sentence after it, "e" at the end the one before it: the runs touch and merge.
    assert novel_runs(sentences, kept) == [(0, 4)]
    apart = sentences[:2] + [('x', 'y', 'z', 'w')] + sentences[2:]
    assert novel_runs(apart, KeptText(tuple(apart[1:4]))) == [(0, 2), (3, 5)]
    assert novel_runs(sentences, KeptText(tuple(sentences))) == []
    assert novel_runs([('tiny',)], KeptText(())) == [(0, 1)]  # nothing to widen with: kept as it is


def test_a_delta_at_a_chunk_edge_carries_the_sentence_the_chunker_cut():
    # The chunker cut the page after "listing all": the next chunk starts inside the sentence.
    start, end = NEW.index('valid identifier'), NEW.index('\n\nChanges')
    dup = duplicate('v2', NEW[start:end], document=NEW)
    assert dup.before == 'A non-normative HTML file listing all\n' and dup.after == ''
    old = DocumentSentences(OLD)
    spans, cut_start, cut_end = old.clip(OLD.index('valid identifier'), OLD.index('\n\nChanges'))
    assert (cut_start, cut_end) == (True, False)
    kept = KeptText.of(OLD[OLD.index('valid identifier'):OLD.index('\n\nChanges')], cut_start, cut_end, spans)
    (delta,) = delta_chunks(dup, kept)
    assert delta.text == WRAPPED_SENTENCE and NEW[delta.char_start:delta.char_end] == delta.text


def test_widening_stops_at_a_space_past_its_limit():
    words = ' '.join(f'w{i}' for i in range(400))
    document = words + ' ends here.'
    start = document.index('w300 ')
    before, after = sentence_context(DocumentSentences(document), start, start + 10)
    assert 0 < len(before) <= MAX_WIDEN_CHARS and before[0] == 'w' and document[:start].endswith(before)
    assert 0 < len(after) <= MAX_WIDEN_CHARS and document[start + 10:].startswith(after + ' ')


def test_delta_chunks_point_into_the_dropped_chunks_document():
    document = 'Header line of the newer page.\n\n' + wrapped_release('15.1.0', bullet=True)
    dup = duplicate('v2', document[document.index('The text'):], document=document)
    deltas = delta_chunks(dup, KeptText.of(OLD))
    # The wrapped sentence, the new bullet and the code block (a prose line between them is unchanged).
    assert [d.chunk_id for d in deltas] == ['v2#0~delta0', 'v2#0~delta1', 'v2#0~delta2']
    for d in deltas:
        assert document[d.char_start:d.char_end] == d.text
        assert (d.kind, d.delta_of, d.doc_id, d.chunk_index, d.metadata) == (DELTA, 'v1#0', 'v2', 0, '{"release": "2"}')
        assert source_of(d.chunk_id) == 'v2#0'


def test_equal_deltas_against_one_kept_chunk_are_merged():
    a = delta_chunks(duplicate('v2', NEW), KeptText.of(OLD))
    b = delta_chunks(duplicate('v3', NEW), KeptText.of(OLD))
    merged = merge_equal_deltas(b + a)
    assert [d.chunk_id for d in merged] == ['v2#0~delta0', 'v2#0~delta1']
    assert [d.represents for d in merged] == [(('v3#0~delta0', 'v3'),), (('v3#0~delta1', 'v3'),)]
