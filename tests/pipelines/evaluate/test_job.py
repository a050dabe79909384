"""The evaluation job: filters over the grid, and end-to-end runs on each kind of dataset."""

import csv
import json
import logging
import re
import shutil

import pytest

from pipelines import cli
from pipelines.evaluate import job as evaluate
from pipelines.evaluate import options
from tests.helpers import BEIR_MINI, CHROMA, SQUAD, _chunk
from transforms.dedup.config import FilterConfig, parse_filters
from transforms.evaluation import report as eval_report
from transforms.evaluation.scoring import apply_filters


def test_end_to_end_chroma(tmp_path, embedding_model, caplog):
    out = tmp_path / 'out'
    argv = ['--dataset', 'chroma', '--data', str(CHROMA), '--output', str(out),
            '--chunkers', 'recursive:40:10,fixed:32:0', '--filters', 'none,exact,similarity@0.8',
            '--max_questions', '4', '--progress', 'log']
    config = options.config_from_args(options.parse_args(argv))
    caplog.set_level(logging.INFO, logger='ragsieve.evaluate')
    summary = evaluate.evaluate(config, model=embedding_model)
    assert summary['questions'] == 4
    # --progress log: each step with its time, and the grid's cells scored.
    logged = [r.getMessage() for r in caplog.records if r.name == 'ragsieve.evaluate']
    assert any(re.fullmatch(r'read dataset \(.*\): \d+\.\d s', line) for line in logged), logged
    assert any(re.fullmatch(r'done in \d+s: grid 6/6 cells.*', line) for line in logged), logged
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


def test_covered_rows_and_hits_expanded_at_query_time(tmp_path, embedding_model):
    out = tmp_path / 'out'
    argv = ['--dataset', 'chroma', '--data', str(CHROMA), '--output', str(out), '--chunkers', 'fixed:40:20',
            '--filters', 'none,covered,covered:expand,covered:pool,cascade+covered', '--max_questions', '8',
            '--variants', 'raw', '--no_progress']
    evaluate.evaluate(options.config_from_args(options.parse_args(argv)), model=embedding_model)
    with (out / 'results.csv').open() as f:
        rows = {r['filter']: r for r in csv.DictReader(f)}
    assert [rows[n]['method'] for n in ('covered:expand', 'cascade+covered')] == [
        'Covered, hits expanded', 'Cascade (exact, minhash, intra_doc), then Covered']
    none, covered, expanded = rows['none'], rows['covered'], rows['covered:expand']
    # Windows of 40 tokens every 20: every other one is covered by its neighbours.
    assert int(covered['kept']) <= int(none['kept']) // 2 + 5
    assert covered['kept'] == expanded['kept'] and float(rows['cascade+covered']['reduction']) >= float(
        covered['reduction'])
    # The same hits, returned with the covered chunks they hold: more text, never less of the answer.
    for metric in ('recall', 'char_recall'):
        assert float(expanded[metric]) >= float(covered[metric])
    assert float(expanded['char_precision']) <= float(covered['char_precision'])
    assert float(covered['oracle']) == pytest.approx(float(expanded['oracle']))
    assert rows['covered:pool']['method'] == 'Covered, vectors pooled' and rows['covered:pool']['kept'] == covered['kept']


def test_a_second_run_reuses_the_cached_features(tmp_path, embedding_model):
    argv = ['--dataset', 'chroma', '--data', str(CHROMA), '--chunkers', 'recursive:40:10,cluster_semantic:64',
            '--filters', 'none,ner_exact', '--max_questions', '4', '--variants', 'raw', '--no_progress',
            '--cache', str(tmp_path / 'cache')]
    first = evaluate.evaluate(
        options.config_from_args(options.parse_args([*argv, '--output', str(tmp_path / 'a')])), model=embedding_model)
    assert first['cache']['loaded'] == {'embedding': 0, 'entities': 0}
    assert first['cache']['computed']['embedding'] > 0 and first['cache']['computed']['entities'] > 0
    second = evaluate.evaluate(
        options.config_from_args(options.parse_args([*argv, '--output', str(tmp_path / 'b')])), model=embedding_model)
    # Chunks, semantic pieces, questions and entities all come from the cache.
    assert second['cache']['computed'] == {'embedding': 0, 'entities': 0}
    assert second['cache']['loaded'] == {f: n for f, n in first['cache']['computed'].items()}
    assert (tmp_path / 'a' / 'results.csv').read_bytes() == (tmp_path / 'b' / 'results.csv').read_bytes()
    # A run with another grid and no room beyond its own entries drops the entries it did not use.
    other = [*argv[:5], 'fixed:100:0', *argv[6:], '--cache_max_bytes', '0', '--output', str(tmp_path / 'c')]
    third = evaluate.evaluate(options.config_from_args(options.parse_args(other)), model=embedding_model)
    fourth = evaluate.evaluate(options.config_from_args(options.parse_args(other)), model=embedding_model)
    assert fourth['cache']['computed'] == {'embedding': 0, 'entities': 0}
    assert fourth['cache']['loaded']['embedding'] < third['cache']['loaded']['embedding']


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
    summary = evaluate.evaluate(options.config_from_args(options.parse_args(argv)), model=embedding_model)
    assert summary['retrieval'] == 'hybrid'
    with (out / 'results.csv').open() as f:
        rows = list(csv.DictReader(f))
    assert [(r['retrieval'], r['method']) for r in rows] == [('hybrid', 'No filtering'), ('hybrid', 'ExactNorm')]
    assert all(0.0 < float(r['recall']) <= 1.0 for r in rows)


def test_apply_filters_runs_the_grid_filters_in_order():
    same = 'the quick brown fox jumps over the lazy dog near the river bank'
    chunks = [
        _chunk('a', 0, same, [1, 0, 0], ['PERSON:ada']),
        _chunk('a', 1, same, [1, 0, 0], ['PERSON:ada']),
        _chunk('a', 2, 'orbital mechanics of satellites around the earth', [0, 1, 0]),
        _chunk('b', 0, 'pasta cooked in salted water until al dente', [0.6, 0.8, 0], ['PERSON:ada']),
    ]
    settings = FilterConfig()
    def run(spec):
        return {c.chunk_id for c in apply_filters(chunks, parse_filters(spec), settings)}

    all_ids = {c.chunk_id for c in chunks}
    assert run('none') == all_ids
    assert run('exact') == all_ids - {'a#1'}
    assert run('minhash@0.8') == all_ids - {'a#1'}
    assert run('similarity@0.95') == all_ids - {'a#1'}
    # a#0, a#1 and b#0 share the entity set {ada}: the first in keep order stays.
    assert run('ner_exact') == {'a#0', 'a#2'}
    assert run('cascade') == all_ids - {'a#1'}
    assert run('random@1.0') == set()


def beir_rows(tmp_path, embedding_model, *flags):
    out = tmp_path / 'out'
    argv = ['--dataset', 'beir', '--data', str(BEIR_MINI), '--output', str(out), '--chunkers', 'recursive:64:0',
            '--filters', 'none,exact', '--no_progress', *flags]
    summary = evaluate.evaluate(options.config_from_args(options.parse_args(argv)), model=embedding_model)
    with (out / 'results.csv').open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == eval_report.IR_CSV_COLUMNS
    return summary, {(r['filter'], r['retrieval']): r for r in rows}, out


def test_end_to_end_beir_scores_dense_bm25_and_the_query_ranking(tmp_path, embedding_model):
    summary, rows, out = beir_rows(tmp_path, embedding_model)
    assert summary['questions'] == 4 and summary['documents'] == 8 and summary['rejected']['count'] == 0
    assert set(rows) == {(f, r) for f in ('none', 'exact') for r in ('dense', 'bm25', 'hybrid')}
    for r in rows.values():
        assert r['passages'] == '8' and r['chunks'] == '8' and r['kept'] == '8'
        for column in eval_report.IR_CSV_COLUMNS[9:]:
            assert 0.0 <= float(r[column]) <= 1.0
    dense, bm25, hybrid = (rows[('none', r)] for r in ('dense', 'bm25', 'hybrid'))
    # Eight passages: the dense top 10 holds them all; BM25 only those sharing a term.
    assert float(dense['recall@100']) == 1.0 and float(dense['coverage@10']) == 1.0
    # Each query's best passage is its answer, whatever the retrieval.
    assert float(dense['mrr@10']) == float(bm25['mrr@10']) == float(hybrid['mrr@10']) == 1.0
    # The fusion keeps the second hop BM25 found: every group of every query is found.
    assert float(hybrid['all_groups@10']) == 1.0
    table = (out / 'table_recursive_64_0.md').read_text()
    assert '| No filtering | hybrid | 8 | 0.0 |' in table and 'coverage@10' in table


def test_beir_hybrid_with_the_floor_on_every_candidate_loses_the_second_hop(tmp_path, embedding_model):
    # The ranking before issue 40 (RRF, floor 0.25), with the floor on every candidate (klarRAG's).
    _, rows, _ = beir_rows(tmp_path, embedding_model, '--fusion', 'rrf', '--prior', 'fused', '--below_floor', 'drop',
                           '--floor_gate', '-1', '--floor_exempt_bm25', '0', '--retrieval', 'hybrid')
    assert set(rows) == {('none', 'hybrid'), ('exact', 'hybrid')}
    # q1's founder passage (cosine < 0.25) is dropped: 1 of its 2 groups, so 3 of 4 queries have all.
    assert float(rows[('none', 'hybrid')]['all_groups@10']) == 0.75


def test_rejected_questions_are_counted_in_the_results(tmp_path, embedding_model):
    data = tmp_path / 'chroma'
    shutil.copytree(CHROMA, data)
    csv_path = data / 'questions_df.csv'
    csv_path.write_text(csv_path.read_text() + 'Reversed?,"[{""start_index"": 9, ""end_index"": 2}]",space\n')
    out = tmp_path / 'out'
    argv = ['--dataset', 'chroma', '--data', str(data), '--output', str(out), '--chunkers', 'fixed:64:0',
            '--filters', 'none', '--variants', 'raw', '--no_progress']
    summary = evaluate.evaluate(options.config_from_args(options.parse_args(argv)), model=embedding_model)
    assert summary['questions'] == 5
    assert summary['rejected'] == {'count': 1, 'reasons': {'reference … is reversed': 1}}
    assert (out / 'rejected.csv').read_text().splitlines() == [
        'where,reason', f'{csv_path}:7,"reference [9, 2) is reversed"']
    assert json.loads((out / 'summary.json').read_text())['rejected']['count'] == 1


@pytest.mark.parametrize('dataset,make,message', [
    ('squad', lambda d: (d / 'squad.json').write_text('{"data": [{"title": "T", "paragraphs": '
                                                      '[{"context": "x", "qas": null}]}]}'),
     'squad.json: article 0 paragraph 0: qas is null, not a list'),
    ('squad', lambda d: (d / 'squad.json').write_text('{"data": [{"title": "T", "paragraphs": [{"context": 7}]}]}'),
     'squad.json: article 0 paragraph 0: context is int, not a string'),
    ('chroma', lambda d: ((d / 'a.md').write_text('text'), (d / 'questions_df.csv').write_text('q,references,corpus_id\n')),
     "questions_df.csv: no 'question' column"),
    ('chroma', lambda d: ((d / 'a.md').write_bytes(b'caf\xe9'), (d / 'questions_df.csv').write_text(
        'question,references,corpus_id\n')), 'a.md: not UTF-8'),
    ('beir', lambda d: (d / 'corpus.jsonl').write_text('{"_id": "a", "text": "x"}\n{oops\n'), 'corpus.jsonl:2: not JSON'),
])
def test_bad_evaluation_input_is_one_line_naming_the_file(tmp_path, capsys, dataset, make, message):
    data = tmp_path / 'data'
    data.mkdir()
    make(data)
    path = data / 'squad.json' if dataset == 'squad' else data
    assert cli.main(['evaluate', '--dataset', dataset, '--data', str(path), '--output', str(tmp_path / 'out'),
                     '--no_progress']) == 2
    err = capsys.readouterr().err
    assert err.startswith('ragsieve evaluate: error: ') and message in err and err.count('\n') == 1, err
