"""Publish gates in a build: a normal rebuild publishes, one from half the input is refused and says why."""

import dataclasses
import json
import shutil

import pytest

from pipelines import cli
from pipelines.build_index import gates as build_gates
from pipelines.build_index.manifest import Target
from pipelines.build_index.options import BuildConfig
from tests.helpers import REPO
from transforms.chunking.chunkers import ChunkerConfig
from transforms.features import cache as feature_cache
from transforms.features.embedding import EmbeddingConfig
from transforms.output import gates, snapshots
from transforms.output.gates import GateConfig

CANARY = str(REPO / 'examples' / 'sample_canary.jsonl')
# Three of the seven documents of sample_corpus.
VANISHED = ('guides/bicycle.md', 'guides/sourdough.md', 'guides/tyres.html')


def manifest_of(directory):
    return json.loads((directory / 'manifest.json').read_text())


def build(corpus, root, run_id, *flags):
    return cli.main(['build', '--input', str(corpus), '--output', str(root), '--versioned', '--run_id', run_id,
                     '--chunk_size', '64', *flags])


def test_a_rebuild_passes_and_one_where_half_the_documents_vanished_is_refused(sample_root, tmp_path, capsys):
    corpus, root = tmp_path / 'corpus', tmp_path / 'root'
    shutil.copytree(sample_root[0], corpus)
    shutil.copytree(sample_root[1], root)

    assert build(corpus, root, 'r2', '--gate_canary', CANARY) == 0
    assert snapshots.read_latest(str(root)) == 'r2'
    verdict = manifest_of(root / 'runs' / 'r2')['gates']
    assert verdict['passed'] and verdict['previous_run'] == 'r1'
    checks = {c['gate']: c for c in verdict['checks']}
    assert checks['documents_drop']['status'] == 'pass' and checks['documents_drop']['previous'] == 7
    assert checks['canary_share']['value'] == 1.0 and checks['canary_vs_previous']['value'] == 6
    capsys.readouterr()

    for name in VANISHED:
        (corpus / name).unlink()
    assert build(corpus, root, 'r3', '--gate_canary', CANARY) == gates.REFUSED_EXIT_STATUS
    err = capsys.readouterr().err
    assert 'ragsieve build: refused to publish:' in err
    assert ('gate documents_drop failed: indexed documents 4, were 7 (42.9% fewer; limit 20.0%) '
            '(--gate_max_documents_drop)') in err
    assert 'gate kept_drop failed: kept chunks 14, were 33' in err and 'gate canary_share failed' in err
    assert 'LATEST still names r2' in err and f'ragsieve publish --output {root} --run r3' in err
    # The run is complete and readable, with its verdict and report, but LATEST did not move.
    assert snapshots.read_latest(str(root)) == 'r2'
    assert snapshots.list_runs(str(root)) == (['r1', 'r2', 'r3'], [])
    refused = manifest_of(root / 'runs' / 'r3')['gates']
    assert refused['failed'] == ['rejected_rise', 'documents_drop', 'kept_drop', 'canary_share', 'canary_vs_previous']
    assert 'data-verdict="fail"' in (root / 'runs' / 'r3' / 'report.html').read_text()
    # Its features are sound: the next build reads them, and deletes none as a killed run's leftovers.
    assert sorted(p.parent.name for p in (root / 'cache').glob('*/*/*/COMPLETE')).count('r3') == 3
    assert feature_cache.delete_incomplete(str(root / 'cache')) == []

    # A person looked and publishes it.
    assert cli.main(['publish', '--output', str(root), '--run', 'r3']) == 0
    assert snapshots.read_latest(str(root)) == 'r3'
    assert 'LATEST names r3 (was r2); its gates failed (rejected_rise, documents_drop' in capsys.readouterr().out


def test_a_refused_plain_build_leaves_the_output_alone_until_published(sample_root, tmp_path, capsys):
    corpus, out = sample_root[0], tmp_path / 'out'
    code = cli.main(['build', '--input', str(corpus), '--output', str(out), '--chunk_size', '64',
                     '--gate_max_rejected_share', '0.1'])
    assert code == gates.REFUSED_EXIT_STATUS
    err = capsys.readouterr().err
    assert 'gate rejected_share failed: 2 of 9 records rejected (22.2%; limit 10.0%)' in err
    held = tmp_path / 'out.refused'
    assert not out.exists() and not list(tmp_path.glob('out.staging-*'))
    assert manifest_of(held)['gates']['failed'] == ['rejected_share'] and (held / 'report.html').exists()
    assert f'ragsieve publish --output {out}' in err

    run_id = manifest_of(held)['run_id']
    assert cli.main(['publish', '--output', str(out), '--run', 'another']) == 2
    assert f"holds run '{run_id}', not 'another'" in capsys.readouterr().err
    assert cli.main(['publish', '--output', str(out)]) == 0
    assert manifest_of(out)['run_id'] == run_id and not held.exists()


@pytest.fixture
def run_copy(sample_root, tmp_path):
    """A copy of the sample root: its run r1 stands for a new run, compared with itself."""
    shutil.copytree(sample_root[1], tmp_path / 'root')
    return tmp_path / 'root'


def config(root, **gate_settings):
    return BuildConfig(input='in', output=str(root), chunker=ChunkerConfig(), embedding=EmbeddingConfig(),
                       versioned=True, gates=GateConfig(**gate_settings))


def test_the_verdict_compares_with_the_previous_manifest(run_copy):
    run = str(run_copy / 'runs' / 'r1')
    manifest = manifest_of(run_copy / 'runs' / 'r1')
    target = Target('r1', run, run, 'r1')
    assert build_gates.verdict(config(run_copy), manifest, target)['passed']
    fewer = dict(manifest, counts=dict(manifest['counts'], chunks=10))
    assert build_gates.verdict(config(run_copy), fewer, target)['failed'] == ['kept_drop']
    first = dataclasses.replace(target, previous=None, previous_run_id=None)
    assert build_gates.verdict(config(run_copy), fewer, first)['passed']


def test_gates_off_publishes_a_failed_run_and_says_so(run_copy, caplog):
    run = run_copy / 'runs' / 'r1'
    manifest = manifest_of(run)
    manifest['gates'] = gates.evaluate(GateConfig(enforce=False, max_rejected_share=0.1), manifest, None)
    (run / 'report.html').unlink()
    out = build_gates.check_and_report(config(run_copy, enforce=False), Target('r1', str(run), None, None), manifest)
    assert out is manifest and (run / 'report.html').exists()
    assert 'gate rejected_share failed' in caplog.text and 'published anyway (--gates off)' in caplog.text


def test_a_failed_gate_is_logged_as_a_warning_a_passed_one_as_info(caplog):
    verdict = {'checks': [
        {'gate': 'kept_drop', 'status': gates.FAIL, 'says': 'kept chunks 14, were 33'},
        {'gate': 'documents_drop', 'status': gates.PASS, 'says': 'indexed documents 7, were 7'},
    ]}
    with caplog.at_level('INFO', logger='ragsieve.build'):
        build_gates.log_verdict(verdict)
    levels = {r.getMessage().split(':')[0]: r.levelname for r in caplog.records}
    assert levels == {'Gate kept_drop': 'WARNING', 'Gate documents_drop': 'INFO'}
