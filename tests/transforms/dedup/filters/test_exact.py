"""ExactNorm's decision (`filters.exact.drop_exact`) on hand-made chunks."""

from tests.helpers import BOILERPLATE, OTHER, decisions_by_id, ids, make
from transforms.dedup.filters.exact import drop_exact


def test_exact_keeps_by_the_keep_rule():
    chunks = [
        make('doc2', 0, BOILERPLATE),
        make('doc1', 5, '  contact US at info@example.com   for more information.'),
        make('doc3', 0, BOILERPLATE, salience=0.5),
        make('doc1', 0, OTHER),
    ]
    kept, dropped = drop_exact(chunks)
    assert ids(kept) == ['doc3#0', 'doc1#0']
    assert decisions_by_id(dropped) == {'doc2#0': ('exact', 'doc3#0'), 'doc1#5': ('exact', 'doc3#0')}
    kept, _ = drop_exact([c for c in chunks if c.salience is None])
    assert ids(kept) == ['doc1#5', 'doc1#0']  # earliest (doc_id, chunk_index) among equals
