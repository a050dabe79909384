"""Queries over broken indexes and bad flags: one clear line naming the file; readers keep their run."""

import json
import shutil

import pytest

from pipelines import build_index, cli, query, snapshots
from transforms import retrieval

RECORDS = [
    {'id': 'pasta', 'text': 'Cook the pasta in plenty of salted boiling water until it is al dente.'},
    {'id': 'orbit', 'text': 'A satellite in low Earth orbit circles the planet in about ninety minutes.'},
]


@pytest.fixture(scope='module')
def index_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp('guards')
    (root / 'corpus').mkdir()
    (root / 'corpus' / 'records.jsonl').write_text('\n'.join(json.dumps(r) for r in RECORDS) + '\n')
    build_index.run(['--input', str(root / 'corpus'), '--output', str(root / 'index'), '--filter', 'none',
                     '--chunk_size', '64'])
    return root / 'index'


def truncate(path):
    path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 3)])


def garble(path):
    path.write_bytes(b'\x00not what it should be{{')


@pytest.mark.parametrize('name,damage', [
    ('index/index.faiss', truncate), ('index/index.faiss', garble), ('manifest.json', garble),
    ('manifest.json', truncate), ('bm25/params.index.json', garble), ('bm25/data.csc.index.npy', truncate),
    ('bm25/tokenizer.json', garble), ('chunks/part-00000-of-00001.parquet', truncate),
    ('index/ids.parquet', garble),
])
def test_corrupt_index_file_is_one_line_naming_it(index_dir, tmp_path, embedding_model, name, damage):
    broken = tmp_path / 'broken'
    shutil.copytree(index_dir, broken)
    damage(broken / name)
    with pytest.raises(ValueError) as e:
        query.Retriever(str(broken), model=embedding_model)
    message = str(e.value)
    assert str(broken / name) in message and '\n' not in message, message


def test_cli_reports_a_corrupt_manifest_with_exit_2(index_dir, tmp_path, capsys):
    broken = tmp_path / 'broken'
    shutil.copytree(index_dir, broken)
    (broken / 'manifest.json').write_text('{"counts": ')
    assert cli.main(['query', '--index', str(broken), 'question']) == 2
    err = capsys.readouterr().err
    assert err.startswith('ragsieve query: error: ') and str(broken / 'manifest.json') in err
    assert err.count('\n') == 1


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


def test_reader_rereads_latest_when_its_run_is_pruned_while_opening(index_dir, tmp_path, embedding_model, monkeypatch):
    root = tmp_path / 'root'
    for run_id in ('r1', 'r2'):
        shutil.copytree(index_dir, root / 'runs' / run_id)
    snapshots.write_latest(str(root), 'r1')
    real_check = query.check_index_dir

    def racing_build(directory):
        # A build publishes r2 and prunes r1 right after this reader read LATEST.
        if directory.endswith('r1'):
            snapshots.write_latest(str(root), 'r2')
            shutil.rmtree(root / 'runs' / 'r1')
        return real_check(directory)

    monkeypatch.setattr(query, 'check_index_dir', racing_build)
    retriever = query.Retriever(str(root), model=embedding_model)
    assert retriever.index == str(root / 'runs' / 'r2')
    # Everything is in memory: deleting the run now changes nothing for this reader.
    shutil.rmtree(root / 'runs' / 'r2')
    assert retriever.search('How long do I cook pasta?', k=1).hits[0].doc_id == 'pasta'


def test_prune_spares_runs_replaced_within_the_grace_period(tmp_path):
    import os

    for finished, run_id in ((1000, 'a'), (2000, 'b'), (2900, 'c')):
        directory = tmp_path / 'runs' / run_id
        directory.mkdir(parents=True)
        (directory / 'manifest.json').write_text('{}')
        os.utime(directory / 'manifest.json', (finished, finished))
    snapshots.write_latest(str(tmp_path), 'c')
    # 'a' was replaced by 'b' 1000 s ago, 'b' by 'c' 100 s ago.
    assert snapshots.prune_runs(str(tmp_path), 1, grace_seconds=600, now=3000) == ['a']
    assert snapshots.list_runs(str(tmp_path))[0] == ['b', 'c']
    assert snapshots.prune_runs(str(tmp_path), 1, grace_seconds=0, now=3000) == ['b']


@pytest.mark.parametrize('value', [10**400, -10**400, float('nan'), float('inf'), 1e300, True])
def test_recency_values_no_date_can_hold_are_neutral_at_query_time(value):
    # Indexes built before build-time validation may hold them: queries must not fail.
    assert retrieval.parse_timestamp(value) is None
    metadata = json.dumps({'updated_at': value if not isinstance(value, float) else str(value)})
    assert retrieval.document_timestamp(metadata) is None


def test_bm25_of_texts_without_a_term_builds_and_scores_zero(tmp_path):
    # A corpus whose kept chunks are all stopwords or punctuation used to abort the build.
    for name, data in retrieval.bm25_files(['!!!', 'The of and.']).items():
        (tmp_path / name).write_bytes(data)
    bm25 = query.load_bm25(str(tmp_path))
    tokens = retrieval.bm25_tokenize(['pasta water'], return_ids=False)[0]
    assert retrieval.bm25_scores(bm25, tokens, 2).tolist() == [0.0, 0.0]
