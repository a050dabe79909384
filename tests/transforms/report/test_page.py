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


def test_a_directory_without_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match='not a complete ragsieve run'):
        page.write_report(str(tmp_path))
    (tmp_path / 'manifest.json').write_text('{not json')
    with pytest.raises(ValueError, match='manifest.json is corrupt'):
        page.write_report(str(tmp_path))


def test_flatten_settings():
    assert page.flatten({'b': {'y': 1, 'x': [1]}, 'a': None}) == [('a', 'null'), ('b.x', '[1]'), ('b.y', '1')]
