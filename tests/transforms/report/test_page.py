"""report.html: the page's sections and numbers, made from a run's files; self-contained and stable."""

import re
import shutil

import pytest

from transforms.report import page


def funnel(html):
    """`{data-funnel key: number}` of a page."""
    return {k: int(v.replace(',', '')) for k, v in re.findall(r'data-funnel="([^"]+)">([\d,]+)<', html)}


def expected_funnel(manifest):
    counts = manifest['counts']
    keys = ['files', 'documents_read', 'documents_indexed', 'chunks_before_filters', 'chunks', 'deltas']
    out = {k: counts[k] for k in keys}
    out.update({f'filter:{i}:{f["name"]}': f['after'] for i, f in enumerate(manifest['filters'])})
    out['index_rows'] = counts['chunks'] + counts['deltas']
    out.update({f'rejected:{r}': n for r, n in counts['rejected_by_reason'].items()})
    return out


@pytest.fixture(scope='module')
def run_copy(sample_root, tmp_path_factory):
    _, root = sample_root
    run = tmp_path_factory.mktemp('report') / 'r1'
    shutil.copytree(root / 'runs' / 'r1', run)
    return run


def test_the_page_holds_the_manifests_numbers(run_copy):
    import json

    path = page.write_report(str(run_copy))
    html = (run_copy / 'report.html').read_text()
    assert path.endswith('report.html')
    manifest = json.loads((run_copy / 'manifest.json').read_text())
    diff = json.loads((run_copy / 'diff.json').read_text())
    numbers = funnel(html)
    assert {k: numbers[k] for k in expected_funnel(manifest)} == expected_funnel(manifest)
    assert numbers['diff:documents_added'] == diff['documents']['added']['count'] == 7
    for section in ('funnel', 'gates', 'changes', 'rejected', 'dropped', 'deltas', 'timings', 'settings'):
        assert f'id="{section}"' in html
    assert 'data-verdict="pass"' in html and 'no previous run' in html
    assert 'missing_id' in html and 'a record without an `id`' in html  # a reason with its meaning
    assert html.count('<div class="pair">') == manifest['counts']['dropped'] == 3


def test_the_page_is_self_contained_and_the_same_bytes_every_time(run_copy):
    page.write_report(str(run_copy))
    first = (run_copy / 'report.html').read_bytes()
    page.write_report(str(run_copy))
    assert (run_copy / 'report.html').read_bytes() == first
    html = first.decode()
    assert '<script' not in html and '<link' not in html and '<img' not in html
    # The one URL is the SVG namespace, which is a name, never fetched.
    assert set(re.findall(r'https?://[^"\s<]+', html)) == {'http://www.w3.org/2000/svg'}


def test_texts_are_escaped_and_differing_words_marked():
    manifest = {
        'run_id': '<r>', 'counts': {
            'files': 1, 'documents_read': 1, 'documents_indexed': 1, 'chunks_before_filters': 2, 'chunks': 1,
            'deltas': 0, 'dropped': 1, 'rejected': 0, 'rejected_by_reason': {}, 'dropped_by_reason': {'minhash': 1}},
        'filters': [{'name': 'minhash', 'threshold': 0.8, 'before': 2, 'after': 1, 'dropped': 1}],
        'config': {'input': '<script>alert(1)</script>'}, 'seconds': {'wall': 1.5, 'read': 0.25},
    }
    sampled = {'rejected': {}, 'deltas': [], 'keepers': {'d#0': 'keep <b> this text'},
               'dropped': {'minhash': [{'chunk_id': 'd#1', 'doc_id': 'd', 'text': 'keep <i> this text',
                                        'duplicate_of': 'd#0', 'score': 0.9}]}}
    html = page.render(manifest, None, sampled)
    assert '<script>' not in html and '&lt;script&gt;' in html and 'run <code>&lt;r&gt;</code>' in html
    assert '<mark>&lt;i&gt; </mark>' in html and '<mark>&lt;b&gt; </mark>' in html
    assert 'This run has no gate verdict' in html and 'No diff.json' in html
    assert funnel(html)['filter:0:minhash'] == 1


def minimal_manifest(**counts):
    base = {'files': 1, 'documents_read': 1, 'documents_indexed': 1, 'chunks_before_filters': 1, 'chunks': 1,
            'deltas': 0, 'dropped': 0, 'rejected': 0, 'rejected_by_reason': {}, 'dropped_by_reason': {}}
    return {'run_id': 'r1', 'counts': {**base, **counts}, 'filters': [], 'config': {}, 'seconds': {}}


def test_bidi_controls_are_shown_not_obeyed():
    name = 'docs/invoice\u202etxt.exe.md'
    manifest = minimal_manifest(rejected=1, rejected_by_reason={'unsupported_type': 1})
    sampled = {'rejected': {'unsupported_type': [{'source': name, 'detail': 'odd \u2066name\u2069'}]},
               'dropped': {}, 'deltas': [], 'keepers': {}}
    html = page.render(manifest, None, sampled)
    assert not set(html) & page.BIDI_CONTROLS
    assert 'docs/invoice[U+202E]txt.exe.md' in html and 'odd [U+2066]name[U+2069]' in html


def test_ids_and_texts_are_bounded_with_an_ellipsis():
    long_id = 'x' * 100_000
    diff = {'previous_run': None,
            'documents': {'before': 0, 'after': 2, 'added': {'count': 2, 'ids': [long_id, long_id + 'y']},
                          'removed': {'count': 0, 'ids': []}, 'changed': {'count': 0, 'ids': []}},
            'chunks': {'before': 0, 'after': 2, 'added': {'count': 0, 'ids': []}, 'removed': {'count': 0, 'ids': []}},
            'kept': {'before': 0, 'after': 1, 'newly_dropped': {'count': 0, 'ids': []},
                     'newly_kept': {'count': 0, 'ids': []}}}
    manifest = minimal_manifest(dropped=1, dropped_by_reason={'exact': 1})
    text = 'word ' * 20_000
    sampled = {'rejected': {}, 'deltas': [], 'keepers': {'d#0': text},
               'dropped': {'exact': [{'chunk_id': long_id, 'doc_id': 'd', 'text': text, 'duplicate_of': 'd#0',
                                      'score': None}]}}
    html = page.render(manifest, diff, sampled)
    assert len(html) < 30_000, len(html)
    assert html.count('x' * (page.SHOWN_CHARS - 1) + '\u2026') == 3  # both ids in the diff, the dropped chunk's
    assert 'x' * page.SHOWN_CHARS not in html
    assert html.count('word ' * 10) and ('word ' * (page.TEXT_CHARS // 5 + 1)) not in html


def test_a_directory_without_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match='not a complete ragsieve run'):
        page.write_report(str(tmp_path))
    (tmp_path / 'manifest.json').write_text('{not json')
    with pytest.raises(ValueError, match='manifest.json is corrupt'):
        page.write_report(str(tmp_path))


def test_flatten_settings():
    assert page.flatten({'b': {'y': 1, 'x': [1]}, 'a': None}) == [('a', 'null'), ('b.x', '[1]'), ('b.y', '1')]
