"""Filter decisions on small hand-made chunk sets with known answers."""

import dataclasses

import numpy as np
import pytest

from transforms.dedup import FilterSpec, apply_filter, keep_order_key, parse_filters
from transforms.filters.exact import drop_exact
from transforms.filters.intra_doc import intra_doc
from transforms.filters.minhash import drop_minhash_groups
from transforms.filters.ner_exact import drop_ner_exact
from transforms.filters.ner_half import drop_ner_half
from transforms.filters.random_control import drop_random
from transforms.filters.similarity import drop_similar
from transforms.minhash import MinHashConfig, signatures
from transforms.text import content_hash
from transforms.types import Chunk, make_chunk_id

PARAGRAPH = (
    'The Tower Building of the Little Rock Arsenal, also known as the U.S. Arsenal '
    'Building, is a building located in MacArthur Park in downtown Little Rock, '
    'Arkansas. Built in 1840, it was part of Little Rock\'s first military installation. '
    'Since its decommissioning, the surrounding area has been home to a park, and the '
    'building itself now houses a museum of military history.'
)
TYPO = PARAGRAPH.replace('located', 'locatd')
OTHER = (
    'Valkyria Chronicles III is a tactical role-playing game developed by Sega and '
    'Media.Vision for the PlayStation Portable. Released in January 2011 in Japan, it '
    'is the third game in the Valkyria series and follows the Nameless, a penal unit.'
)
BOILERPLATE = 'Contact us at info@example.com for more information.'


def unit(*values):
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def make(doc_id, index, text='', embedding=None, entities=None, topic=None, salience=None, minhash=None):
    text = text or f'chunk {index} of {doc_id}'
    return Chunk(
        chunk_id=make_chunk_id(doc_id, index),
        doc_id=doc_id,
        chunk_index=index,
        text=text,
        char_start=0,
        char_end=len(text),
        n_tokens=len(text.split()),
        content_hash=content_hash(text),
        embedding=None if embedding is None else np.asarray(embedding, dtype=np.float32),
        entities=entities,
        topic=topic,
        salience=salience,
        minhash=minhash,
    )


def with_minhash(chunks, config=MinHashConfig()):
    sigs = signatures([c.text for c in chunks], config)
    return [dataclasses.replace(c, minhash=s) for c, s in zip(chunks, sigs)]


def ids(chunks):
    return [c.chunk_id for c in chunks]


def decisions(dropped):
    return {d.chunk.chunk_id: (d.reason, d.duplicate_of) for d in dropped}


# --- parse_filters ---------------------------------------------------------------


def test_parse_filters_with_defaults():
    got = [tuple(f) for f in parse_filters('exact,minhash@0.7,similarity@0.8,random@0.4')]
    assert got == [('exact', None), ('minhash', 0.7), ('similarity', 0.8), ('random', 0.4)]
    got = [tuple(f) for f in parse_filters(' minhash , similarity_topics_ner , random , intra_doc , ner_half ')]
    assert got == [
        ('minhash', 0.8),
        ('similarity_topics_ner', 0.8),
        ('random', 0.5),
        ('intra_doc', 0.9),
        ('ner_half', None),
    ]
    assert [f.name for f in parse_filters('cascade')] == ['exact', 'minhash', 'intra_doc']
    assert parse_filters('none') == []
    name, threshold = FilterSpec('similarity_ner')
    assert (name, threshold) == ('similarity_ner', 0.8)


@pytest.mark.parametrize(
    'spec',
    ['', 'exact,,minhash', 'bogus', 'exact@0.5', 'ner_exact@0.5', 'minhash@x', 'minhash@1.5',
     'similarity@0', 'random@-0.1', 'minhash@nan', 'cascade@0.5', 'exact,cascade'],
)
def test_parse_filters_rejects(spec):
    with pytest.raises(ValueError):
        parse_filters(spec)


# --- keep rule -------------------------------------------------------------------


def test_keep_order_key():
    a = make('b', 3, salience=0.9)
    b = make('a', 0, salience=None)
    c = make('a', 1, salience=0.0)
    d = make('a', 2, salience=0.9)
    assert sorted([a, b, c, d], key=keep_order_key) == [d, a, b, c]


# --- accounting ------------------------------------------------------------------


def mixed_corpus():
    rng = np.random.default_rng(3)
    base = rng.normal(size=(6, 8))
    texts = [PARAGRAPH, TYPO, OTHER, BOILERPLATE, BOILERPLATE, 'short one', '']
    chunks = []
    for i in range(40):
        doc = f'doc{i % 4}'
        vector = base[i % 6] + rng.normal(scale=0.2, size=8)
        ents = [(), ('ORG:sega',), ('ORG:sega', 'GPE:japan'), ('PERSON:kurt', 'GPE:japan')][i % 4]
        chunks.append(
            make(doc, i // 4, texts[i % 7] or f'text {i}', embedding=vector, entities=ents, topic=i % 3)
        )
    return with_minhash(chunks)


@pytest.mark.parametrize(
    'apply',
    [
        drop_exact,
        lambda cs: drop_minhash_groups(cs, 0.7),
        lambda cs: drop_random(cs, 0.4, 5),
        lambda cs: drop_similar(cs, 0.8),
        lambda cs: drop_similar(cs, 0.8, True, True),
        drop_ner_exact,
        drop_ner_half,
    ],
)
def test_every_filter_accounts_for_every_chunk(apply):
    chunks = mixed_corpus()
    kept, dropped = apply(chunks)
    assert len(kept) + len(dropped) == len(chunks)
    assert sorted(ids(kept) + [d.chunk.chunk_id for d in dropped]) == sorted(ids(chunks))
    kept_ids = set(ids(kept))
    assert all(d.duplicate_of is None or d.duplicate_of in kept_ids for d in dropped)


def test_intra_doc_accounts_per_document():
    chunks = mixed_corpus()
    for doc in sorted({c.doc_id for c in chunks}):
        own = [c for c in chunks if c.doc_id == doc]
        kept, dropped = intra_doc(own)
        assert len(kept) + len(dropped) == len(own)
        assert all(0.0 <= c.salience <= 1.0 for c in kept)


def test_apply_filter_runs_a_filter_over_the_corpus_in_canonical_order():
    a = make('a', 0, 'alpha beta gamma delta', [1.0, 0.0])
    a_copy = make('b', 0, 'Alpha  beta gamma delta', [1.0, 0.0])
    other = make('b', 1, 'something else entirely', [0.0, 1.0])
    kept, dropped = apply_filter([other, a_copy, a], FilterSpec('exact', None))
    assert [c.chunk_id for c in kept] == ['a#0', 'b#1']  # canonical order, whatever the input
    assert [(d.chunk.chunk_id, d.duplicate_of) for d in dropped] == [('b#0', 'a#0')]
    kept, dropped = apply_filter([a, a_copy, other], FilterSpec('similarity', 0.9))
    assert [d.chunk.chunk_id for d in dropped] == ['b#0']
    kept, dropped = apply_filter([a, a_copy, other], FilterSpec('intra_doc', 0.9))
    assert len(kept) + len(dropped) == 3
