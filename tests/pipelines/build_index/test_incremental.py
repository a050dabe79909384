"""Nightly rebuilds on the DirectRunner with the real models: versions, reuse, failure safety."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.build_index import job as build_index
from pipelines.build_index import manifest as build_manifest
from tests.helpers import REPO, flip_pages, rewrite_values
from transforms.features import cache as feature_cache, kernels
from transforms.features.cache_settings import CacheSpec
from transforms.output import publish, snapshots, tables
from transforms.query.retriever import Retriever, check_index_dir

# exact, minhash and ner_exact use every cached feature: spans, embedding, minhash, entities.
FLAGS = ['--chunk_size', '64', '--filter', 'exact,minhash,ner_exact']
# Everything a build writes except its manifest.json and diff.json (times, run ids).
DATA_DIRS = [tables.CHUNKS_DIR, tables.DROPPED_DIR, tables.REJECTED_DIR, tables.DOCUMENTS_DIR,
             tables.INDEX_DIR, tables.BM25_DIR]


def build(corpus, out, *flags):
    return build_index.run(['--input', str(corpus), '--output', str(out), *FLAGS, *flags])


def edit(corpus: Path) -> None:
    """A night's changes: one document edited at its end, one added."""
    with open(corpus / 'sub' / 'orbits.md', 'a') as f:
        f.write('\n\nGeostationary satellites sit 35,786 km above the equator over Quito.\n')
    (corpus / 'added.txt').write_text('Ada Lovelace wrote the first program for the Analytical Engine in London.')


def data_files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for d in DATA_DIRS for p in sorted((directory / d).rglob('*')) if p.is_file()
    }


def incomplete_leftovers(root: Path) -> list:
    _, runs = snapshots.list_runs(str(root))
    return runs + feature_cache.split_generations(
        (str(p), p.stat().st_mtime) for p in (root / 'cache').glob('*/*/*/*'))[1]


def forge_other_kernels(cache: Path) -> None:
    """Makes the cached embeddings look computed by another kernel family (another CPU's probe digest).

    A forged digest, not another CPU: the unit under test is the cache's key,
    not the model's arithmetic.
    """
    [directory] = (cache / 'embedding').iterdir()
    settings = json.loads((directory / feature_cache.SETTINGS_FILE).read_text())
    settings['kernels'] = 'f' * 32
    moved = directory.parent / CacheSpec('embedding', settings).settings_id
    directory.rename(moved)
    (moved / feature_cache.SETTINGS_FILE).write_text(json.dumps(settings))


def test_a_cache_of_another_kernel_family_is_embedded_again_never_mixed(corpus_dir, tmp_path, caplog):
    corpus, _ = corpus_dir
    root = tmp_path / 'root'
    build(corpus, root, '--versioned', '--run_id', 'r1')
    forge_other_kernels(root / 'cache')

    second = build(corpus, root, '--versioned', '--run_id', 'r2')
    embedding = second['cache']['features']['embedding']
    assert embedding['hits'] == 0 and embedding['computed'] == second['counts']['chunks_embedded'] > 0
    said = [r.getMessage() for r in caplog.records if 'holds embeddings of other kernels' in r.getMessage()]
    assert len(said) == 1 and 'f' * 32 in said[0] and second['kernels']['probe'] in said[0]
    assert data_files(root / 'runs' / 'r2') == data_files(root / 'runs' / 'r1')


def test_a_cache_of_the_other_kernels_mode_is_read_only_where_its_bits_are_this_modes(corpus_dir, tmp_path, caplog):
    # A default that changes (kernels.FASTEST) meets a cache of the mode before it: the probe digest decides.
    corpus, _ = corpus_dir
    other = kernels.NATIVE if kernels.DEFAULT_MODE == kernels.PORTABLE else kernels.PORTABLE
    root = tmp_path / 'root'
    # Kernels are pinned at a process's start: the other mode's build runs in a process of its own.
    subprocess.run([sys.executable, '-m', 'pipelines.build_index', '--input', str(corpus), '--output', str(root),
                    *FLAGS, '--versioned', '--run_id', 'r1', '--embed_kernels', other, '--progress', 'none'],
                   cwd=REPO, check=True, capture_output=True, timeout=600)
    first = json.loads((root / 'runs' / 'r1' / 'manifest.json').read_text())

    second = build(corpus, root, '--versioned', '--run_id', 'r2')
    embedding = second['cache']['features']['embedding']
    said = [r.getMessage() for r in caplog.records if 'holds embeddings of other kernels' in r.getMessage()]
    if first['kernels']['probe'] == second['kernels']['probe']:  # one kernel family (an AVX2-only CPU)
        assert embedding['computed'] == 0 and not said
    else:  # another family (AVX-512, AMX): embedded again, saying so
        assert embedding['hits'] == 0 and embedding['computed'] > 0 and len(said) == 1
        # Where the default runs fp32 on OpenVINO (precision.FASTEST_FP32), the line names both backends.
        if second['embedding']['backend'] != 'torch':
            assert 'on torch; this build computes' in said[0] and '--embed_backend torch reads them' in said[0]
    build(corpus, tmp_path / 'fresh')
    assert data_files(root / 'runs' / 'r2') == data_files(tmp_path / 'fresh')


def test_rebuild_reuses_unchanged_work_and_equals_a_fresh_build(corpus_dir, tmp_path):
    corpus, _ = corpus_dir
    root = tmp_path / 'root'
    first = build(corpus, root, '--versioned', '--run_id', 'r1')
    assert (root / 'LATEST').read_text() == 'r1\n'
    assert all(c['hits'] == 0 for c in first['cache']['features'].values())
    edit(corpus)

    second = build(corpus, root, '--versioned', '--run_id', 'r2')
    assert (root / 'LATEST').read_text() == 'r2\n'
    total = second['counts']['chunks_before_filters']
    features = dict(second['cache']['features'])
    # Spans are cached per document: only the edited and the added one are chunked again.
    spans = features.pop('spans')
    assert (spans['hits'], spans['misses']) == (second['counts']['documents_indexed'] - 2, 2)
    assert set(features) == {'embedding', 'minhash', 'entities'}
    for use in features.values():
        assert use['hits'] + use['misses'] == total
        # Computed: the added document and the edited end of orbits.md. Misses
        # also count chunks dropped before a feature's first use: never computed.
        assert 0 < use['computed'] <= 3 and use['computed'] <= use['misses']
    assert second['counts']['chunks_embedded'] == features['embedding']['computed']

    report = json.loads((root / 'runs' / 'r2' / build_manifest.DIFF_FILE).read_text())
    assert report['previous_run'] == 'r1' and report['run_id'] == 'r2'
    assert report['documents']['added']['ids'] == ['added.txt']
    assert report['documents']['changed']['ids'] == ['sub/orbits.md']
    assert report['documents']['removed']['count'] == 0
    assert report['chunks']['added']['count'] == features['embedding']['computed']
    assert report['cache'] == second['cache']['features']

    fresh = build(corpus, tmp_path / 'fresh', '--cache', feature_cache.NO_CACHE)
    # No filter of FLAGS needs embeddings: only the kept chunks are embedded, at the end.
    counts = fresh['counts']
    assert fresh['cache'] is None and counts['chunks_embedded'] == counts['chunks'] < total
    assert counts['embeddings_saved'] == total - counts['chunks'] == counts['dropped']
    assert data_files(root / 'runs' / 'r2') == data_files(tmp_path / 'fresh')

    retriever = Retriever(str(root))
    assert retriever.index == str(root / 'runs' / 'r2')

    # Retention: with --keep_runs 1 (and no grace period) only the new run survives; one cache generation.
    build(corpus, root, '--versioned', '--run_id', 'r3', '--keep_runs', '1', '--prune_grace_seconds', '0')
    assert snapshots.list_runs(str(root)) == (['r3'], [])
    assert all(len(list(d.iterdir())) == 2 for d in (root / 'cache').glob('*/*'))  # settings.json + r3


def test_plain_output_with_a_cache_directory(corpus_dir, tmp_path):
    corpus, _ = corpus_dir
    build(corpus, tmp_path / 'out', '--cache', str(tmp_path / 'cache'))
    again = build(corpus, tmp_path / 'out', '--cache', str(tmp_path / 'cache'))
    assert again['counts']['chunks_embedded'] == 0
    assert json.loads((tmp_path / 'out' / build_manifest.DIFF_FILE).read_text())['chunks']['added']['count'] == 0


def test_flags_are_checked():
    with pytest.raises(ValueError, match='--run_id needs --versioned'):
        build_index.run(['--input', 'x', '--output', 'y', '--run_id', 'r1'])
    with pytest.raises(ValueError, match='keep_runs'):
        build_index.run(['--input', 'x', '--output', 'y', '--versioned', '--keep_runs', '0'])


# Where the build kills itself (see `write.checkpoint`). A run deletes the
# debris of the killed run before it, so those that leave debris come last.
KILL_POINTS = ['before_pipeline', 'after_manifest', 'after_cache_commit', 'after_latest',
               'chunks_written', 'after_pipeline']
LEAVES_DEBRIS = {'after_manifest', 'chunks_written', 'after_pipeline'}


def test_killed_builds_leave_the_published_index_intact(corpus_dir, tmp_path):
    corpus, _ = corpus_dir
    root = tmp_path / 'root'
    build(corpus, root, '--versioned', '--run_id', 'r0')
    published = data_files(root / 'runs' / 'r0')
    edit(corpus)
    latest = 'r0'
    for point in KILL_POINTS:
        proc = subprocess.run(
            [sys.executable, '-m', 'pipelines.build_index', '--input', str(corpus), '--output', str(root),
             '--versioned', '--run_id', f'killed-{point}', *FLAGS],
            cwd=REPO, env={**os.environ, publish.KILL_AT_ENV: point}, capture_output=True, text=True)
        assert proc.returncode == -9, (point, proc.stderr[-2000:])
        # Only a run killed after it moved LATEST is published, and then it is complete.
        if point == 'after_latest':
            latest = f'killed-{point}'
        assert snapshots.read_latest(str(root)) == latest, point
        check_index_dir(snapshots.resolve_index(str(root)))
        assert data_files(root / 'runs' / 'r0') == published
        assert bool(incomplete_leftovers(root)) == (point in LEAVES_DEBRIS), point

    final = build(corpus, root, '--versioned', '--run_id', 'r9')
    assert incomplete_leftovers(root) == []  # the next run deleted the debris
    assert not list(root.glob('LATEST.tmp-*'))
    assert (root / 'LATEST').read_text() == 'r9\n'
    # The cache generations of the runs killed after their commit are reused, not redone.
    assert final['counts']['chunks_embedded'] == 0
    build(corpus, tmp_path / 'fresh', '--cache', feature_cache.NO_CACHE)
    assert data_files(root / 'runs' / 'r9') == data_files(tmp_path / 'fresh')


def test_semantic_rebuild_reuses_spans_and_embeds_nothing(corpus_dir, tmp_path):
    corpus, _ = corpus_dir
    flags = ['--chunker', 'cluster_semantic', '--chunk_size', '64', '--filter', 'exact']
    first = build_index.run(['--input', str(corpus), '--output', str(tmp_path / 'root'), '--versioned', *flags])
    second = build_index.run(['--input', str(corpus), '--output', str(tmp_path / 'root'), '--versioned', *flags])
    assert first['cache']['features']['spans']['hits'] == 0
    assert second['cache']['features']['spans']['misses'] == 0
    assert second['counts']['chunks_embedded'] == 0
    assert data_files(tmp_path / 'root' / 'runs' / first['run_id']) == data_files(
        tmp_path / 'root' / 'runs' / second['run_id'])


def test_a_damaged_cache_costs_time_never_a_wrong_value(corpus_dir, tmp_path, caplog):
    corpus, _ = corpus_dir
    cache = tmp_path / 'cache'
    build(corpus, tmp_path / 'warm', '--cache', str(cache))
    # Wrong values in a part that still decodes (the checksums as written), and pages that no longer decode.
    [embeddings] = cache.glob('embedding/*/*/part-*.parquet')
    keys = iter(range(3))
    garbage = [lambda v: [-x for x in v], lambda v: [float('nan')] * len(v), lambda v: [x * 1e31 for x in v]]
    rewrite_values(embeddings, lambda k, v: next((garbage[i](v) for i in keys), v))
    [spans] = cache.glob('spans/*/*/part-*.parquet')
    flip_pages(spans)

    with caplog.at_level('WARNING', logger='ragsieve.cache'):
        again = build(corpus, tmp_path / 'warm', '--cache', str(cache))
    damaged = [r.getMessage() for r in caplog.records if 'is damaged' in r.getMessage()]
    assert len(damaged) == 2 and str(embeddings) in damaged[0] + damaged[1] and str(spans) in damaged[0] + damaged[1]
    assert again['cache']['features']['embedding']['damaged'] == 3 and again['cache']['features']['spans']['damaged']
    build(corpus, tmp_path / 'cold', '--cache', feature_cache.NO_CACHE)
    assert data_files(tmp_path / 'warm') == data_files(tmp_path / 'cold')
