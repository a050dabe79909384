"""`ragsieve report`, and the sample corpus's report rendered in a real headless Chromium."""

import json
import re
import shutil

import pytest

from pipelines import cli
from tests.helpers import NO_CHROMIUM, find_chromium, run_chromium


@pytest.fixture
def root_copy(sample_root, tmp_path):
    _, root = sample_root
    shutil.copytree(root, tmp_path / 'root')
    return tmp_path / 'root'


def test_report_writes_the_same_page_the_build_wrote(root_copy, capsys):
    page = root_copy / 'runs' / 'r1' / 'report.html'
    built = page.read_bytes()
    page.unlink()
    assert cli.main(['report', str(root_copy / 'runs' / 'r1')]) == 0
    assert page.read_bytes() == built
    assert 'wrote' in capsys.readouterr().out
    page.unlink()
    assert cli.main(['report', str(root_copy)]) == 0  # a versioned root: its LATEST run
    assert page.read_bytes() == built


def test_report_of_no_run_is_a_clear_error(tmp_path, capsys):
    assert cli.main(['report', str(tmp_path)]) == 2
    assert 'not a complete ragsieve run' in capsys.readouterr().err


def dom_numbers(dom: str) -> dict:
    return {k: int(v.replace(',', '')) for k, v in re.findall(r'data-funnel="([^"]+)">([\d,]+)<', dom)}


def test_the_report_renders_in_chromium_with_the_manifests_numbers(sample_root, tmp_path):
    chromium = find_chromium()
    if chromium is None:
        pytest.skip(NO_CHROMIUM)
    _, root = sample_root
    run = root / 'runs' / 'r1'
    manifest = json.loads((run / 'manifest.json').read_text())
    url = (run / 'report.html').as_uri()

    dom, console = run_chromium(chromium, url, tmp_path / 'profile', '--dump-dom')
    assert console == []
    numbers = dom_numbers(dom)
    counts = manifest['counts']
    assert [numbers[k] for k in ('files', 'documents_read', 'documents_indexed', 'chunks_before_filters',
                                 'chunks', 'deltas')] == [
        counts[k] for k in ('files', 'documents_read', 'documents_indexed', 'chunks_before_filters', 'chunks',
                            'deltas')] == [6, 7, 7, 36, 33, 0]
    assert [numbers[f'filter:{i}:{f["name"]}'] for i, f in enumerate(manifest['filters'])] == [
        f['after'] for f in manifest['filters']]
    assert numbers['index_rows'] == counts['chunks'] + counts['deltas']

    shot = tmp_path / 'report.png'
    _, console = run_chromium(chromium, url, tmp_path / 'profile', f'--screenshot={shot}', '--window-size=1100,1400')
    assert console == [] and shot.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_console_errors_are_caught(tmp_path):
    # The check above is only worth something if a page's error does reach it.
    chromium = find_chromium()
    if chromium is None:
        pytest.skip(NO_CHROMIUM)
    bad = tmp_path / 'bad.html'
    bad.write_text('<!DOCTYPE html><p>x</p><script>console.error("broken page")</script>')
    _, console = run_chromium(chromium, bad.as_uri(), tmp_path / 'profile', '--dump-dom')
    assert len(console) == 1 and 'broken page' in console[0]
