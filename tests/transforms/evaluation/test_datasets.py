"""The evaluation's dataset readers (Chroma, SQuAD) on the fixtures, and the question sample."""

import json

import pytest

from tests.helpers import CHROMA, SQUAD
from transforms.evaluation import datasets


def test_read_chroma_fixture():
    documents, questions, rejected = datasets.read_chroma(CHROMA)
    assert rejected == []
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
    documents, questions, rejected = datasets.read_squad(SQUAD)
    assert rejected == []
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
    _, questions, _ = datasets.read_chroma(CHROMA)
    three = datasets.sample_questions(questions, 3)
    assert three == datasets.sample_questions(questions, 3)
    assert [questions.index(q) for q in three] == sorted(questions.index(q) for q in three)
    assert set(datasets.sample_questions(questions, 2)) <= set(three)
    assert datasets.sample_questions(questions, None) == questions
    assert datasets.sample_questions(questions, 99) == questions
    with pytest.raises(ValueError):
        datasets.sample_questions(questions, 0)


def chroma_folder(tmp_path, rows, text='hello world, a corpus of words', header='question,references,corpus_id'):
    (tmp_path / 'a.md').write_text(text)
    lines = [header]
    for question, spans in rows:
        refs = json.dumps([{'start_index': s, 'end_index': e} for s, e in spans]).replace('"', '""')
        lines.append(f'{question},"{refs}",a')
    (tmp_path / 'questions_df.csv').write_text('\n'.join(lines) + '\n')
    return tmp_path


def test_chroma_rows_with_spans_that_cannot_be_scored_are_rejected_with_a_reason(tmp_path):
    root = chroma_folder(tmp_path, [('good?', [(0, 5)]), ('negative?', [(-3, 5)]), ('reversed?', [(9, 2)]),
                                    ('empty?', [(4, 4)]), ('past?', [(0, 999)]), ('', [(0, 5)]),
                                    ('none?', [])])
    _, questions, rejected = datasets.read_chroma(root)
    assert [q.question for q in questions] == ['good?']
    csv_path = root / 'questions_df.csv'
    assert [(r.where, r.reason) for r in rejected] == [
        (f'{csv_path}:3', 'reference [-3, 5) is negative'),
        (f'{csv_path}:4', 'reference [9, 2) is reversed'),
        (f'{csv_path}:5', 'reference [4, 4) is empty'),
        (f'{csv_path}:6', 'reference [0, 999) ends past the document (30 characters)'),
        (f'{csv_path}:7', 'the question is empty'),
        (f'{csv_path}:8', 'no reference'),
    ]


@pytest.mark.parametrize('header,message', [
    ('query,references,corpus_id', "no 'question' column"),
    ('question,corpus_id,refs', "no 'references' column"),
])
def test_chroma_csv_without_a_column_is_one_line_naming_the_file(tmp_path, header, message):
    root = chroma_folder(tmp_path, [('q?', [(0, 5)])], header=header)
    with pytest.raises(ValueError) as e:
        datasets.read_chroma(root)
    assert str(root / 'questions_df.csv') in str(e.value) and message in str(e.value)


@pytest.mark.parametrize('name', ['a.md', 'questions_df.csv'])
def test_chroma_file_that_is_not_utf8_is_named(tmp_path, name):
    root = chroma_folder(tmp_path, [('q?', [(0, 5)])])
    (root / name).write_bytes((root / name).read_bytes() + b'\xff\xfe')
    with pytest.raises(ValueError, match=f'{root / name}: not UTF-8'):
        datasets.read_chroma(root)


def test_chroma_references_that_are_not_objects_are_a_bad_row(tmp_path):
    root = chroma_folder(tmp_path, [])
    (root / 'questions_df.csv').write_text('question,references,corpus_id\nq?,"[1, 2]",a\n')
    with pytest.raises(ValueError, match=r'questions_df.csv:2: bad references: not a JSON list of objects'):
        datasets.read_chroma(root)


def squad_file(tmp_path, paragraphs):
    path = tmp_path / 'squad.json'
    path.write_text(json.dumps({'data': [{'title': 'T', 'paragraphs': paragraphs}]}))
    return path


def test_squad_qas_without_a_question_are_rejected_with_a_reason(tmp_path):
    path = squad_file(tmp_path, [{'context': 'Normandy is in France.', 'qas': [
        {'id': 'a', 'question': 'Where is Normandy?'}, {'id': 'b'}, {'id': 'c', 'question': '  '}, 'qa?']},
        {'context': '', 'qas': [{'question': 'Of nothing?'}]}])
    _, questions, rejected = datasets.read_squad(path)
    assert [q.question for q in questions] == ['Where is Normandy?']
    assert [(r.where, r.reason) for r in rejected] == [
        (f'{path}: article 0 paragraph 0 question 1', 'the question is empty'),
        (f'{path}: article 0 paragraph 0 question 2', 'the question is empty'),
        (f'{path}: article 0 paragraph 0 question 3', 'the question is empty'),
        (f'{path}: article 0 paragraph 1 question 0', 'reference [24, 24) is empty'),
    ]


@pytest.mark.parametrize('paragraphs,message', [
    ([{'context': 42, 'qas': []}], 'article 0 paragraph 0: context is int, not a string'),
    ([{'context': 'x', 'qas': None}], 'article 0 paragraph 0: qas is null, not a list'),
    ([{'context': 'x', 'qas': {'question': 'q'}}], 'article 0 paragraph 0: qas is {"question": "q"}, not a list'),
    ('not a list', 'article 0 is not SQuAD format: paragraphs is not a list of objects'),
])
def test_squad_of_the_wrong_shape_is_one_line_naming_file_and_article(tmp_path, paragraphs, message):
    path = squad_file(tmp_path, paragraphs)
    with pytest.raises(ValueError) as e:
        datasets.read_squad(path)
    assert str(e.value) == f'{path}: {message}'


def test_squad_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / 'squad.json'
    path.write_bytes(b'{"data": []}\xff')
    with pytest.raises(ValueError, match=f'{path}: not UTF-8'):
        datasets.read_squad(path)
