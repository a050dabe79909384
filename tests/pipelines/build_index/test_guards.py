"""Bad command lines and outputs: refused up front with one clear error, nothing written."""

import pytest

from pipelines.build_index import job as build_index
from transforms.output import snapshots


def build(corpus, out, *flags):
    return build_index.run(['--input', str(corpus), '--output', str(out), '--chunk_size', '64', *flags])


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / 'corpus'
    root.mkdir()
    (root / 'a.txt').write_text('Jupiter is the largest planet of the Solar System.')
    return root


class ModelMustNotLoad:
    """Stands in for the model handle (the subject here is the order of checks, not the model)."""

    def __init__(self, *args, **kwargs):
        pass

    @classmethod
    def of(cls, config):
        return cls()

    def acquire(self, step=None):
        raise AssertionError('the model was loaded before the check that should have failed')


@pytest.fixture
def no_model(monkeypatch):
    monkeypatch.setattr(build_index, 'SharedModel', ModelMustNotLoad)


@pytest.mark.parametrize('flags,message', [
    (['--chunk_sise', '200'], r'unknown flag\(s\) --chunk_sise \(did you mean --chunk_size\?\)'),
    (['--chunk_size=64', '--bogus'], r'unknown flag\(s\) --bogus'),
    (['--device', 'bogus'], "--device 'bogus' is not a torch device"),
    (['--max_metadata_bytes', '0'], 'max_metadata_bytes must be > 0'),
    (['--prune_grace_seconds', 'nan'], 'prune_grace_seconds'),
])
def test_bad_flags_fail_before_any_work(corpus, tmp_path, no_model, flags, message):
    with pytest.raises(ValueError, match=message):
        build(corpus, tmp_path / 'out', *flags)
    assert not (tmp_path / 'out').exists()


def test_beam_flags_still_pass(corpus, tmp_path, no_model):
    # Reaches the model (so the flags were accepted) without running anything.
    with pytest.raises(AssertionError, match='model was loaded'):
        build(corpus, tmp_path / 'out', '--runner', 'DirectRunner', '--direct_num_workers=1',
              '--direct_running_mode', 'in_memory')


def test_cuda_without_cuda_is_refused(corpus, tmp_path, no_model):
    import torch

    if torch.cuda.is_available():
        pytest.skip('this machine has CUDA')
    with pytest.raises(ValueError, match='CUDA is not available'):
        build(corpus, tmp_path / 'out', '--device', 'cuda')


def test_unknown_config_key(corpus, tmp_path, no_model):
    config = tmp_path / 'build.yaml'
    config.write_text(f'input: {corpus}\nchunk_size: 32\nbogus_key: 1\nchunk_sise: 3\n')
    with pytest.raises(ValueError, match=r'build.yaml: unknown setting\(s\) bogus_key, chunk_sise \(did you mean'):
        build_index.run(['--config', str(config), '--output', str(tmp_path / 'out')])


@pytest.mark.parametrize('flags', [[], ['--versioned']])
def test_output_naming_a_file_is_refused_before_any_work(corpus, tmp_path, no_model, flags):
    precious = tmp_path / 'notes.txt'
    precious.write_text('my notes')
    with pytest.raises(ValueError, match='is a file'):
        build(corpus, precious, *flags)
    assert precious.read_text() == 'my notes' and not list(tmp_path.glob('notes.txt.*'))


def test_cache_naming_a_file_is_refused(corpus, tmp_path, no_model):
    (tmp_path / 'cache').write_text('not a folder')
    with pytest.raises(ValueError, match="--cache .* is a file"):
        build(corpus, tmp_path / 'out', '--cache', str(tmp_path / 'cache'))


@pytest.mark.parametrize('content', ['thesis.tex', 'manifest.json'])
def test_versioned_into_a_folder_that_is_no_versioned_root_is_refused(corpus, tmp_path, no_model, content):
    folder = tmp_path / 'folder'
    folder.mkdir()
    (folder / content).write_text('{}')
    with pytest.raises(ValueError, match='not a versioned ragsieve root'):
        build(corpus, folder, '--versioned')
    assert sorted(p.name for p in folder.iterdir()) == [content]


@pytest.mark.parametrize('versioned', [False, True])
def test_the_output_lock_is_taken_before_the_model_loads(corpus, tmp_path, no_model, versioned):
    out = tmp_path / 'out'
    held = (str(out / snapshots.LOCK_FILE), str(out)) if versioned else (snapshots.plain_lock_path(str(out)), str(out))
    with snapshots.lock_file(held[1], held[0]):
        with pytest.raises(ValueError, match='another ragsieve build is writing'):
            build(corpus, out, *(['--versioned'] if versioned else []))


def test_a_build_that_rejects_every_record_publishes_nothing(tmp_path):
    corpus = tmp_path / 'corpus'
    corpus.mkdir()
    (corpus / 'blank.md').write_text('\u200b \n')
    (corpus / 'records.jsonl').write_text('{"id": "x"}\n')
    out = tmp_path / 'out'
    with pytest.raises(ValueError, match=r'no document was indexed.*1 empty_text.*--allow_empty'):
        build(corpus, out)
    assert not out.exists() and not list(tmp_path.glob('out.staging-*'))
    manifest = build(corpus, out, '--allow_empty')
    assert manifest['counts']['documents_indexed'] == 0 and manifest['counts']['rejected'] == 2
    assert (out / 'manifest.json').exists()


def test_failed_build_leaves_no_staging_and_cleans_killed_ones(corpus, tmp_path, monkeypatch):
    out = tmp_path / 'out'
    killed = tmp_path / 'out.staging-999-1'  # as a plain build killed with SIGKILL leaves it
    (killed / 'chunks').mkdir(parents=True)

    def fail(*args, **kwargs):
        raise RuntimeError('boom after the pipeline ran')

    monkeypatch.setattr(build_index, 'make_manifest', fail)
    with pytest.raises(RuntimeError, match='boom'):
        build(corpus, out)
    assert not list(tmp_path.glob('out.staging-*')) and not out.exists()


def test_a_directory_named_like_a_glob_is_read_as_a_directory(tmp_path):
    corpus = tmp_path / 'dir[1]'
    corpus.mkdir()
    (corpus / 'a.txt').write_text('Saturn has rings of ice and rock.')
    manifest = build(corpus, tmp_path / 'out', '--filter', 'none')
    assert manifest['counts']['documents_indexed'] == 1


@pytest.mark.parametrize('name,message', [('missing', 'does not exist'), ('empty', 'matches no file')])
def test_a_missing_or_empty_input_is_refused_before_the_model_loads(tmp_path, no_model, name, message):
    (tmp_path / 'empty').mkdir()
    with pytest.raises(ValueError, match=f"^--input '{tmp_path / name}' {message}$"):
        build(tmp_path / name, tmp_path / 'out')


@pytest.mark.parametrize('flag,inside', [('--output', 'index'), ('--cache', '.cache'), ('--output', 'sub/deeper')])
def test_an_output_or_cache_inside_the_input_is_refused(corpus, tmp_path, no_model, flag, inside):
    (corpus / 'sub').mkdir()
    flags = [flag, str(corpus / inside)] if flag == '--cache' else []
    out = corpus / inside if flag == '--output' else tmp_path / 'out'
    with pytest.raises(ValueError, match=f"^{flag} '{corpus / inside}' is inside --input '{corpus}': the next build"):
        build(corpus, out, *flags)
    assert sorted(p.name for p in corpus.iterdir()) == ['a.txt', 'sub']


def test_an_input_inside_the_output_is_refused(tmp_path, no_model):
    out = tmp_path / 'out'
    (out / 'corpus').mkdir(parents=True)
    (out / 'manifest.json').write_text('{}')
    (out / 'corpus' / 'a.txt').write_text('Jupiter is the largest planet of the Solar System.')
    with pytest.raises(ValueError, match="is inside --output .*: the build would replace its own input"):
        build(out / 'corpus', out)


def test_a_glob_input_may_share_its_folder_with_the_output(corpus, no_model):
    # `corpus/*.txt` never lists corpus/index/...: accepted (it gets as far as the model).
    with pytest.raises(AssertionError, match='model was loaded'):
        build(f'{corpus}/*.txt', corpus / 'index')


def one_line_error(argv, capsys) -> str:
    """The one line `ragsieve build` ends with, exit 2, no traceback nor Beam's dump."""
    from pipelines import cli

    assert cli.main(['build', *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert '\n' not in err and 'Traceback' not in err and 'BeamIOError' not in err, err
    assert err.startswith('ragsieve build: error: '), err
    return err.removeprefix('ragsieve build: error: ')


@pytest.mark.parametrize('output', ['s3://', 'gs://', 's3:///index'])
def test_an_output_url_without_a_bucket_says_so(corpus, no_model, capsys, output):
    scheme = output.split('://')[0]
    assert one_line_error(['--input', str(corpus), '--output', output], capsys) == (
        f"--output '{output}' names no bucket: give {scheme}://BUCKET/PREFIX")


def test_an_input_in_a_missing_bucket_says_so(object_store, tmp_path, no_model, capsys):
    missing = f'{object_store.split("://")[0]}://ragsieve-no-such-bucket/corpus'
    assert one_line_error(['--input', missing, '--output', str(tmp_path / 'out')], capsys) == (
        f"--input '{missing}': bucket 'ragsieve-no-such-bucket' does not exist")


def test_a_whole_bucket_input_is_read_as_a_directory_even_empty(object_store, request, tmp_path, no_model, capsys):
    server = request.getfixturevalue('minio' if object_store.startswith('s3') else 'fake_gcs')
    empty = 'ragsieve-empty'
    try:
        server.make_bucket(empty)
    except Exception:  # made by an earlier test of this session
        pass
    url = f'{object_store.split("://")[0]}://{empty}'
    assert one_line_error(['--input', url, '--output', str(tmp_path / 'out')], capsys) == (
        f"--input '{url}' matches no file")


def test_an_input_the_credentials_may_not_read_says_so(proxied_store, deny_bucket, tmp_path, no_model, capsys):
    from tests.helpers import BUCKET
    from transforms import storage

    url, _ = proxied_store
    storage.write_bytes(f'{url}/corpus/a.txt', b'Jupiter is the largest planet of the Solar System.')
    deny_bucket()
    said = one_line_error(['--input', f'{url}/corpus', '--output', str(tmp_path / 'out')], capsys)
    assert said.startswith(f"--input '{url}/corpus': access to bucket '{BUCKET}' is denied ("), said


def test_an_input_the_direct_runner_cannot_hold_is_refused_before_the_model_loads(corpus, tmp_path, no_model, capsys,
                                                                                  monkeypatch):
    from pipelines.build_index import direct_memory

    monkeypatch.setattr(direct_memory, 'machine_memory', lambda: 1 << 30)  # a machine of 1 GiB
    err = one_line_error(['--input', str(corpus), '--output', str(tmp_path / 'out')], capsys)
    assert err.startswith('--input holds 50 B in 1 file: about 1 chunks') and 'this machine has 1.0 GiB' in err
    assert '--runner FlinkRunner' in err and not (tmp_path / 'out').exists()


def test_memory_check_off_goes_on_and_other_runners_are_not_checked(corpus, tmp_path, monkeypatch):
    from pipelines.build_index import direct_memory

    monkeypatch.setattr(direct_memory, 'machine_memory', lambda: 1 << 30)
    build(corpus, tmp_path / 'out', '--memory_check', 'off')
    assert (tmp_path / 'out' / 'manifest.json').is_file()


def test_an_input_the_local_flink_would_spill_past_its_disk_is_refused_before_the_cluster_starts(
        corpus, tmp_path, no_model, capsys, monkeypatch):
    from pipelines.build_index import local_engine

    jar = tmp_path / 'engines' / f'flink-job-server-{local_engine.BEAM_JAVA}' / 'job-server.jar'
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b'')  # nothing starts it: the build stops before the cluster
    monkeypatch.setenv('RAGSIEVE_ENGINES', str(jar.parents[1]))
    monkeypatch.setattr(local_engine, 'SPILL_BYTES_PER_CHUNK', 1 << 60)  # a chunk no disk holds
    argv = ['--input', str(corpus), '--output', str(tmp_path / 'out'), '--runner', 'FlinkRunner']
    err = one_line_error(argv, capsys)
    assert err.startswith('--input holds 50 B: at least about 1 chunks, which the local Flink would spill'), err
    assert 'point TMPDIR at a larger disk' in err and '--memory_check off' in err
    assert not (tmp_path / 'out').exists()
