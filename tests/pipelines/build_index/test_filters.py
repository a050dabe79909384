"""End-to-end builds with each filter over a small corpus of known redundancy."""

import faiss
import pyarrow.parquet as pq
import pytest

from pipelines.build_index import job as build_index
from tests.helpers import PASTA_AGAIN, PASTA_PARAGRAPH
from transforms.dedup.filters.random_control import random_unit

ARSENAL = (
    'The Tower Building of the Little Rock Arsenal, also known as the U.S. Arsenal Building, '
    'is a building located in MacArthur Park in downtown Little Rock, Arkansas. Built in 1840, it was '
    "part of Little Rock's first military installation. Since its decommissioning, the surrounding "
    'area has been home to a park, and the building itself now houses a museum of military history.'
)
ORBIT = (
    'A satellite in low Earth orbit circles the planet in about ninety minutes. Raising the orbit '
    'requires a burn at perigee that increases the apogee on the far side of the planet.'
)
BEES = (
    'Honey bees communicate the location of flowers with a waggle dance. The angle of the dance '
    'relative to vertical encodes the direction of the food source relative to the sun.'
)
VOLCANO = (
    'Volcanic eruptions inject sulfur dioxide into the stratosphere, where it forms aerosols that '
    'reflect sunlight and can cool the global climate for a year or two.'
)
# Each paragraph fits one chunk at --chunk_size 100, and no two paragraphs do.
CHUNK_FLAGS = ('--chunk_size', '100')
ALL_CHUNKS = {
    'arsenal.md#0', 'arsenal.md#1', 'copy.md#0', 'copy.md#1',
    'typo.md#0', 'typo.md#1', 'kitchen.md#0', 'kitchen.md#1',
}


@pytest.fixture(scope='module')
def redundant_corpus(tmp_path_factory):
    """An exact copy across documents, a copy with a typo, a paraphrase within a document."""
    root = tmp_path_factory.mktemp('redundant')
    (root / 'arsenal.md').write_text(ARSENAL + '\n\n' + ORBIT + '\n')
    (root / 'copy.md').write_text(BEES + '\n\n' + ARSENAL + '\n')
    (root / 'typo.md').write_text(VOLCANO + '\n\n' + ARSENAL.replace('located', 'locatd') + '\n')
    (root / 'kitchen.md').write_text(PASTA_PARAGRAPH + '\n\n' + PASTA_AGAIN + '\n')
    return root


def build(corpus, out, *flags):
    return build_index.run(['--input', str(corpus), '--output', str(out), *CHUNK_FLAGS, *flags])


def read_outputs(out):
    chunks = pq.read_table(out / 'chunks').to_pylist()
    dropped = pq.read_table(out / 'dropped').to_pylist()
    index = faiss.read_index(str(out / 'index' / 'index.faiss'))
    return chunks, dropped, index


def decisions(dropped):
    return {d['chunk_id']: (d['reason'], d['duplicate_of']) for d in dropped}


def check_accounting(out, manifest):
    """Kept + dropped is every chunk, once; the index holds the kept ones and the deltas only."""
    chunks, dropped, index = read_outputs(out)
    kept_ids = [c['chunk_id'] for c in chunks if c['kind'] == 'chunk']
    dropped_ids = [d['chunk_id'] for d in dropped]
    assert sorted(kept_ids + dropped_ids) == sorted(ALL_CHUNKS)
    counts = manifest['counts']
    assert counts['chunks_before_filters'] == len(ALL_CHUNKS) == counts['chunks'] + counts['dropped']
    assert counts['chunks'] + counts['deltas'] == len(chunks) == index.ntotal
    assert manifest['lineage']['ok']
    chunks = [c for c in chunks if c['kind'] == 'chunk']
    assert sum(counts['dropped_by_reason'].values()) == len(dropped)
    assert all(d['duplicate_of'] in kept_ids for d in dropped if d['duplicate_of'])
    before = len(ALL_CHUNKS)
    for f in manifest['filters']:
        assert f['before'] == before and f['after'] + f['dropped'] == before
        before = f['after']
    assert before == len(chunks)
    return chunks, dropped


@pytest.fixture(scope='module')
def cascade(redundant_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp('cascade') / 'out'
    manifest = build(redundant_corpus, out, '--warn_doc_loss', '0.4')  # the default filter
    return out, manifest


def test_cascade_drops_each_kind_of_redundancy(cascade):
    out, manifest = cascade
    chunks, dropped = check_accounting(out, manifest)
    assert decisions(dropped) == {
        'copy.md#1': ('exact', 'arsenal.md#0'),
        'typo.md#1': ('minhash', 'arsenal.md#0'),
        'kitchen.md#1': ('intra_doc_near', 'kitchen.md#0'),
    }
    scores = {d['chunk_id']: d['score'] for d in dropped}
    assert scores['copy.md#1'] == 1.0 and 0.8 <= scores['typo.md#1'] < 1.0 and scores['kitchen.md#1'] >= 0.9
    assert {d['chunk_id']: d['text'] for d in dropped}['copy.md#1'] == ARSENAL
    assert [(f['name'], f['threshold'], f['before'], f['after'], f['dropped']) for f in manifest['filters']] == [
        ('exact', None, 8, 7, 1), ('minhash', 0.8, 7, 6, 1), ('intra_doc', 0.9, 6, 5, 1)]
    assert manifest['counts']['dropped_by_reason'] == {'exact': 1, 'intra_doc_near': 1, 'minhash': 1}
    # intra_doc sets salience on every kept chunk; the merged paraphrase boosted its keeper.
    salience = {c['chunk_id']: c['salience'] for c in chunks}
    assert all(0.0 <= s <= 1.0 for s in salience.values()) and salience['kitchen.md#0'] == 1.0
    assert all(c['entities'] is None and c['topic'] is None for c in chunks)
    lost = {d['doc_id'] for d in manifest['warnings']['doc_loss']}
    assert lost == {'copy.md', 'typo.md', 'kitchen.md'}
    assert manifest['config']['filters']['specs'][1] == {'name': 'minhash', 'threshold': 0.8}


def test_cascade_embeds_only_what_exact_and_minhash_keep(cascade):
    out, manifest = cascade
    chunks, dropped = check_accounting(out, manifest)
    counts, filters = manifest['counts'], manifest['filters']
    # intra_doc is the first filter that needs embeddings: only its input is embedded.
    assert counts['chunks_embedded'] == filters[2]['before'] == 6
    assert counts['embeddings_saved'] == 2 == filters[0]['dropped'] + filters[1]['dropped']
    assert {d['chunk_id']: d['features'] for d in dropped} == {
        'copy.md#1': [], 'typo.md#1': ['minhash'], 'kitchen.md#1': ['embedding', 'minhash']}
    assert all(len(c['embedding']) == 384 for c in chunks)  # the index needs every kept chunk


def test_feature_cache_holds_what_was_computed(redundant_corpus, tmp_path):
    cache = str(tmp_path / 'cache')
    first = build(redundant_corpus, tmp_path / 'first', '--cache', cache)
    assert first['cache']['features']['embedding'] == {
        'settings_id': first['cache']['features']['embedding']['settings_id'],
        'hits': 0, 'misses': 8, 'computed': 6, 'damaged': 0}
    second = build(redundant_corpus, tmp_path / 'second', '--cache', cache)
    embedding = second['cache']['features']['embedding']
    # typo.md#1 (dropped by minhash) was never embedded; copy.md#1 shares arsenal.md#0's text.
    assert (embedding['hits'], embedding['misses'], embedding['computed']) == (7, 1, 0)
    assert second['counts']['chunks_embedded'] == 0
    for part in ['chunks/part-00000-of-00001.parquet', 'index/index.faiss']:
        assert (tmp_path / 'first' / part).read_bytes() == (tmp_path / 'second' / part).read_bytes()


def test_cascade_is_byte_identical_across_runner_modes(cascade, redundant_corpus, tmp_path):
    first, _ = cascade
    second = tmp_path / 'second'
    build(redundant_corpus, second, '--warn_doc_loss', '0.4',
          '--direct_running_mode=multi_processing', '--direct_num_workers=2')
    for part in ['chunks/part-00000-of-00001.parquet', 'dropped/part-00000-of-00001.parquet',
                 'index/index.faiss', 'index/ids.parquet']:
        assert (first / part).read_bytes() == (second / part).read_bytes(), part


# Expected decisions per strategy: chunk_id -> (reason, duplicate_of), or a
# callable of the chunk ids for `random`.
STRATEGIES = {
    'none': {},
    **{
        spec: {
            'copy.md#1': (spec.partition('@')[0], 'arsenal.md#0'),
            'typo.md#1': (spec.partition('@')[0], 'arsenal.md#0'),
            'kitchen.md#1': (spec.partition('@')[0], 'kitchen.md#0'),
        }
        for spec in ('similarity@0.9', 'similarity_topics@0.9')
    },
    # With every name label, en_core_web_sm reads 'Cook' and 'al dente' as
    # PERSON in both pasta chunks; without PERSON the pasta chunks name no
    # entity and are never redundant under the entity-aware filters.
    **{
        spec: {
            'copy.md#1': (spec.partition('@')[0], 'arsenal.md#0'),
            'typo.md#1': (spec.partition('@')[0], 'arsenal.md#0'),
        }
        for spec in ('similarity_ner@0.9', 'similarity_topics_ner@0.9', 'ner_exact', 'ner_half')
    },
    'random@0.5': {
        chunk_id: ('random', None) for chunk_id in sorted(ALL_CHUNKS) if random_unit(chunk_id, 7) < 0.5
    },
}


@pytest.mark.parametrize('spec', sorted(STRATEGIES))
def test_each_strategy(spec, redundant_corpus, tmp_path, caplog):
    caplog.set_level('INFO', logger='ragsieve.build')
    out = tmp_path / 'out'
    manifest = build(redundant_corpus, out, '--filter', spec, '--random_seed', '7',
                     '--entity_labels', 'FAC,GPE,LOC,ORG')
    chunks, dropped = check_accounting(out, manifest)
    assert decisions(dropped) == STRATEGIES[spec]
    name = spec.partition('@')[0]
    if 'ner' in name:
        assert all(c['entities'] is not None for c in chunks)
        entities = {c['chunk_id']: c['entities'] for c in chunks}
        assert 'ORG:the little rock arsenal' in entities['arsenal.md#0']
        assert entities['kitchen.md#0'] == entities['kitchen.md#1'] == []
    if 'topics' in name:
        assert all(c['topic'] is not None for c in chunks)
    if name.startswith('similarity'):
        assert all(d['score'] >= 0.9 for d in dropped)
        # The pair strategy reports itself: edges verified, none capped, none left to gather.
        (reported,) = [f['counters'] for f in manifest['filters']]
        assert reported['verified_edges'] >= 3 and reported['capped_chunks'] == 0
        assert reported['residual_edges'] == 0
    if name == 'none':
        assert manifest['filters'] == [] and (out / 'dropped' / 'part-00000-of-00001.parquet').exists()
    else:
        n = len(STRATEGIES[spec])
        assert f'Deduplication ({name}): 8 → {8 - n} chunks' in caplog.text


@pytest.mark.parametrize('flags,message', [
    (['--filter', 'exact,exact'], 'more than once'),
    (['--filter', 'exact@0.5'], 'takes no threshold'),
    (['--minhash_num_perm', '0'], 'num_perm'),
    (['--warn_doc_loss', '1.5'], 'warn_doc_loss'),
    (['--filter', 'similarity', '--similarity_probes', '0'], 'similarity_probes'),
    (['--filter', 'ner_exact', '--entity_labels', 'ORG,NOPE'], 'NOPE'),
])
def test_bad_filter_settings_fail_before_running(redundant_corpus, tmp_path, flags, message):
    with pytest.raises(ValueError, match=message):
        build(redundant_corpus, tmp_path / 'out', *flags)
    assert not (tmp_path / 'out').exists()


def test_covered_after_the_cascade_keeps_every_sentence_in_fewer_chunks(tmp_path):
    """Overlapping windows (fixed 40/20): covered drops what the kept neighbours hold, nothing more."""
    root = tmp_path / 'long'
    root.mkdir()
    (root / 'arsenal.md').write_text(' '.join([ARSENAL, ORBIT, BEES, VOLCANO]) + '\n')
    (root / 'kitchen.md').write_text(PASTA_PARAGRAPH + ' ' + BEES + '\n')
    (root / 'copy.md').write_text(BEES + '\n')
    out = tmp_path / 'out'
    manifest = build_index.run(['--input', str(root), '--output', str(out), '--chunker', 'fixed',
                                '--chunk_size', '40', '--chunk_overlap', '20', '--filter', 'cascade,covered'])
    chunks, dropped, index = read_outputs(out)
    counts = manifest['counts']
    assert manifest['lineage']['ok'] and counts['deltas'] == 0 and index.ntotal == len(chunks)
    covered = [d for d in dropped if d['reason'].startswith('covered_')]
    assert [f['name'] for f in manifest['filters']] == ['exact', 'minhash', 'intra_doc', 'covered']
    assert len(covered) == manifest['filters'][3]['dropped'] >= counts['chunks_before_filters'] // 3
    kept = {c['chunk_id']: c for c in chunks}
    texts = {p.name: p.read_text() for p in root.iterdir()}
    for d in covered:
        keeper = kept[d['duplicate_of']]
        assert keeper['doc_id'] == d['doc_id'] and {'chunk_id': d['chunk_id'], 'doc_id': d['doc_id']} in keeper[
            'represents']
        # Every character of it, whitespace aside, is in a kept chunk of its document.
        held = {p for c in chunks if c['doc_id'] == d['doc_id'] for p in range(c['char_start'], c['char_end'])}
        text = texts[d['doc_id']]
        assert all(p in held for p in range(d['char_start'], d['char_end']) if not text[p].isspace())
