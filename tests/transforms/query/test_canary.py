"""The canary question set: its file format, what counts as found, and a run asked on the sample index."""

import pytest

from tests.helpers import REPO
from transforms.query import canary
from transforms.query.canary import CanaryQuestion
from transforms.query.retriever import Hit

SAMPLE_CANARY = REPO / 'examples' / 'sample_canary.jsonl'


def hit(doc_id, text):
    return Hit(chunk_id=f'{doc_id}#0', doc_id=doc_id, char_start=0, char_end=len(text), text=text, score=1.0,
               cosine=1.0, ranks={})


def test_found_by_document_or_by_text():
    hits = [hit('a.md', 'Water boils at  roughly 87 Degrees Celsius in La Paz.')]
    assert canary.is_found(CanaryQuestion('q', doc_id='a.md'), hits)
    assert canary.is_found(CanaryQuestion('q', text='roughly 87 degrees celsius'), hits)  # case, whitespace
    assert not canary.is_found(CanaryQuestion('q', doc_id='b.md', text='100 degrees'), hits)
    assert not canary.is_found(CanaryQuestion('q', doc_id='a.md'), [])


@pytest.mark.parametrize('lines,message', [
    (['{"question": "q"'], r'x.jsonl:1: not JSON'),
    (['[1]'], 'x.jsonl:1: a line must be a JSON object'),
    (['', '{"doc_id": "d"}'], r'x.jsonl:2: needs a non-empty "question"'),
    (['{"question": "q", "doc_id": ""}'], 'needs an expected "doc_id" or "text"'),
    (['', '  '], 'x.jsonl holds no question'),
])
def test_bad_lines_are_named(lines, message):
    with pytest.raises(ValueError, match=message):
        canary.parse_questions(lines, 'x.jsonl')


def test_an_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match='cannot read --gate_canary'):
        canary.load_questions(str(tmp_path / 'missing.jsonl'))
    (tmp_path / 'latin1.jsonl').write_bytes(b'\xe9')
    with pytest.raises(ValueError, match='cannot read --gate_canary'):
        canary.load_questions(str(tmp_path / 'latin1.jsonl'))


def test_the_sample_canary_is_found_on_the_sample_index(sample_root, embedding_model):
    _, root = sample_root
    questions = canary.load_questions(str(SAMPLE_CANARY))
    result = canary.run_canary(str(root / 'runs' / 'r1'), questions, 5, embedding_model)
    assert (result.found, result.total, result.missed) == (6, 6, ())
    one = canary.run_canary(str(root / 'runs' / 'r1'), questions, 1, embedding_model)
    assert one.found < 6 and len(one.missed) == 6 - one.found
