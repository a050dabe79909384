"""The evaluation's dataset readers (Chroma, SQuAD) on the fixtures, and the question sample."""

import json

import pytest

from tests.helpers import CHROMA, SQUAD
from transforms.evaluation import datasets


def test_read_chroma_fixture():
    documents, questions = datasets.read_chroma(CHROMA)
    assert [d.doc_id for d in documents] == ['cooking', 'space']
    assert len(questions) == 5
    texts = {d.doc_id: d.text for d in documents}
    q = questions[1]
    assert q.doc_id == 'cooking' and len(q.references) == 2
    assert texts['cooking'][slice(*q.references[0])] == 'dried pasta from Gragnano is extruded through bronze dies'


def test_read_chroma_rejects_unknown_corpus_and_bad_offsets(tmp_path):
    (tmp_path / 'a.md').write_text('hello world')
    header = 'question,references,corpus_id\n'
    ref = json.dumps([{'content': 'hello', 'start_index': 0, 'end_index': 5}]).replace('"', '""')
    (tmp_path / 'questions_df.csv').write_text(header + f'q?,"{ref}",b\n')
    with pytest.raises(ValueError, match="unknown corpus_id 'b'"):
        datasets.read_chroma(tmp_path)
    bad = json.dumps([{'content': 'world', 'start_index': 0, 'end_index': 5}]).replace('"', '""')
    (tmp_path / 'questions_df.csv').write_text(header + f'q?,"{bad}",a\n')
    with pytest.raises(ValueError, match='does not match'):
        datasets.read_chroma(tmp_path)
    with pytest.raises(ValueError, match='not a Chroma evaluation folder'):
        datasets.read_chroma(tmp_path / 'missing')


def test_read_squad_fixture():
    documents, questions = datasets.read_squad(SQUAD)
    assert [d.doc_id for d in documents] == ['Normans', 'Oxygen']
    normans = documents[0].text
    assert normans.count('\n\n') == 1
    assert len(questions) == 4
    # A question's reference is exactly its paragraph.
    assert normans[slice(*questions[0].references[0])].startswith('The Normans were')
    assert normans[slice(*questions[1].references[0])].endswith('the Near East.')
    assert questions[1].references == questions[2].references
    assert questions[3].doc_id == 'Oxygen'


def test_read_squad_errors(tmp_path):
    with pytest.raises(ValueError, match='not found'):
        datasets.read_squad(tmp_path / 'none.json')
    (tmp_path / 'bad.json').write_text('{"data": [{"paragraphs": []}]}')
    with pytest.raises(ValueError, match='not SQuAD format'):
        datasets.read_squad(tmp_path / 'bad.json')


def test_sample_questions_is_deterministic_ordered_and_nested():
    _, questions = datasets.read_chroma(CHROMA)
    three = datasets.sample_questions(questions, 3)
    assert three == datasets.sample_questions(questions, 3)
    assert [questions.index(q) for q in three] == sorted(questions.index(q) for q in three)
    assert set(datasets.sample_questions(questions, 2)) <= set(three)
    assert datasets.sample_questions(questions, None) == questions
    assert datasets.sample_questions(questions, 99) == questions
    with pytest.raises(ValueError):
        datasets.sample_questions(questions, 0)
