"""Query-time metadata filters: parsing, matching through represented documents, filtered FAISS search.

The vectors are random unit rows (the unit under test is the allow-list in
each FAISS index type, not the embedding model).
"""

import faiss
import numpy as np
import pytest

from transforms.query.where import MetadataFilter, dense_search, normalize_where, parse_where, value_text

METADATA = {
    'v311': '{"release": "3.11", "tenant": "a"}',
    'v312': '{"release": "3.12", "tenant": "a"}',
    'v313': '{"release": 3.13, "tenant": "a", "tags": ["new", "beta"]}',
    'b312': '{"release": "3.12", "tenant": "b"}',
    'bare': None,
}


def test_parse_where_groups_repeated_keys():
    assert parse_where(['release=3.11', 'tenant=a', 'release=3.12', 'q=x=y']) == {
        'release': ['3.11', '3.12'], 'tenant': ['a'], 'q': ['x=y']}
    for bad in ('release', '=3.12'):
        with pytest.raises(ValueError, match='key=value'):
            parse_where([bad])


def test_values_compare_as_text():
    assert normalize_where({'r': 3.12, 'flag': [True, None], 's': 'x'}) == {
        'r': {'3.12'}, 'flag': {'true', 'null'}, 's': {'x'}}
    assert value_text('3.12') == value_text(3.12)
    with pytest.raises(ValueError):
        normalize_where({'r': []})


@pytest.fixture
def metadata_filter():
    # Row 0 is v311's chunk and represents v312's and b312's copies (an unscoped build);
    # row 1 is v313's; row 2 a document without metadata.
    return MetadataFilter(
        ['v311', 'v313', 'bare'],
        [[('v312#0', 'v312'), ('b312#0', 'b312')], [], []],
        METADATA,
    )


def test_a_chunk_matches_through_the_documents_it_represents(metadata_filter):
    assert metadata_filter.matches({'release': '3.12'}) == {0: ['b312', 'v312']}
    assert metadata_filter.matches({'release': '3.11'}) == {0: ['v311']}
    # Own document first, then represented ones.
    assert metadata_filter.matches({'tenant': 'a'}) == {0: ['v311', 'v312'], 1: ['v313']}


def test_and_across_keys_or_within_a_key(metadata_filter):
    assert metadata_filter.matches({'release': '3.12', 'tenant': 'b'}) == {0: ['b312']}
    assert metadata_filter.matches({'release': ['3.11', '3.13'], 'tenant': 'a'}) == {0: ['v311'], 1: ['v313']}
    assert metadata_filter.matches({'release': '3.13'}) == {1: ['v313']}  # number 3.13 matches "3.13"
    assert metadata_filter.matches({'tags': 'beta'}) == {1: ['v313']}
    assert metadata_filter.matches({'release': 'nope'}) == {}
    assert metadata_filter.matches({'missing': 'x'}) == {}
    assert metadata_filter.mask({1: ['v313']}).tolist() == [False, True, False]


@pytest.fixture
def one_faiss_thread():
    """Training on 400 rows is fast on one thread and slow on busy shared cores."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.mark.parametrize('factory', ['Flat', 'IVF8,Flat', 'HNSW16', 'PQ4x4', 'SQ8', 'IVF8,PQ4x4'])
def test_a_rare_value_gets_its_rows_with_every_index_type(factory, one_faiss_thread):
    x = np.random.RandomState(0).randn(400, 16).astype(np.float32)
    faiss.normalize_L2(x)
    index = faiss.index_factory(16, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    allowed = np.array([3, 77, 301], np.int64)
    rows = dense_search(index, x, x[0], 10, allowed)
    assert sorted(rows) == [3, 77, 301]
    assert dense_search(index, x, x[0], 10, np.array([], np.int64)) == []
    assert len(dense_search(index, x, x[0], 10)) == 10
