"""The Retriever over broken indexes: one clear line naming the file; readers keep their run."""

import json
import shutil

import pytest

from tests.helpers import TWO_RECORDS, records_index
from transforms.output import snapshots
from transforms.query import retriever as retriever_module
from transforms.query.retriever import Retriever, check_index_dir

@pytest.fixture(scope='module')
def index_dir(tmp_path_factory):
    return records_index(tmp_path_factory.mktemp('guards'), TWO_RECORDS)


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


FIRST_HOP = 'The Zorbatron 9000 is made by Helvig Industries.'
# The second hop of "who founded the maker of ...": BM25 finds it ("founded"), its cosine is low.
SECOND_HOP = 'Anna Helvig founded Helvig Industries in Oslo after the war.'
JUNK = ['A satellite in low Earth orbit circles the planet in about ninety minutes.',
        'Cook the pasta in plenty of salted boiling water until it is al dente.']
MULTI_HOP_QUESTION = 'Who founded the company that makes the Zorbatron 9000?'


@pytest.fixture(scope='module')
def hops(embedding_model):
    from tests.helpers import _chunk

    texts = [FIRST_HOP, SECOND_HOP, *JUNK]
    vectors = embedding_model.encode(texts, normalize_embeddings=True)
    return [_chunk(f'doc{i}', 0, t, v) for i, (t, v) in enumerate(zip(texts, vectors))]


def test_the_floor_keeps_what_bm25_found_and_drops_junk_nothing_ranks(hops, embedding_model):
    from transforms.query import retrieval

    def found(exempt):
        config = retrieval.RetrievalConfig(min_relevance=0.25, below_floor='drop', floor_gate=-1.0,
                                           floor_exempt_bm25=exempt)
        result = Retriever.of_chunks(hops, embedding_model, config).search(MULTI_HOP_QUESTION, k=4)
        return {h.text: h for h in result.hits}

    kept = found(10)
    assert kept[SECOND_HOP].cosine < 0.25  # dense alone misses it
    assert kept[SECOND_HOP].ranks['bm25'] is not None
    assert list(kept) == [FIRST_HOP, SECOND_HOP]  # the junk is below the floor and no BM25 match
    # The floor on every candidate (klarRAG's) loses the second hop.
    assert list(found(0)) == [FIRST_HOP]


def test_the_default_ranks_both_hops_first(hops, embedding_model):
    # The second hop is far from the question for the model and found by BM25: the default fusion
    # keeps every candidate of both lists and ranks both hops above the junk.
    hits = Retriever.of_chunks(hops, embedding_model).search(MULTI_HOP_QUESTION, k=4).hits
    assert [h.text for h in hits[:2]] == [FIRST_HOP, SECOND_HOP]
    assert hits[1].cosine < 0.25 and hits[1].ranks['bm25'] is not None


@pytest.mark.parametrize('k', [2.5, float('nan'), '3', True, None])
def test_a_k_that_is_not_a_whole_number_is_a_value_error(hops, embedding_model, k):
    with pytest.raises(ValueError, match='k must be a whole number >= 1'):
        Retriever.of_chunks(hops, embedding_model).search(MULTI_HOP_QUESTION, k=k)


@pytest.mark.parametrize('question,message', [
    ('caf\udcff au lait', 'not valid Unicode text: a lone surrogate'),
    ('\ud800', 'not valid Unicode text'),
    (b'bytes', 'must be text, got bytes'),
    (None, 'must be text, got NoneType'),
    ('  ', 'the question is empty'),
])
def test_a_question_that_is_not_text_is_a_value_error(hops, embedding_model, question, message):
    with pytest.raises(ValueError, match=message):
        Retriever.of_chunks(hops, embedding_model).search(question)


@pytest.mark.parametrize('where', ['tenant=a', ['tenant', 'a'], 3])
def test_a_where_that_is_not_a_mapping_is_a_value_error(hops, embedding_model, where):
    with pytest.raises(ValueError, match='where must be a mapping'):
        Retriever.of_chunks(hops, embedding_model).search(MULTI_HOP_QUESTION, where=where)


def test_a_retriever_over_no_chunks_is_refused(embedding_model):
    with pytest.raises(ValueError, match='at least one chunk'):
        Retriever.of_chunks([], embedding_model)
