"""The Retriever over broken indexes: one clear line naming the file; readers keep their run."""

import json
import shutil

import pytest

from pipelines import build_index
from transforms.output import snapshots
from transforms.query import retriever as retriever_module
from transforms.query.retriever import Retriever, check_index_dir

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
        Retriever(str(broken), model=embedding_model)
    message = str(e.value)
    assert str(broken / name) in message and '\n' not in message, message


def flip_middle(path, n=3800):
    data = bytearray(path.read_bytes())
    n = min(n, len(data) // 2)  # past the header, so that FAISS still reads it
    start = len(data) - n
    for i in range(start, start + n):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def corrupt_vocabulary(path):
    vocab = json.loads(path.read_text())
    first, second = sorted(vocab)[:2]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # same size, words swapped
    path.write_text(json.dumps(vocab))


@pytest.mark.parametrize('damage, name', [
    (lambda run, other: (shutil.rmtree(run / 'bm25'), shutil.copytree(other / 'bm25', run / 'bm25')), 'bm25/'),
    (lambda run, other: flip_middle(run / 'index' / 'index.faiss'), 'index/index.faiss'),
    (lambda run, other: corrupt_vocabulary(run / 'bm25' / 'vocab.index.json'), 'bm25/vocab.index.json'),
])
def test_files_that_still_load_but_are_not_the_builds_are_refused(index_dir, sample_root, tmp_path, embedding_model,
                                                                 damage, name):
    # Each loads without error: only the manifest's digests tell them from what the build wrote.
    broken = tmp_path / 'broken'
    shutil.copytree(index_dir, broken)
    damage(broken, sample_root[1] / 'runs' / 'r1')
    with pytest.raises(ValueError) as e:
        Retriever(str(broken), model=embedding_model)
    message = str(e.value)
    assert f'{broken}/{name}' in message and 'rebuild it' in message and '\n' not in message, message


def test_reader_rereads_latest_when_its_run_is_pruned_while_opening(index_dir, tmp_path, embedding_model, monkeypatch):
    root = tmp_path / 'root'
    for run_id in ('r1', 'r2'):
        shutil.copytree(index_dir, root / 'runs' / run_id)
    snapshots.write_latest(str(root), 'r1')
    real_check = check_index_dir

    def racing_build(directory):
        # A build publishes r2 and prunes r1 right after this reader read LATEST.
        if directory.endswith('r1'):
            snapshots.write_latest(str(root), 'r2')
            shutil.rmtree(root / 'runs' / 'r1')
        return real_check(directory)

    monkeypatch.setattr(retriever_module, 'check_index_dir', racing_build)
    retriever = Retriever(str(root), model=embedding_model)
    assert retriever.index == str(root / 'runs' / 'r2')
    # Everything is in memory: deleting the run now changes nothing for this reader.
    shutil.rmtree(root / 'runs' / 'r2')
    assert retriever.search('How long do I cook pasta?', k=1).hits[0].doc_id == 'pasta'


def test_shape_problem_says_where_a_manifest_departs_from_its_shape():
    shape = retriever_module.MANIFEST_SHAPE
    good = {'counts': {'chunks': 3}, 'model': {'dim': 384}, 'config': {'embedding': {'model': 'm'}}, 'more': 1}
    assert retriever_module.shape_problem(good, shape) is None
    assert retriever_module.shape_problem({**good, 'counts': 5}, shape) == 'counts is 5, not an object'
    assert retriever_module.shape_problem({**good, 'model': {'dim': True}}, shape) == 'model.dim is true, not an integer'
    assert retriever_module.shape_problem({**good, 'config': {}}, shape) == 'it has no config.embedding'
    assert retriever_module.shape_problem('x' * 100, shape) == f'it is "{"x" * 36}..., not an object'
