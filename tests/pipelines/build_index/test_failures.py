"""Failures while a build runs (a full disk, an index type the corpus is too small for): one line, exit 2.

Each ends as one line on stderr naming what failed, exit status 2, no
traceback, and the index published before is left as it was.
"""

import hashlib
import os
import shutil
import subprocess
import sys

import pytest

from pipelines import cli
from pipelines.common import exits
from tests.helpers import ORBITS, PASTA, REPO, fill_disk

FLAGS = ['--chunk_size', '64', '--filter', 'exact']


@pytest.fixture(scope='module')
def published(tmp_path_factory):
    """A corpus, its published index and its feature cache."""
    root = tmp_path_factory.mktemp('published')
    corpus = root / 'corpus'
    corpus.mkdir()
    (corpus / 'pasta.txt').write_text(PASTA * 4)
    (corpus / 'orbits.md').write_text(ORBITS * 4)
    assert cli.main(['build', '--input', str(corpus), '--output', str(root / 'out'), '--cache',
                     str(root / 'cache'), *FLAGS]) == 0
    return root


def tree(directory):
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob('*')) if p.is_file()}


@pytest.fixture
def copy(published, tmp_path):
    for name in ('corpus', 'out', 'cache'):
        shutil.copytree(published / name, tmp_path / name)
    return tmp_path


def build_argv(root, *flags):
    return ['build', '--input', str(root / 'corpus'), '--output', str(root / 'out'), '--cache',
            str(root / 'cache'), *FLAGS, *flags]


@pytest.mark.parametrize('marker', [
    '/chunks/part-',      # WriteIndex/WriteChunks
    '/documents/part-',   # WriteIndex/WriteDocuments
    '/cache/embedding/',  # WriteFeatureCache
    '/index/index.faiss',  # BuildIndexes
    '/manifest.json',     # the launcher, after the pipeline
])
def test_a_full_disk_is_one_line_naming_the_file_and_the_published_index_stays(copy, monkeypatch, capsys, caplog,
                                                                              marker):
    before = tree(copy / 'out')
    fill_disk(monkeypatch, marker)
    assert cli.main(build_argv(copy)) == exits.FAILED
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith('ragsieve build: error: cannot write ') and marker in last, err
    assert last.endswith(': No space left on device (ENOSPC)') and 'Traceback' not in err, err
    assert not [r.getMessage() for r in caplog.records if r.exc_info]
    monkeypatch.undo()
    assert tree(copy / 'out') == before
    assert sorted(p.name for p in copy.iterdir()) == ['.out.lock', 'cache', 'corpus', 'out']


def test_a_full_disk_in_a_fresh_process_prints_no_traceback(copy):
    # As a user's terminal sees it: every log line and the error line, in a new process.
    done = subprocess.run(
        [sys.executable, '-c', 'import sys; from tests import helpers; '
         'sys.exit(helpers.main_on_full_disk(sys.argv[1], sys.argv[2:]))', '/chunks/part-', *build_argv(copy)],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert 'Traceback' not in done.stderr, done.stderr[-3000:]
    last = done.stderr.splitlines()[-1]
    assert last.startswith('ragsieve build: error: cannot write ') and '/chunks/part-' in last, done.stderr[-3000:]
    assert [line for line in done.stderr.splitlines() if line.startswith('ERROR') or 'error:' in line] == [last]


def test_an_index_type_too_large_for_the_corpus_is_one_line_without_a_traceback(copy, capsys, caplog):
    before = tree(copy / 'out')
    assert cli.main(build_argv(copy, '--index_type', 'IVF4096,PQ8')) == exits.FAILED
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "ragsieve build: error: cannot train a 'IVF4096,PQ8' index on the 6 vectors of this corpus (it needs at "
        'least 4096); choose a smaller index type for it, e.g. Flat or HNSW32'), err
    assert 'Traceback' not in err and not [r.getMessage() for r in caplog.records if r.exc_info]
    assert tree(copy / 'out') == before


# --- a damaged previous build ----------------------------------------------------------


def junk(path):
    path.write_bytes(b'PAR1 junk, not what a build wrote')


def delete_parts(directory):
    for part in directory.glob('part-*.parquet'):
        part.unlink()


@pytest.mark.parametrize('damage,named', [
    (lambda out: junk(out / 'documents' / 'part-00000-of-00001.parquet'), 'documents/part-00000-of-00001.parquet'),
    # An emptied directory is a missing one, as on an object store.
    (lambda out: delete_parts(out / 'chunks'), 'chunks is missing'),
])
def test_a_damaged_previous_output_is_warned_of_and_replaced(copy, caplog, damage, named):
    import json

    damage(copy / 'out')
    assert cli.main(build_argv(copy)) == exits.OK
    warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING' and 'cannot be read' in r.getMessage()]
    assert len(warnings) == 1 and str(copy / 'out' / named) in warnings[0], warnings
    diff = json.loads((copy / 'out' / 'diff.json').read_text())
    assert diff['previous_run'] is None and diff['documents']['added']['count'] == 2
    assert sorted(p.name for p in copy.iterdir()) == ['.out.lock', 'cache', 'corpus', 'out']


def test_a_damaged_latest_run_is_passed_over_for_the_last_readable_one(tmp_path, caplog):
    import json

    corpus = tmp_path / 'corpus'
    corpus.mkdir()
    (corpus / 'pasta.txt').write_text(PASTA * 4)
    argv = ['build', '--input', str(corpus), '--output', str(tmp_path / 'root'), '--versioned', *FLAGS]
    for run_id in ('r1', 'r2'):
        assert cli.main([*argv, '--run_id', run_id]) == exits.OK
    junk(tmp_path / 'root' / 'runs' / 'r2' / 'documents' / 'part-00000-of-00001.parquet')
    (corpus / 'orbits.md').write_text(ORBITS * 4)
    caplog.clear()
    assert cli.main([*argv, '--run_id', 'r3']) == exits.OK
    assert (tmp_path / 'root' / 'LATEST').read_text() == 'r3\n'
    diff = json.loads((tmp_path / 'root' / 'runs' / 'r3' / 'diff.json').read_text())
    assert diff['previous_run'] == 'r1' and diff['documents']['added']['ids'] == ['orbits.md']
    assert 'the run LATEST names cannot be read, so diff.json compares with run r1' in caplog.text


def test_a_damaged_feature_cache_is_passed_over_and_computed_again(copy, caplog):
    [part] = (copy / 'cache' / 'embedding').glob('*/*/part-*.parquet')
    junk(part)
    assert cli.main(build_argv(copy)) == exits.OK
    assert f'a feature cache generation cannot be read, so it is not used: {part}' in caplog.text


def test_a_stdout_gone_before_the_summary_leaves_the_build_published_and_exit_0(copy):
    # stdout piped to a logger that died: the summary's print meets a broken pipe after publishing.
    read_end, write_end = os.pipe()
    os.close(read_end)
    done = subprocess.run([sys.executable, '-m', 'pipelines.build_index', *build_argv(copy)[1:],
                           '--versioned', '--run_id', 'r1', '--output', str(copy / 'root')],
                          cwd=REPO, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=600)
    os.close(write_end)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'Traceback' not in done.stderr and 'Broken pipe' not in done.stderr, done.stderr[-3000:]
    assert (copy / 'root' / 'LATEST').read_text().strip() == 'r1'


def test_printing_a_result_line_never_raises(monkeypatch):
    class Gone:
        def write(self, text):
            raise BrokenPipeError(32, 'Broken pipe')

        def flush(self):
            raise BrokenPipeError(32, 'Broken pipe')

        def fileno(self):
            raise ValueError('no file')

    monkeypatch.setattr(sys, 'stdout', Gone())
    exits.say('ragsieve build: published')  # no error
    exits.say('again')
