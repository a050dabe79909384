"""The BEIR-layout reader and writer on a fixture made for it, and its one-line errors."""

import shutil

import pytest

from tests.helpers import BEIR_MINI
from transforms.evaluation import beir


def test_read_beir_fixture():
    found = beir.read_beir(BEIR_MINI)
    assert [d.doc_id for d in found.documents][:3] == ['zorbatron', 'helvig', 'orbit']
    # Title and text joined as BEIR joins them; a passage without a title is its text.
    assert found.documents[0].text == 'Zorbatron 9000 The Zorbatron 9000 is made by Helvig Industries.'
    assert found.documents[1].text.startswith('Anna Helvig')
    # q5's only judgement has score 0: it judges nothing relevant, so q5 is not scored.
    assert [q.query_id for q in found.queries] == ['q1', 'q2', 'q3', 'q4']
    q1, q2 = found.queries[:2]
    assert q1.relevant == {'zorbatron': 1, 'helvig': 1}
    assert q1.groups == (frozenset({'helvig'}), frozenset({'zorbatron'}))  # founder, maker
    assert q2.relevant == {'orbit': 2, 'geo': 1} and q2.groups == (frozenset({'orbit', 'geo'}),)
    assert found.rejected == []


def copy(tmp_path):
    shutil.copytree(BEIR_MINI, tmp_path / 'set')
    return tmp_path / 'set'


def test_rows_naming_what_the_files_lack_are_rejected_with_a_reason(tmp_path):
    root = copy(tmp_path)
    qrels = root / 'qrels' / 'test.tsv'
    qrels.write_text(qrels.read_text() + 'q1\tghost\t1\tmaker\nq9\torbit\t1\tx\n')
    (root / 'queries.jsonl').write_text((root / 'queries.jsonl').read_text() + '{"_id": "q6", "text": " "}\n')
    qrels.write_text(qrels.read_text() + 'q6\tpasta\t1\tpasta\n')
    found = beir.read_beir(root)
    assert [r for _, r in found.rejected] == [
        "passage 'ghost' is not in corpus.jsonl", "query 'q9' is not in queries.jsonl", "query 'q6' has no text"]
    assert found.rejected[0][0] == f'{qrels}:9'
    assert 'q6' not in [q.query_id for q in found.queries]


@pytest.mark.parametrize('name,content,message', [
    ('corpus.jsonl', b'{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', ':2: _id \'a\' repeats'),
    ('corpus.jsonl', b'{"_id": "a", "text": "x"}\nnot json\n', ':2: not JSON'),
    ('corpus.jsonl', b'["a"]\n', ':1: not a JSON object'),
    ('corpus.jsonl', b'{"_id": 7, "text": "x"}\n', ":1: '_id' must be a non-empty string"),
    ('corpus.jsonl', b'{"_id": "a", "text": 7}\n', ":1: 'text' must be a string"),
    ('corpus.jsonl', b'{"_id": "a", "title": "", "text": " "}\n', ':1: passage \'a\' has no title and no text'),
    ('corpus.jsonl', b'{"_id": "a", "text": "caf\xe9"}\n', ':1: not UTF-8'),
    ('queries.jsonl', b'{"_id": "q1", "text": "\xff"}\n', ':1: not UTF-8'),
    ('qrels/test.tsv', b'qid\tdoc\tscore\n', ':1: the header must start with query-id'),
    ('qrels/test.tsv', b'query-id\tcorpus-id\tscore\nq1\tpasta\thigh\n', ":2: score 'high' is not an integer"),
    ('qrels/test.tsv', b'query-id\tcorpus-id\tscore\nq1\n', ':2: a row is query-id, corpus-id, score'),
    ('qrels/test.tsv', b'query-id\tcorpus-id\tscore\nq1\tpasta\t\xff1\n', 'not UTF-8'),
])
def test_a_malformed_file_is_one_line_naming_file_and_line(tmp_path, name, content, message):
    root = copy(tmp_path)
    (root / name).write_bytes(content)
    with pytest.raises(ValueError) as e:
        beir.read_beir(root)
    assert str(root / name) in str(e.value) and message in str(e.value) and '\n' not in str(e.value)


def test_missing_files_and_split_are_named(tmp_path):
    with pytest.raises(ValueError, match='is not a BEIR folder'):
        beir.read_beir(tmp_path / 'none')
    with pytest.raises(ValueError, match=r'qrels/dev\.tsv not found'):
        beir.read_beir(BEIR_MINI, split='dev')


def test_write_beir_reads_back(tmp_path):
    beir.write_beir(tmp_path / 'w', [('a', 'T', 'alpha text'), ('b', '', 'beta text')], [('q', 'alpha?')],
                    [('q', 'a', 1, 'g1'), ('q', 'b', 2, None)], split='dev')
    found = beir.read_beir(tmp_path / 'w', 'dev')
    assert [d.text for d in found.documents] == ['T alpha text', 'beta text']
    assert found.queries == [beir.Query('q', 'alpha?', {'a': 1, 'b': 2}, (frozenset({'a'}),))]
    beir.write_beir(tmp_path / 'plain', [('a', '', 'x')], [('q', 'x?')], [('q', 'a', 1, None)])
    assert (tmp_path / 'plain' / 'qrels' / 'test.tsv').read_text() == 'query-id\tcorpus-id\tscore\nq\ta\t1\n'


@pytest.mark.parametrize('name', ['corpus.jsonl', 'queries.jsonl'])
def test_json_nested_too_deeply_is_one_line(tmp_path, name):
    root = copy(tmp_path)
    (root / name).write_bytes(b'{"_id": "a", "text": ' + b'[' * 60000 + b'\n')
    with pytest.raises(ValueError, match=rf'{name}:1: not JSON \(nested too deeply to read\)$'):
        beir.read_beir(root)


def qrels_rows(root, *rows):
    qrels = root / 'qrels' / 'test.tsv'
    qrels.write_text(qrels.read_text() + ''.join(rows))
    return qrels


def test_a_quote_in_a_qrels_field_is_a_character_and_swallows_no_row(tmp_path):
    root = copy(tmp_path)
    before = beir.read_beir(root)
    qrels = qrels_rows(root, 'q1\t"pasta\t1\n', 'q9\torbit\t1\n', 'q1\tgeo"\t1\n')
    found = beir.read_beir(root)
    assert found.rejected == [(f'{qrels}:9', 'passage \'"pasta\' is not in corpus.jsonl'),
                              (f'{qrels}:10', "query 'q9' is not in queries.jsonl"),
                              (f'{qrels}:11', 'passage \'geo"\' is not in corpus.jsonl')]
    assert found.queries == before.queries


def test_a_qrels_field_of_megabytes_is_a_rejected_row_with_a_short_reason(tmp_path):
    root = copy(tmp_path)
    qrels_rows(root, 'q1\t' + 'x' * 200_000 + '\t1\n', 'q2\torbit\t1\n')
    (where, reason), = beir.read_beir(root).rejected
    assert where.endswith(':9') and reason.startswith("passage 'xxx") and '(200,000 characters)' in reason
    assert len(reason) < 200


def test_a_score_out_of_range_is_a_rejected_row_and_scores_nothing(tmp_path):
    root = copy(tmp_path)
    qrels = qrels_rows(root, 'q1\torbit\t' + '9' * 401 + '\n', 'q2\tpasta\t1000001\n', 'q3\tpasta\t-5\n')
    found = beir.read_beir(root)
    assert [(w, r[:40]) for w, r in found.rejected] == [
        (f'{qrels}:9', "score '" + '9' * 33), (f'{qrels}:10', "score '1000001' is out of range (a grade")]
    assert 'orbit' not in found.queries[0].relevant
    from transforms.evaluation.ir_metrics import ndcg_at

    assert ndcg_at(['orbit'], found.queries[0].relevant, 10) == 0.0


@pytest.mark.parametrize('score', ['1_0', '1.0', '١', '0x1', ' ', '+'])
def test_a_score_python_would_read_but_beir_does_not_write_is_one_line(tmp_path, score):
    root = copy(tmp_path)
    qrels_rows(root, f'q1\torbit\t{score}\n')
    with pytest.raises(ValueError, match=r'test\.tsv:9: score .* is not an integer$'):
        beir.read_beir(root)


def test_a_bom_before_the_header_or_the_first_json_line_is_accepted(tmp_path):
    root = copy(tmp_path)
    for name in ('qrels/test.tsv', 'corpus.jsonl', 'queries.jsonl'):
        (root / name).write_bytes(b'\xef\xbb\xbf' + (root / name).read_bytes())
    found, plain = beir.read_beir(root), beir.read_beir(BEIR_MINI)
    assert found.queries == plain.queries and found.rejected == []
    assert [(d.doc_id, d.text) for d in found.documents] == [(d.doc_id, d.text) for d in plain.documents]
