"""Queries over a small built index: JSON output, dedup of cross-document duplicates, errors.

Also the `ragsieve query` command over broken indexes and bad flags: one clear
line, exit 2.
"""

import functools
import json
import logging
import shutil

import pytest

from pipelines import cli, query
from pipelines.build_index import job as build_index
from pipelines.common import exits
from transforms.query.retriever import Retriever

PASTA_NEW = 'Cook the pasta in plenty of salted boiling water until it is al dente.'
PASTA_OLD = 'Cook the pasta in plenty of boiling salted water until al dente.'
RECORDS = [
    {'id': 'pasta-new', 'text': PASTA_NEW, 'metadata': {'updated_at': '2024-05-01T10:00:00Z'}},
    {'id': 'pasta-old', 'text': PASTA_OLD, 'metadata': {'date': '2020-01-01'}},
    {'id': 'sauce', 'text': 'Toss the drained pasta with the tomato sauce and a spoon of its cooking water.'},
    {'id': 'orbit', 'text': 'A satellite in low Earth orbit circles the planet in about ninety minutes.'},
    {'id': 'jupiter', 'text': 'Jupiter is the largest planet of the Solar System.'},
]
PASTA_QUESTION = 'How long do I cook pasta?'


@pytest.fixture(scope='module')
def index_dir(tmp_path_factory):
    """An index of five one-chunk documents, two of them near-duplicates; built once."""
    root = tmp_path_factory.mktemp('query')
    (root / 'corpus').mkdir()
    (root / 'corpus' / 'records.jsonl').write_text('\n'.join(json.dumps(r) for r in RECORDS) + '\n')
    out = root / 'index'
    build_index.run(['--input', str(root / 'corpus'), '--output', str(out),
                     '--filter', 'none', '--chunk_size', '64'])
    return out


@pytest.fixture(scope='module')
def retriever(index_dir, embedding_model):
    return Retriever(str(index_dir), model=embedding_model)


def test_build_writes_bm25_next_to_the_index(index_dir):
    names = sorted(p.name for p in (index_dir / 'bm25').iterdir())
    assert 'params.index.json' in names and 'vocab.index.json' in names and 'tokenizer.json' in names
    assert json.loads((index_dir / 'bm25' / 'params.index.json').read_text())['num_docs'] == len(RECORDS)


def test_json_output_is_one_list_with_duplicates_per_result(index_dir, embedding_model, capsys, caplog):
    with caplog.at_level(logging.INFO, logger='ragsieve.query'):
        query.run(['--index', str(index_dir), '--json', '--k', '3', PASTA_QUESTION], model=embedding_model)
    results = json.loads(capsys.readouterr().out)
    assert isinstance(results, list) and 1 <= len(results) <= 3
    first = results[0]
    assert set(first) == {'chunk_id', 'doc_id', 'char_start', 'char_end', 'text', 'score', 'cosine',
                          'ranks', 'duplicates'}
    assert set(first['ranks']) == {'dense', 'bm25', 'salience', 'recency'}
    # The two pasta chunks are near-duplicates from different documents: one is returned,
    # the other is reported as its duplicate.
    assert first['doc_id'] in {'pasta-new', 'pasta-old'}
    other = ({'pasta-new', 'pasta-old'} - {first['doc_id']}).pop()
    assert [d['doc_id'] for d in first['duplicates']] == [other]
    assert first['duplicates'][0]['cosine'] >= 0.9
    assert other not in [r['doc_id'] for r in results]
    assert [r['score'] for r in results] == sorted((r['score'] for r in results), reverse=True)
    # Only the pasta documents carry a timestamp: the others get no recency rank (neutral).
    assert all(r['ranks']['recency'] is None for r in results if r['doc_id'] not in {'pasta-new', 'pasta-old'})
    assert 'Post-ranking deduplication: ' in caplog.text


def test_retriever_answers_many_queries_deterministically(retriever, index_dir):
    result = retriever.search('What orbits the Earth every ninety minutes?', k=2)
    assert result.hits[0].doc_id == 'orbit' and result.hits[0].ranks['dense'] == 1
    assert result.hits[0].text == RECORDS[3]['text']
    assert (result.hits[0].char_start, result.hits[0].char_end) == (0, len(RECORDS[3]['text']))
    assert set(result.seconds) == {'embed', 'search', 'fusion', 'dedup'}
    again = retriever.search(PASTA_QUESTION, k=5)
    assert again.hits == retriever.search(PASTA_QUESTION, k=5).hits
    assert len(retriever.search(PASTA_QUESTION, k=1).hits) == 1


def test_the_ranking_before_issue_40_is_reachable_by_flags(index_dir, embedding_model, capsys):
    # RRF with salience and recency ranked, and klarRAG's floor on every candidate: no junk below 0.25.
    query.run(['--index', str(index_dir), '--json', '--k', '5', '--fusion', 'rrf', '--prior', 'fused',
               '--below_floor', 'drop', '--floor_gate', '-1', '--floor_exempt_bm25', '0', PASTA_QUESTION], model=embedding_model)
    results = json.loads(capsys.readouterr().out)
    assert results and all(r['cosine'] >= 0.25 for r in results)
    assert {'orbit', 'jupiter'}.isdisjoint(r['doc_id'] for r in results)


def test_recency_weight_decides_between_equal_duplicates(index_dir, embedding_model):
    from transforms.query.retrieval import RetrievalConfig

    only_recency = RetrievalConfig(fusion='rrf', prior='fused', weight_dense=0, weight_bm25=0, weight_salience=0,
                                   weight_recency=1)
    hits = Retriever(str(index_dir), only_recency, model=embedding_model).search(PASTA_QUESTION).hits
    assert hits[0].doc_id == 'pasta-new' and hits[0].ranks['recency'] == 1


def test_text_output_verbose_lists_skipped(index_dir, embedding_model, capsys):
    query.run(['--index', str(index_dir), '--verbose', PASTA_QUESTION], model=embedding_model)
    out = capsys.readouterr().out
    assert out.startswith('1. pasta-') and 'skipped duplicate pasta-' in out


def error(argv, capsys):
    assert cli.main(['query', *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith('ragsieve query: error: ')
    return err


def test_missing_or_foreign_index_is_a_clear_error(tmp_path, capsys):
    assert 'is not a directory' in error(['--index', str(tmp_path / 'nope'), 'question'], capsys)
    assert 'no manifest.json' in error(['--index', str(tmp_path), 'question'], capsys)


def test_incomplete_index_is_a_clear_error(index_dir, tmp_path, capsys):
    broken = tmp_path / 'broken'
    shutil.copytree(index_dir, broken)
    (broken / 'index' / 'index.faiss').unlink()
    assert 'incomplete: missing index/index.faiss' in error(['--index', str(broken), 'q'], capsys)
    (broken / 'index' / 'index.faiss').write_bytes((index_dir / 'index' / 'index.faiss').read_bytes())
    shutil.rmtree(broken / 'bm25')
    assert 'missing bm25/' in error(['--index', str(broken), 'q'], capsys)


def test_other_model_or_empty_question_is_a_clear_error(index_dir, capsys):
    err = error(['--index', str(index_dir), '--embedding_model', 'some/other-model', 'q'], capsys)
    assert "built with embedding model 'all-MiniLM-L6-v2', not 'some/other-model'" in err
    assert 'question is empty' in error(['--index', str(index_dir), '   '], capsys)
    assert '--k must be >= 1' in error(['--index', str(index_dir), '--k', '0', 'q'], capsys)


def test_other_model_dimension_is_a_clear_error(index_dir, tmp_path, embedding_model, retriever):
    other = tmp_path / 'other'
    shutil.copytree(index_dir, other)
    manifest = json.loads((other / 'manifest.json').read_text())
    manifest['model']['dim'] = 768
    (other / 'manifest.json').write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match='768-dimensional embeddings'):
        Retriever(str(other), model=embedding_model)
    with pytest.raises(ValueError, match='question is empty'):
        retriever.search('')


@pytest.mark.parametrize('index_type, search_flags', [
    ('HNSW8', ['--ef_search', '32']),
    ('IVF2,Flat', ['--nprobe', '2']),
])
def test_other_index_types_answer_like_flat(index_dir, embedding_model, tmp_path, capsys, index_type, search_flags):
    out = tmp_path / 'index'
    build_index.run(['--input', str(index_dir.parent / 'corpus'), '--output', str(out), '--filter', 'none',
                     '--chunk_size', '64', '--num_shards', '2', '--index_type', index_type,
                     '--index_train_size', '4'])
    capsys.readouterr()  # the build's summary
    assert json.loads((out / 'manifest.json').read_text())['config']['index']['index_type'] == index_type
    query.run(['--index', str(index_dir), '--json', '--k', '3', PASTA_QUESTION], model=embedding_model)
    flat = json.loads(capsys.readouterr().out)
    query.run(['--index', str(out), '--json', '--k', '3', *search_flags, PASTA_QUESTION], model=embedding_model)
    # Five vectors: searching every list / the whole graph is exact.
    assert json.loads(capsys.readouterr().out) == flat


def test_search_flag_of_another_index_type_is_refused(index_dir, embedding_model):
    with pytest.raises(ValueError, match='--nprobe does not apply'):
        query.run(['--index', str(index_dir), '--nprobe', '4', PASTA_QUESTION], model=embedding_model)


def test_cli_reports_a_corrupt_manifest_with_exit_2(index_dir, tmp_path, capsys):
    broken = tmp_path / 'broken'
    shutil.copytree(index_dir, broken)
    (broken / 'manifest.json').write_text('{"counts": ')
    assert cli.main(['query', '--index', str(broken), 'question']) == 2
    err = capsys.readouterr().err
    assert err.startswith('ragsieve query: error: ') and str(broken / 'manifest.json') in err
    assert err.count('\n') == 1


@pytest.mark.parametrize('manifest,problem', [
    ({'counts': 5}, 'counts is 5, not an object'),
    ([1, 2], 'it is [1, 2], not an object'),
    ({'counts': {'chunks': '5'}}, 'counts.chunks is "5", not an integer'),
    ({'counts': {'chunks': 5}, 'model': {'dim': 384}}, 'it has no config'),
])
def test_cli_reports_a_manifest_of_the_wrong_shape_with_exit_2(index_dir, tmp_path, capsys, manifest, problem):
    broken = tmp_path / 'broken'
    shutil.copytree(index_dir, broken)
    (broken / 'manifest.json').write_text(json.dumps(manifest))
    assert cli.main(['query', '--index', str(broken), 'question']) == exits.FAILED
    err = capsys.readouterr().err
    assert err == f'ragsieve query: error: {broken / "manifest.json"} is corrupt: {problem}\n'


@pytest.mark.parametrize('content', [b'../../etc\n', b'\xff\xfe\n', b'', b'a b\n'])
def test_bad_latest_is_reported_as_a_corrupt_latest(index_dir, tmp_path, capsys, content):
    root = tmp_path / 'root'
    shutil.copytree(index_dir, root / 'runs' / 'r1')
    (root / 'LATEST').write_bytes(content)
    assert cli.main(['query', '--index', str(root), 'question']) == 2
    err = capsys.readouterr().err
    assert f'{root / "LATEST"} is corrupt' in err and '--run_id' not in err.split('(')[0]


@pytest.mark.parametrize('flags,message', [
    (['--weight_dense', 'nan'], 'weight_dense must be a finite number'),
    (['--weight_recency', 'inf'], 'weight_recency must be a finite number'),
    (['--min_relevance', 'nan'], 'min_relevance'),
    (['--device', 'bogus'], 'not a torch device'),
])
def test_bad_query_flags_are_refused(index_dir, capsys, flags, message):
    assert cli.main(['query', '--index', str(index_dir), *flags, 'question']) == 2
    assert message in capsys.readouterr().err


def test_a_question_of_bytes_that_are_not_utf8_is_one_line(index_dir):
    import os
    import subprocess
    import sys

    from tests.helpers import REPO

    done = subprocess.run([sys.executable, '-m', 'pipelines.query', '--index', os.fsencode(index_dir), b'caf\xff'],
                          capture_output=True, cwd=REPO, env={**os.environ, 'PYTHONPATH': str(REPO)})
    err = done.stderr.decode('utf-8', 'backslashreplace')
    assert done.returncode == 2, err
    # (Beam may log a warning of its own on import first.)
    assert err.splitlines()[-1].startswith('ragsieve query: error: the question is not valid Unicode text')
    assert 'Traceback' not in err


# --- an index on an object store (MinIO, fake-gcs-server) ---------------------------------------------------


def one_line(argv, capsys) -> str:
    """The one line `ragsieve query` ends with, exit 2: no traceback, no dump of Beam's wrapped errors."""
    err = error(argv, capsys).strip()
    assert '\n' not in err and 'BeamIOError' not in err and 'Traceback' not in err, err
    return err.removeprefix('ragsieve query: error: ')


def remote_root(url, index_dir, latest='r1'):
    from tests.helpers import upload
    from transforms import storage

    upload(index_dir, f'{url}/runs/r1')
    if latest:
        storage.write_bytes(f'{url}/LATEST', f'{latest}\n'.encode())
    return url


@pytest.mark.parametrize('index', ['s3://', 'gs://', 's3:///index'])
def test_an_index_url_without_a_bucket_says_so(capsys, index):
    assert one_line(['--index', index, 'q'], capsys) == (
        f"--index '{index}' names no bucket: give {index[:2]}://BUCKET/PREFIX")


def test_an_index_in_a_missing_bucket_says_so(object_store, capsys):
    index = f'{object_store.split("://")[0]}://ragsieve-no-such-bucket/index'
    assert one_line(['--index', index, 'q'], capsys) == (
        f"--index '{index}': bucket 'ragsieve-no-such-bucket' does not exist")


def test_a_prefix_holding_runs_but_no_latest_is_refused_without_downloading_them(object_store, index_dir, capsys):
    root = remote_root(object_store, index_dir, latest=None)
    assert one_line(['--index', root, 'q'], capsys) == (
        f"--index '{root}' is not a ragsieve index: it holds no manifest.json, and no LATEST naming a run")


def test_an_index_the_credentials_may_not_read_says_so(proxied_store, deny_bucket, index_dir, capsys):
    from tests.helpers import BUCKET

    url, _ = proxied_store
    root = remote_root(url, index_dir)
    deny_bucket()
    said = one_line(['--index', root, 'q'], capsys)
    assert said.startswith(f"--index '{root}': access to bucket '{BUCKET}' is denied ("), said


def test_s3_credentials_the_store_refuses_say_so(minio, index_dir, monkeypatch, capsys):
    from tests.helpers import BUCKET
    from transforms import storage

    for key, value in minio.env.items():
        monkeypatch.setenv(key, value)
    storage.configure()
    root = remote_root(f's3://{BUCKET}/query-bad-secret', index_dir)
    monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'not-the-secret')
    storage.configure()
    said = one_line(['--index', root, 'q'], capsys)
    assert said.startswith(f"--index '{root}': the store refused the credentials (SignatureDoesNotMatch: ")
    assert 'not-the-secret' not in said


def test_a_run_pruned_while_query_downloads_it_is_read_again_from_latest(object_store, index_dir, embedding_model,
                                                                        monkeypatch, capsys):
    from pipelines.common.failures import run_and_report
    from tests.helpers import prune_while_read, upload

    root = remote_root(object_store, index_dir)
    upload(index_dir, f'{root}/runs/r2')
    prune_while_read(monkeypatch, root)  # once the query downloaded r1's first file
    argv = ['--index', root, '--json', PASTA_QUESTION]
    assert run_and_report('query', functools.partial(query.run, model=embedding_model), argv) == 0
    assert json.loads(capsys.readouterr().out)[0]['doc_id'] == 'pasta-new'
