"""The similarity family's decision (`filters.similarity`: `similar_pairs`, `drop_similar`) on hand-made vectors."""

import numpy as np
import pytest

from tests.helpers import decisions_by_id, ids, make, unit
from transforms.dedup.filters.ner_exact import drop_ner_exact
from transforms.dedup.filters.similarity.decision import drop_similar, similar_pairs


def test_similarity_drops_paraphrase_against_kept_only():
    a = make('d', 0, embedding=unit(1, 0, 0))
    b = make('d', 1, embedding=unit(1, 0.9, 0))  # cos(a, b) ~ 0.74
    c = make('d', 2, embedding=unit(0.2, 1, 0))  # cos(b, c) ~ 0.81, cos(a, c) ~ 0.2
    p = make('e', 0, embedding=unit(1, 0.3, 0))  # cos(a, p) ~ 0.96
    chunks = [a, b, c, p]
    kept, dropped = drop_similar(chunks, 0.9)
    assert ids(kept) == ['d#0', 'd#1', 'd#2']
    assert decisions_by_id(dropped) == {'e#0': ('similarity', 'd#0')}
    assert dropped[0].score == pytest.approx(float(unit(1, 0, 0) @ unit(1, 0.3, 0)), abs=1e-6)
    # Greedy: d#1 is dropped for d#0, so d#2 (close only to d#1) stays.
    kept, dropped = drop_similar(chunks, 0.7)
    assert ids(kept) == ['d#0', 'd#2']
    assert decisions_by_id(dropped) == {'d#1': ('similarity', 'd#0'), 'e#0': ('similarity', 'd#0')}


def test_similarity_keep_rule_prefers_salient_and_most_similar():
    chunks = [
        make('a', 0, embedding=unit(1, 0, 0)),
        make('b', 0, embedding=unit(1, 0.05, 0), salience=0.5),
        make('c', 0, embedding=unit(1, 0.1, 0)),
    ]
    kept, dropped = drop_similar(chunks, 0.95)
    assert ids(kept) == ['b#0']
    assert decisions_by_id(dropped) == {'a#0': ('similarity', 'b#0'), 'c#0': ('similarity', 'b#0')}


def test_identical_vectors_reach_threshold_one():
    v = unit(0.3, 0.5, 0.7, 0.11)
    kept, dropped = drop_similar([make('a', 0, embedding=v), make('b', 0, embedding=v)], 1.0)
    assert ids(kept) == ['a#0'] and len(dropped) == 1


def test_similarity_topics_and_ner_conditions():
    ents = ('ORG:sega', 'GPE:japan')
    a = make('d', 0, embedding=unit(1, 0, 0), topic=0, entities=ents)
    b = make('d', 1, embedding=unit(1, 0.1, 0), topic=1, entities=('ORG:sega',))
    c = make('d', 2, embedding=unit(1, 0.1, 0.05), topic=0, entities=('PERSON:kurt',))
    n = make('d', 3, embedding=unit(1, 0.05, 0.1), topic=0, entities=())
    chunks = [a, b, c, n]
    assert ids(drop_similar(chunks, 0.9)[0]) == ['d#0']
    kept, dropped = drop_similar(chunks, 0.9, require_same_topic=True)
    assert ids(kept) == ['d#0', 'd#1']
    assert {d.reason for d in dropped} == {'similarity_topics'}
    kept, dropped = drop_similar(chunks, 0.9, require_shared_entity=True)
    assert ids(kept) == ['d#0', 'd#2', 'd#3']  # no shared entity, or none at all
    assert decisions_by_id(dropped) == {'d#1': ('similarity_ner', 'd#0')}
    kept, dropped = drop_similar(chunks, 0.9, require_same_topic=True, require_shared_entity=True)
    assert ids(kept) == ids(chunks)
    with pytest.raises(ValueError):
        drop_similar([make('d', 0, embedding=unit(1, 0))], 0.9, require_same_topic=True)
    with pytest.raises(ValueError):
        drop_similar([make('d', 0)], 0.9)


def test_similar_pairs_match_brute_force():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 16)).astype(np.float32)
    x[100:110] = x[0] + rng.normal(scale=0.05, size=(10, 16))
    unit_x = x / np.linalg.norm(x, axis=1, keepdims=True)
    sims = unit_x.astype(np.float64) @ unit_x.astype(np.float64).T
    found = similar_pairs(x, 0.5)
    for i in range(len(x)):
        expected = [j for j in range(len(x)) if j != i and sims[i, j] >= 0.5]
        assert [j for j, _ in found[i]] == expected


def test_same_entities_different_facts(embedding_model):
    from transforms.features.embedding import embed_texts

    texts = [
        'Apple reported revenue of 90 billion dollars in the first quarter, according to Tim Cook.',
        'Tim Cook announced that Apple will open a new campus next year.',
        'The Eiffel Tower in Paris was completed in 1889 for the World Fair.',
        'Completed in 1889 for the World Fair, the Eiffel Tower stands in Paris.',
    ]
    ents = [
        ('ORG:apple', 'PERSON:tim cook'),
        ('ORG:apple', 'PERSON:tim cook'),
        ('FAC:the eiffel tower', 'GPE:paris', 'EVENT:the world fair'),
        ('FAC:the eiffel tower', 'GPE:paris', 'EVENT:the world fair'),
    ]
    vectors = embed_texts(embedding_model, texts)
    chunks = [make('d', i, t, embedding=v, entities=e) for i, (t, v, e) in enumerate(zip(texts, vectors, ents))]
    kept, dropped = drop_similar(chunks, 0.9)
    assert decisions_by_id(dropped) == {'d#3': ('similarity', 'd#2')}  # the paraphrase only
    kept, dropped = drop_ner_exact(chunks)
    assert decisions_by_id(dropped) == {'d#1': ('ner_exact', 'd#0'), 'd#3': ('ner_exact', 'd#2')}
