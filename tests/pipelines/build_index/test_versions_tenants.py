"""Dedup across versions and tenants, end to end: deltas, scope, lineage, --where, rebuild.

The corpus: one page (a Unicode paragraph and a sockets paragraph) in three
releases for two tenants. 3.12 changes "Unicode 15.0.0" to "15.1.0", 3.13
also adds a bullet; tenant b's copy differs by two words. Built with
`--dedup_scope tenant`, so each tenant keeps its own copies.
"""

import json
import shutil

import pyarrow.parquet as pq
import pytest

from pipelines import query
from pipelines.build_index import job as build_index
from tests.helpers import PASTA_AGAIN, PASTA_PARAGRAPH, wrapped_release
from transforms.lineage.sentences import sentence_spans
from transforms.output import snapshots
from transforms.query.retrieval import RetrievalConfig
from transforms.query.retriever import Retriever
from transforms.text import normalize_text

UNICODE = (
    'The text module of the standard library follows the Unicode Standard, version 15.0.0, for every '
    'character property it reports. Normalization with the NFC, NFD, NFKC and NFKD forms is implemented '
    'exactly as the standard annex specifies, and case folding uses the full mapping tables including '
    'the special casing rules.\n'
    '- Grapheme cluster boundaries follow the extended rules of the segmentation annex.\n'
    '- East Asian width values come from the data file shipped with the standard.'
)
BULLET = '\n- Bidirectional text is reordered with the paragraph level algorithm of the annex.'
SOCKETS = (
    'The socket module gives access to the operating system networking interface. A socket is created '
    'with an address family and a socket type, then bound to an address and port before it listens for '
    'incoming connections. Timeouts can be set on each socket, and a closed socket releases its file '
    'descriptor at once.'
)
RELEASES = ('3.11', '3.12', '3.13')
TENANTS = ('a', 'b')
SOCKET_QUESTION = 'When does a closed socket release its file descriptor?'
FLAGS = ['--chunk_size', '128', '--dedup_scope', 'tenant']


def page(tenant, release):
    text = UNICODE if release == '3.11' else UNICODE.replace('15.0.0', '15.1.0')
    if release == '3.13':
        text += BULLET
    text += '\n\n' + SOCKETS
    return text if tenant == 'a' else text.replace('standard library', 'vendor runtime')


def write_corpus(root):
    root.mkdir(parents=True)
    for t in TENANTS:
        for r in RELEASES:
            record = {'id': f'{t}-{r}', 'text': page(t, r), 'metadata': {'tenant': t, 'release': r}}
            (root / f'{t}-{r}.jsonl').write_text(json.dumps(record) + '\n')


def build(corpus, out, *flags):
    return build_index.run(['--input', str(corpus), '--output', str(out), *FLAGS, *flags])


@pytest.fixture(scope='module')
def versioned(tmp_path_factory):
    """A versioned root whose first run indexes every release of both tenants."""
    root = tmp_path_factory.mktemp('versions')
    write_corpus(root / 'corpus')
    manifest = build(root / 'corpus', root / 'index', '--versioned', '--run_id', 'r1')
    return root, snapshots.run_dir(str(root / 'index'), 'r1'), manifest


@pytest.fixture(scope='module')
def retriever(versioned, embedding_model):
    return Retriever(versioned[1], model=embedding_model)


def tenant_of(doc_id):
    return doc_id.split('-')[0]


def rows(directory, name):
    return pq.read_table(f'{directory}/{name}').to_pylist()


def test_every_sentence_of_every_release_is_in_a_kept_chunk_or_a_delta(versioned, tmp_path):
    root, run, manifest = versioned
    chunks = rows(run, 'chunks')
    texts = {t: [normalize_text(c['text']) for c in chunks if tenant_of(c['doc_id']) == t] for t in TENANTS}
    for t in TENANTS:
        for r in RELEASES:
            text = page(t, r)
            for s, e in sentence_spans(text):
                assert any(normalize_text(text[s:e]) in c for c in texts[t]), (t, r, text[s:e])
    assert manifest['counts']['deltas'] == 4 and manifest['counts']['chunks'] == 4
    assert manifest['lineage']['ok'] and manifest['lineage']['represented_once'] == 8
    deltas = [c for c in chunks if c['kind'] == 'delta']
    assert {c['delta_of'] for c in deltas} == {'a-3.11#0', 'b-3.11#0'}
    # --deltas off is the previous behaviour: the 15.1.0 sentence and the new bullet are gone.
    off = build(root / 'corpus', tmp_path / 'off', '--deltas', 'off')
    assert off['counts']['deltas'] == 0 and off['counts']['chunks'] == 4
    kept = ' '.join(normalize_text(c['text']) for c in rows(tmp_path / 'off', 'chunks'))
    assert '15.1.0' not in kept and 'bidirectional' not in kept


def test_nothing_crosses_a_tenant_boundary(versioned, retriever):
    _, run, _ = versioned
    by_id = {c['chunk_id']: c for c in rows(run, 'chunks')}
    for d in rows(run, 'dropped'):
        assert tenant_of(d['duplicate_of']) == tenant_of(d['doc_id'])
    for c in by_id.values():
        assert {tenant_of(r['doc_id']) for r in c['represents']} <= {tenant_of(c['doc_id'])}
        if c['delta_of']:
            assert tenant_of(c['delta_of']) == tenant_of(c['doc_id'])
    for t in TENANTS:
        result = retriever.search(SOCKET_QUESTION, k=5, where={'tenant': t})
        assert result.hits and {tenant_of(h.doc_id) for h in result.hits} == {t}
        assert all(tenant_of(d) == t for h in result.hits for d in h.matched_by)


def test_a_release_restricted_question_finds_a_copy_kept_from_another_release(retriever):
    result = retriever.search(SOCKET_QUESTION, k=1, where={'release': '3.13', 'tenant': 'a'})
    hit = result.hits[0]
    assert (hit.chunk_id, hit.matched_by) == ('a-3.11#1', ['a-3.13'])
    # The 3.12 question about the Unicode version finds the 3.12 delta (15.1.0), matched by its own document.
    result = retriever.search('Which Unicode version does the text module follow?', k=3,
                              where={'release': ['3.12'], 'tenant': 'a'})
    delta = next(h for h in result.hits if '15.1.0' in h.text)
    assert delta.chunk_id == 'a-3.12#0~delta0' and delta.matched_by == ['a-3.12']
    # The 3.13 copy of that sentence was merged into the 3.12 delta, which represents it.
    result = retriever.search('Which Unicode version does the text module follow?', k=3,
                              where={'release': '3.13', 'tenant': 'a'})
    assert ('a-3.12#0~delta0', ['a-3.13']) in [(h.chunk_id, h.matched_by) for h in result.hits]
    assert retriever.search(SOCKET_QUESTION, k=3, where={'release': '9.99'}).hits == []


def test_query_cli_where_flags(versioned, embedding_model, capsys):
    _, run, _ = versioned
    query.run(['--index', run, '--json', '--k', '1', '--where', 'release=3.13', '--where', 'release=3.12',
               '--where', 'tenant=b', SOCKET_QUESTION], model=embedding_model)
    (hit,) = json.loads(capsys.readouterr().out)
    assert (hit['chunk_id'], hit['matched_by']) == ('b-3.11#1', ['b-3.12', 'b-3.13'])
    with pytest.raises(ValueError, match='key=value'):
        query.run(['--index', run, '--where', 'tenant', SOCKET_QUESTION], model=embedding_model)


def test_rebuild_without_the_kept_copy_keeps_it_from_a_remaining_release(versioned, embedding_model, tmp_path):
    root, _, _ = versioned
    corpus = tmp_path / 'corpus'
    shutil.copytree(root / 'corpus', corpus)
    for t in TENANTS:
        (corpus / f'{t}-3.11.jsonl').unlink()
    index = tmp_path / 'index'
    shutil.copytree(root / 'index', index)
    # A third of the documents removed on purpose: the default publish gates would refuse it.
    manifest = build(corpus, index, '--versioned', '--run_id', 'r2', '--gates', 'off')
    run = snapshots.run_dir(str(index), 'r2')
    by_id = {c['chunk_id']: c for c in rows(run, 'chunks')}
    assert manifest['lineage']['ok']
    assert by_id['a-3.12#1']['represents'] == [{'chunk_id': 'a-3.13#1', 'doc_id': 'a-3.13'}]
    assert by_id['a-3.12#0']['kind'] == 'chunk'
    # Against the 3.12 keeper, only the new bullet of 3.13 is news.
    (delta,) = [c for c in by_id.values() if c['doc_id'] == 'a-3.13' and c['kind'] == 'delta']
    assert delta['text'] == BULLET.strip() and delta['delta_of'] == 'a-3.12#0'
    assert not any(c['doc_id'].endswith('3.11') for c in by_id.values())
    hit = Retriever(str(index), model=embedding_model).search(
        SOCKET_QUESTION, k=1, where={'release': '3.13', 'tenant': 'a'}).hits[0]
    assert (hit.chunk_id, hit.matched_by) == ('a-3.12#1', ['a-3.13'])


def test_the_filter_is_applied_inside_the_search(versioned, embedding_model):
    """With one candidate per signal, a post-filter would find nothing for the tenant ranked second."""
    _, run, _ = versioned
    narrow = Retriever(run, RetrievalConfig(candidates=1), model=embedding_model)
    unfiltered = narrow.search(SOCKET_QUESTION, k=1).hits[0]
    other = 'b' if tenant_of(unfiltered.doc_id) == 'a' else 'a'
    (hit,) = narrow.search(SOCKET_QUESTION, k=1, where={'tenant': other}).hits
    assert hit.chunk_id == f'{other}-3.11#1'


def test_lineage_follows_the_cascade(tmp_path):
    """minhash drops the copy for kitchen.md#1, which intra_doc then drops for kitchen.md#0."""
    corpus = tmp_path / 'corpus'
    corpus.mkdir()
    (corpus / 'kitchen.md').write_text(PASTA_PARAGRAPH + '\n\n' + PASTA_AGAIN + '\n')
    (corpus / 'kitchen_copy.md').write_text(PASTA_AGAIN.replace('grated', 'grates') + '\n')
    manifest = build_index.run(['--input', str(corpus), '--output', str(tmp_path / 'out'), '--chunk_size', '100'])
    dropped = {d['chunk_id']: (d['reason'], d['duplicate_of']) for d in rows(tmp_path / 'out', 'dropped')}
    assert dropped == {'kitchen_copy.md#0': ('minhash', 'kitchen.md#1'),
                       'kitchen.md#1': ('intra_doc_near', 'kitchen.md#0')}
    by_id = {c['chunk_id']: c for c in rows(tmp_path / 'out', 'chunks')}
    assert by_id['kitchen.md#0']['represents'] == [
        {'chunk_id': 'kitchen.md#1', 'doc_id': 'kitchen.md'},
        {'chunk_id': 'kitchen_copy.md#0', 'doc_id': 'kitchen_copy.md'}]
    assert manifest['lineage']['ok'] and manifest['lineage']['represented_once'] == 2
    assert {c['delta_of'] for c in by_id.values() if c['kind'] == 'delta'} == {'kitchen.md#0'}


WRAPPED_SOCKETS = (
    'The socket module gives access to the operating system networking\n'
    'interface. A socket is created with an address family and a socket type,\n'
    'then bound to an address and port before it listens for incoming\n'
    'connections. Timeouts can be set on each socket, and a closed socket\n'
    'releases its file descriptor at once.\n'
)


def wrapped_page(release):
    """Three releases of a page hard-wrapped at ~75 characters: 3.12 moves to Unicode 15.1.0, 3.13 adds a bullet."""
    return wrapped_release('15.0.0' if release == '3.11' else '15.1.0', bullet=release == '3.13') + '\n' + WRAPPED_SOCKETS


def test_hard_wrapped_releases_lose_no_sentence(tmp_path):
    corpus = tmp_path / 'corpus'
    corpus.mkdir()
    for r in RELEASES:
        record = {'id': f'page-{r}', 'text': wrapped_page(r), 'metadata': {'release': r}}
        (corpus / f'{r}.jsonl').write_text(json.dumps(record) + '\n')
    # Chunks of 48 tokens: the chunker cuts the wrapped sentences at line breaks.
    flags = ['--input', str(corpus), '--chunk_size', '48']
    manifest = build_index.run([*flags, '--output', str(tmp_path / 'on')])
    chunks, dropped = rows(tmp_path / 'on', 'chunks'), rows(tmp_path / 'on', 'dropped')
    assert manifest['counts']['dropped_by_reason']['minhash'] and manifest['counts']['deltas']
    # Every sentence that some chunk of the unfiltered corpus (kept or dropped here) holds whole is whole in a row.
    rows_text = [normalize_text(c['text']) for c in chunks]
    for c in chunks + dropped:
        if c.get('kind') == 'delta':
            continue
        for s, e in sentence_spans(c['text']):
            sentence = normalize_text(c['text'][s:e])
            assert any(sentence in row for row in rows_text), (c['chunk_id'], sentence)
    # Each delta is whole sentences of its own document, subject included.
    pages = {f'page-{r}': wrapped_page(r) for r in RELEASES}
    deltas = [c for c in chunks if c['kind'] == 'delta']
    for d in deltas:
        assert pages[d['doc_id']][d['char_start']:d['char_end']] == d['text']
    by_id = {d['chunk_id']: d for d in dropped}
    (delta,) = [d for d in deltas if '15.1.0' in d['text']]
    # The chunk it comes from starts inside the sentence: the delta starts where the sentence does.
    assert delta['text'].startswith('A non-normative HTML file listing all\nvalid')
    assert delta['char_start'] < by_id[delta['chunk_id'].split('~')[0]]['char_start']
    audit = manifest['lossless']
    assert audit['sentences_checked'] > 0 and audit['chunks_checked'] == len(dropped)
    assert (audit['sentences_lost'], audit['examples'], audit['chunks_without_keeper']) == (0, [], 0)
    assert not (tmp_path / 'on' / 'lossless.json').exists()
    # With --deltas off the audit reports what the drops lost, the 15.1.0 sentence among it.
    off = build_index.run([*flags, '--output', str(tmp_path / 'off'), '--deltas', 'off'])['lossless']
    assert off['sentences_checked'] == audit['sentences_checked'] and off['sentences_lost'] > 0
    assert any('15.1.0' in x['text'] for x in off['examples'])
