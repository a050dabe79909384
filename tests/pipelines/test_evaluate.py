"""The evaluation job: dataset readers, config, filtered top-k, and end-to-end runs."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from pipelines import cli, eval_grid, eval_report, evaluate
from transforms import datasets, dedup, retrieval

FIXTURES = Path(__file__).resolve().parents[1] / 'fixtures'
CHROMA = FIXTURES / 'chroma'
SQUAD = FIXTURES / 'squad_mini.json'


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


def test_config_validation():
    kwargs = dict(dataset='chroma', data=str(CHROMA), output='out',
                  chunkers=tuple(eval_grid.parse_chunkers('fixed:100')),
                  filters=tuple(eval_grid.parse_filter_grid('none')))
    evaluate.EvaluateConfig(**kwargs)
    for change, message in [({'k': 0}, 'k must be'), ({'max_questions': 0}, 'max_questions'),
                            ({'variants': ('stemmed',)}, 'variants'), ({'dataset': 'x'}, 'dataset'),
                            ({'chunkers': ()}, 'chunker'), ({'batch_size': 0}, 'batch_size')]:
        with pytest.raises(ValueError, match=message):
            evaluate.EvaluateConfig(**{**kwargs, **change})


def test_exact_top_k_is_exact_among_kept_rows():
    vectors = np.eye(4, dtype=np.float32)
    query = np.array([[0.9, 0.5, 0.1, 0.0]], dtype=np.float32)
    assert retrieval.exact_top_k(vectors, np.arange(4), query, 2) == [[0, 1]]
    # Row 0 was filtered out: the next best kept rows take its place.
    assert retrieval.exact_top_k(vectors, np.array([1, 2, 3]), query, 2) == [[1, 2]]
    assert retrieval.exact_top_k(vectors, np.array([3]), query, 5) == [[3]]
    assert retrieval.exact_top_k(vectors, np.array([], dtype=int), query, 5) == [[]]


def test_end_to_end_chroma(tmp_path, embedding_model):
    out = tmp_path / 'out'
    argv = ['--dataset', 'chroma', '--data', str(CHROMA), '--output', str(out),
            '--chunkers', 'recursive:40:10,fixed:32:0', '--filters', 'none,exact,similarity@0.8',
            '--max_questions', '4', '--no_progress']
    config = evaluate.config_from_args(evaluate.parse_args(argv))
    summary = evaluate.evaluate(config, model=embedding_model)
    assert summary['questions'] == 4
    with (out / 'results.csv').open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == eval_report.CSV_COLUMNS
    # 2 chunkers x 3 filters x 2 variants.
    assert len(rows) == 12
    assert {(r['filter'], r['method']) for r in rows} == {
        ('none', 'No filtering'), ('exact', 'ExactNorm'), ('similarity', 'Similarity')}
    baseline = [r for r in rows if r['method'] == 'No filtering']
    assert all(float(r['reduction']) == 0.0 and r['kept'] == r['chunks'] for r in baseline)
    for r in rows:
        for column in ('precision', 'recall', 'iou', 'oracle', 'char_precision', 'char_recall', 'char_iou'):
            assert 0.0 <= float(r[column]) <= 1.0
    # The unfiltered index holds every reference token, so the oracle reaches all of them.
    assert all(float(r['oracle']) == pytest.approx(1.0) for r in baseline)
    for label in ('recursive_40_10', 'fixed_32_0'):
        table = (out / f'table_{label}.md').read_text()
        assert '| Method | Threshold | Reduction (%) | Precision | Recall | IoU | Oracle |' in table
        assert '| No filtering | - | 0.000 |' in table
        assert (out / f'plot_{label}.png').read_bytes()[:4] == b'\x89PNG'
    assert set(json.loads((out / 'summary.json').read_text())['seconds']['chunkers']) == {
        'recursive_40_10', 'fixed_32_0'}


def test_a_second_run_reuses_the_cached_features(tmp_path, embedding_model):
    argv = ['--dataset', 'chroma', '--data', str(CHROMA), '--chunkers', 'recursive:40:10,cluster_semantic:64',
            '--filters', 'none,ner_exact', '--max_questions', '4', '--variants', 'raw', '--no_progress',
            '--cache', str(tmp_path / 'cache')]
    first = evaluate.evaluate(
        evaluate.config_from_args(evaluate.parse_args([*argv, '--output', str(tmp_path / 'a')])), model=embedding_model)
    assert first['cache']['loaded'] == {'embedding': 0, 'entities': 0}
    assert first['cache']['computed']['embedding'] > 0 and first['cache']['computed']['entities'] > 0
    second = evaluate.evaluate(
        evaluate.config_from_args(evaluate.parse_args([*argv, '--output', str(tmp_path / 'b')])), model=embedding_model)
    # Chunks, semantic pieces, questions and entities all come from the cache.
    assert second['cache']['computed'] == {'embedding': 0, 'entities': 0}
    assert second['cache']['loaded'] == {f: n for f, n in first['cache']['computed'].items()}
    assert (tmp_path / 'a' / 'results.csv').read_bytes() == (tmp_path / 'b' / 'results.csv').read_bytes()
    # A run with another grid and no room beyond its own entries drops the entries it did not use.
    other = [*argv[:5], 'fixed:100:0', *argv[6:], '--cache_max_bytes', '0', '--output', str(tmp_path / 'c')]
    third = evaluate.evaluate(evaluate.config_from_args(evaluate.parse_args(other)), model=embedding_model)
    fourth = evaluate.evaluate(evaluate.config_from_args(evaluate.parse_args(other)), model=embedding_model)
    assert fourth['cache']['computed'] == {'embedding': 0, 'entities': 0}
    assert fourth['cache']['loaded']['embedding'] < third['cache']['loaded']['embedding']


def test_default_cache_is_the_users_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    config = evaluate.config_from_args(evaluate.parse_args(['--output', str(tmp_path / 'out')]))
    assert config.cache == str(tmp_path / 'ragsieve' / 'evaluate')
    config = evaluate.config_from_args(evaluate.parse_args(['--output', str(tmp_path), '--cache', 'none']))
    assert config.cache is None


def test_end_to_end_squad_through_the_cli(tmp_path):
    out = tmp_path / 'out'
    code = cli.main(['evaluate', '--dataset', 'squad', '--data', str(SQUAD), '--output', str(out),
                     '--chunkers', 'fixed:24:0,cluster_semantic:64', '--filters', 'none,random@0.5',
                     '--variants', 'raw', '--k', '2', '--no_progress'])
    assert code == 0
    with (out / 'results.csv').open() as f:
        rows = list(csv.DictReader(f))
    assert [(r['chunker'], r['method']) for r in rows] == [
        ('fixed_24_0', 'No filtering'), ('fixed_24_0', 'random'),
        ('cluster_semantic_64_0', 'No filtering'), ('cluster_semantic_64_0', 'random')]
    assert {r['variant'] for r in rows} == {'raw'}
    assert float(rows[0]['recall']) > 0.5


def test_hybrid_retrieval_through_the_query_ranking(tmp_path, embedding_model):
    out = tmp_path / 'out'
    argv = ['--dataset', 'chroma', '--data', str(CHROMA), '--output', str(out), '--chunkers', 'recursive:40:10',
            '--filters', 'none,exact', '--max_questions', '4', '--variants', 'raw', '--no_progress',
            '--retrieval', 'hybrid']
    summary = evaluate.evaluate(evaluate.config_from_args(evaluate.parse_args(argv)), model=embedding_model)
    assert summary['retrieval'] == 'hybrid'
    with (out / 'results.csv').open() as f:
        rows = list(csv.DictReader(f))
    assert [(r['retrieval'], r['method']) for r in rows] == [('hybrid', 'No filtering'), ('hybrid', 'ExactNorm')]
    assert all(0.0 < float(r['recall']) <= 1.0 for r in rows)


def test_hybrid_top_k_dedups_and_respects_kept_rows(embedding_model):
    from transforms import retrieval
    from transforms.datasets import Question

    texts = ['Saturn has rings of ice and rock.', 'Saturn has rings of ice and rock!',
             'Pasta is cooked in salted water.', 'Jupiter is the largest planet.']
    vectors = embedding_model.encode(texts, normalize_embeddings=True)
    chunks = [_chunk('d', i, t, v) for i, (t, v) in enumerate(zip(texts, vectors))]
    question = Question('What are the rings of Saturn made of?', 'd', ((0, 10),))
    query = embedding_model.encode([question.question], normalize_embeddings=True)
    config = retrieval.RetrievalConfig(min_relevance=-1.0)
    [hits] = retrieval.hybrid_top_k(chunks, np.arange(4), vectors, [question.question], query, 3, config)
    assert hits[0] in (0, 1) and not {0, 1} <= set(hits)  # the near-copy is skipped
    assert len(hits) == 3
    [hits] = retrieval.hybrid_top_k(chunks[2:], np.array([2, 3]), vectors, [question.question], query, 3, config)
    assert set(hits) <= {2, 3}


def test_cli_errors(tmp_path, capsys):
    assert cli.main(['evaluate', '--output', str(tmp_path), '--chunkers', 'fixed:400:400']) == 2
    assert 'ragsieve evaluate: error: chunk_overlap' in capsys.readouterr().err
    assert cli.main(['evaluate', '--dataset', 'squad', '--output', str(tmp_path)]) == 2
    assert '--data is required' in capsys.readouterr().err


def _chunk(doc_id, index, text, vector, entities=()):
    from transforms.minhash import MinHashConfig, signatures
    from transforms.text import content_hash
    from transforms.types import Chunk

    return Chunk(
        chunk_id=f'{doc_id}#{index}', doc_id=doc_id, chunk_index=index, text=text,
        char_start=0, char_end=len(text), n_tokens=len(text.split()),
        content_hash=content_hash(text), embedding=np.asarray(vector, dtype=np.float32),
        entities=tuple(entities), minhash=signatures([text], MinHashConfig())[0])


def test_apply_filters_runs_the_grid_filters_in_order():
    same = 'the quick brown fox jumps over the lazy dog near the river bank'
    chunks = [
        _chunk('a', 0, same, [1, 0, 0], ['PERSON:ada']),
        _chunk('a', 1, same, [1, 0, 0], ['PERSON:ada']),
        _chunk('a', 2, 'orbital mechanics of satellites around the earth', [0, 1, 0]),
        _chunk('b', 0, 'pasta cooked in salted water until al dente', [0.6, 0.8, 0], ['PERSON:ada']),
    ]
    settings = dedup.FilterConfig()
    def run(spec):
        return {c.chunk_id for c in evaluate.apply_filters(chunks, dedup.parse_filters(spec), settings)}

    all_ids = {c.chunk_id for c in chunks}
    assert run('none') == all_ids
    assert run('exact') == all_ids - {'a#1'}
    assert run('minhash@0.8') == all_ids - {'a#1'}
    assert run('similarity@0.95') == all_ids - {'a#1'}
    # a#0, a#1 and b#0 share the entity set {ada}: the first in keep order stays.
    assert run('ner_exact') == {'a#0', 'a#2'}
    assert run('cascade') == all_ids - {'a#1'}
    assert run('random@1.0') == set()
