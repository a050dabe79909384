"""Intra-doc salience and decisions (`filters.intra_doc`) on hand-made documents; every chunk accounted for."""

import math

import numpy as np
import pytest

from tests.helpers import decisions_by_id, ids, make, mixed_corpus, unit
from transforms.dedup.filters.intra_doc.decision import intra_doc, salience


def test_salience_definition():
    # Cosine to the document's mean embedding, clipped to [0, 1]; not rescaled.
    assert salience(np.array([[0.0, 1.0]])).tolist() == [1.0]
    np.testing.assert_allclose(salience(np.array([[1.0, 0.0], [0.0, 1.0]])), [0.5**0.5] * 2)
    assert salience(np.array([[1.0, 0.0], [-1.0, 0.0]])).tolist() == [1.0, 1.0]  # zero mean
    x = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    s = salience(x)
    unit_x = x / np.linalg.norm(x, axis=1, keepdims=True)
    mean = unit_x.mean(axis=0)
    np.testing.assert_allclose(s, unit_x @ mean / np.linalg.norm(mean))
    assert 0.0 < s.min() < s.max() < 1.0  # the least central chunk is not forced to 0
    away = salience(np.array([[1.0, 0.0], [1.0, 0.1], [-1.0, 0.05]]))
    assert away[2] == 0.0 and away[0] > 0.5  # pointing away from the mean: clipped
    assert salience(np.zeros((0, 3))).shape == (0,)


def doc_with_groups():
    """A central group of three plus an exact copy, a side group of three, an outlier.

    Paraphrases lean symmetrically off their group's direction, so the
    unperturbed chunk of each group is its most central (its keeper).
    """
    a = unit(1, 0, 0, 0)
    return [
        make('doc', 0, 'side keeper', embedding=unit(0, 1, 0, 0)),
        make('doc', 1, 'main keeper', embedding=a),
        make('doc', 2, 'main paraphrase one', embedding=unit(1, 0, 0.1, 0)),
        make('doc', 3, 'MAIN  keeper', embedding=a),  # same content_hash as doc#1
        make('doc', 4, 'side paraphrase one', embedding=unit(0, 1, 0.15, 0)),
        make('doc', 5, 'outlier', embedding=unit(0, 0, 0, 1)),
        make('doc', 6, 'main paraphrase two', embedding=unit(1, 0, -0.1, 0)),
        make('doc', 7, 'side paraphrase two', embedding=unit(0, 1, -0.15, 0)),
    ]


@pytest.mark.parametrize('mode,raised', [('linear', 0.30), ('log', 0.15 * math.log2(3))])
def test_intra_doc_boosts_near_duplicates(mode, raised):
    chunks = doc_with_groups()
    base = salience(np.stack([c.embedding for c in chunks]))
    assert base[5] < 0.25 and base[1] == base[3] == base.max() and 0.25 < base[0] < 0.7
    kept, dropped = intra_doc(chunks, min_salience=0.25, mode=mode)
    assert ids(kept) == ['doc#0', 'doc#1']  # chunk order
    assert decisions_by_id(dropped) == {
        'doc#2': ('intra_doc_near', 'doc#1'),
        'doc#3': ('intra_doc_exact', 'doc#1'),
        'doc#4': ('intra_doc_near', 'doc#0'),
        'doc#5': ('intra_doc_low_salience', None),
        'doc#6': ('intra_doc_near', 'doc#1'),
        'doc#7': ('intra_doc_near', 'doc#0'),
    }
    assert kept[0].salience == pytest.approx(base[0] + raised)
    assert kept[1].salience == 1.0  # 1.0 + boost, capped
    low = next(d for d in dropped if d.reason == 'intra_doc_low_salience')
    assert low.chunk.salience == low.score == pytest.approx(base[5])


def test_intra_doc_exact_duplicates_do_not_boost():
    a = unit(1, 0, 0)
    chunks = [
        make('doc', 0, 'Contact us at info@example.com', embedding=a),
        make('doc', 1, 'Contact us at info@example.com', embedding=a),
        make('doc', 2, 'Something else entirely', embedding=unit(0, 1, 0)),
        make('doc', 3, 'And a third topic', embedding=unit(0, 0, 1)),
    ]
    kept, dropped = intra_doc(chunks, min_salience=0.0)
    base = salience(np.stack([c.embedding for c in chunks]))
    assert [c.salience for c in kept] == pytest.approx([base[0], base[2], base[3]])
    assert decisions_by_id(dropped) == {'doc#1': ('intra_doc_exact', 'doc#0')}


@pytest.mark.parametrize('mode,raised', [('linear', 0.05 * 4), ('log', 0.05 * math.log2(5))])
def test_intra_doc_boost_by_number_merged(mode, raised):
    main = [unit(1, 0, 0, 0, 0)] + [unit(1, 0, 0, d, 0) for d in (0.05, -0.05, 0.1, -0.1, 0.15, -0.15)]
    side = [unit(0, 1, 0, 0, 0)] + [unit(0, 1, 0, 0, e) for e in (0.05, -0.05, 0.1, -0.1)]
    vectors = main + side + [unit(0, 0, 1, 0, 0)]
    chunks = [make('doc', i, f'text {i}', embedding=v) for i, v in enumerate(vectors)]
    base = salience(np.stack(vectors))
    kept, dropped = intra_doc(chunks, boost=0.05, mode=mode)
    assert ids(kept) == ['doc#0', 'doc#7', 'doc#12']  # the outlier is off-centre, not off-topic
    assert kept[1].salience == pytest.approx(base[7] + raised) and kept[1].salience < 1.0
    assert sum(d.duplicate_of == 'doc#7' for d in dropped) == 4


def test_intra_doc_keeps_the_least_central_chunk_unless_off_topic():
    # Salience is not min-max scaled: distinct chunks all keep their place ...
    chunks = [make('doc', i, f'text {i}', embedding=v) for i, v in enumerate(np.eye(3) + 0.1 * np.arange(3))]
    kept, dropped = intra_doc(chunks)
    assert len(kept) == 3 and not dropped
    # ... and only a chunk pointing away from the document (salience ~0) is dropped.
    away = chunks + [make('doc', 3, 'away', embedding=unit(-1, -1, -1))]
    kept, dropped = intra_doc(away)
    assert len(kept) == 3 and decisions_by_id(dropped) == {'doc#3': ('intra_doc_low_salience', None)}


def test_intra_doc_edge_cases():
    only = make('doc', 0, embedding=unit(1, 0))
    kept, dropped = intra_doc([only])
    assert kept[0].salience == 1.0 and not dropped
    no_vec = make('doc', 1)
    kept, dropped = intra_doc([only, no_vec])
    assert kept[1] == no_vec and not dropped
    assert intra_doc([]) == ([], [])
    with pytest.raises(ValueError):
        intra_doc([only, make('other', 0, embedding=unit(1, 0))])
    with pytest.raises(ValueError):
        intra_doc([only], mode='exp')


def test_intra_doc_accounts_per_document():
    chunks = mixed_corpus()
    for doc in sorted({c.doc_id for c in chunks}):
        own = [c for c in chunks if c.doc_id == doc]
        kept, dropped = intra_doc(own)
        assert len(kept) + len(dropped) == len(own)
        assert all(0.0 <= c.salience <= 1.0 for c in kept)
