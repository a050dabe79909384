"""OpenVINO's forward: bf16 on the CPU's bf16 units, or fp32 (--embed_backend openvino), close to torch's fp32
and the same bits whatever the batch and threads.

OpenVINO needs native kernels, which a process can only choose before torch's
first kernel, and converts the model once per machine: the model tests run in
fresh processes, each with the kernels and OpenVINO cache it asks for.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO, TEXTS
from transforms.features import kernels, precision, quantize
from transforms.features.embedding import EmbeddingConfig

# A machine's first build converts and checks: each test starts from an empty OpenVINO cache.
pytestmark = pytest.mark.usefixtures('fresh_openvino_cache')

# blake2b of the shipped int8 calibration set (transforms/features/calibration/texts.txt).
CALIBRATION_DIGEST = 'ddafe2f9f219898acb6c5999057a3a0a'


def has_bf16() -> bool:
    try:
        return 'BF16' in precision.cpu_capabilities()
    except ValueError:
        return False


needs_openvino = pytest.mark.skipif(importlib.util.find_spec('openvino') is None,
                                    reason='needs OpenVINO, a dependency of ragsieve: make setup')
needs_bf16 = pytest.mark.skipif(not has_bf16(), reason='needs a CPU with AVX-512 BF16 or AMX and OpenVINO '
                                '(make setup)')

CHILD = '''
import json, sys
import torch
from transforms.features import precision
from transforms.features.embedding import embed_texts, kernel_probe, precision_check
from transforms.features.cache_settings import embedding_settings
from transforms.features.models import load_embedding_model
from tests.helpers import TEXTS
threads, batch, in_precision = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(threads)
model = precision.set_precision(load_embedding_model('all-MiniLM-L6-v2', kernel_mode='native'), in_precision,
                                'openvino')
vectors = embed_texts(model, TEXTS, batch)
alone = [embed_texts(model, [t])[0].tobytes().hex() for t in TEXTS]
check = precision_check(model, TEXTS)
print(json.dumps({'hex': vectors.tobytes().hex(), 'alone': alone, 'probe': kernel_probe(model),
                  'min_cosine': check.min_cosine, 'settings': embedding_settings('m', model, 'cpu')}))
'''


def child(threads, batch, in_precision='bf16'):
    done = subprocess.run([sys.executable, '-c', CHILD, str(threads), str(batch), in_precision], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out['vectors'] = np.frombuffer(bytes.fromhex(out.pop('hex')), dtype=np.float32).reshape(len(TEXTS), -1)
    return out


@needs_bf16
def test_bf16_is_close_to_fp32_and_the_same_bits_whatever_the_batch_and_threads(embedding_model):
    from transforms.features.cache_settings import embedding_settings

    one, two = child(1, 1), child(2, 64)
    assert np.array_equal(one['vectors'], two['vectors']) and one['probe'] == two['probe']
    assert one['vectors'].tobytes().hex() == ''.join(one['alone'])
    assert one['min_cosine'] >= precision.MIN_COSINE
    # The cache never mixes precisions: the key names it, and the probe's digest differs too.
    fp32 = embedding_settings('m', embedding_model, 'cpu')
    assert fp32['precision'] == 'fp32' and one['settings']['precision'] == 'bf16'
    assert fp32['kernels'] != one['settings']['kernels']


@needs_openvino
def test_openvino_fp32_is_within_1e4_of_torch_and_the_same_bits_whatever_the_batch_and_threads(embedding_model):
    from transforms.features.cache_settings import embedding_settings

    one, two = child(1, 1, 'fp32'), child(2, 64, 'fp32')
    assert np.array_equal(one['vectors'], two['vectors']) and one['probe'] == two['probe']
    assert one['vectors'].tobytes().hex() == ''.join(one['alone'])
    assert one['min_cosine'] >= precision.MIN_COSINE_FP32
    # Its sums run in another order than torch's: another kernel family, and the cache key names the backend.
    torch_fp32 = embedding_settings('m', embedding_model, 'cpu')
    assert one['settings']['precision'] == 'fp32' and one['settings']['backend'] == 'openvino'
    assert 'backend' not in torch_fp32 and one['settings']['kernels'] != torch_fp32['kernels']


THREADS_CHILD = '''
import sys
from concurrent.futures import ThreadPoolExecutor
from transforms.features import precision
from transforms.features.embedding import embed_texts
from transforms.features.models import load_embedding_model
from tests.helpers import TEXTS
model = precision.set_precision(load_embedding_model('all-MiniLM-L6-v2', kernel_mode='native'), 'fp32', 'openvino')
alone = embed_texts(model, TEXTS).tobytes()
# Two threads through one model at once, as an engine's SDK worker runs two task slots' bundles.
with ThreadPoolExecutor(2) as pool:
    runs = list(pool.map(lambda _: embed_texts(model, TEXTS, 2).tobytes(), range(8)))
print(sum(r == alone for r in runs))
'''


@needs_openvino
def test_two_threads_embed_through_one_openvino_model_at_once_with_its_bits():
    done = subprocess.run([sys.executable, '-c', THREADS_CHILD], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    # Before each thread had its own infer request: "RuntimeError: Infer Request is busy" (a local Flink build).
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == '8'


@needs_openvino
def test_a_build_on_openvino_fp32_checks_its_sample_and_gives_the_same_bytes_twice(tmp_path):
    def build(out, *flags):
        done = subprocess.run([sys.executable, '-m', 'pipelines.cli', 'build', '--input', str(REPO / 'sample_corpus'),
                               '--output', str(out), '--chunk_size', '64', '--embed_backend', 'openvino', *flags],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        return done, (json.loads((out / 'manifest.json').read_text()) if done.returncode == 0 else None)

    (_, first), (_, second) = build(tmp_path / 'a'), build(tmp_path / 'b', '--embed_kernels', 'native')
    check = first['embedding']['precision_check']
    assert first['embedding'] == {'precision': 'fp32', 'backend': 'openvino', 'precision_check': check}
    assert check['min_cosine'] >= precision.MIN_COSINE_FP32 and not check['remembered']
    # In fp32 the sample is the shipped calibration set's, not the corpus's: a build of another corpus
    # on this machine reads the same check back (a nightly build never embeds a sample twice).
    assert check['sampled'] == 'calibration set' and check['sample'] == precision.SAMPLE
    assert second['embedding']['precision_check'] == {**check, 'remembered': True}
    other_corpus = tmp_path / 'other'
    other_corpus.mkdir()
    (other_corpus / 'notes.txt').write_text(TEXTS[0] * 3)
    done = subprocess.run([sys.executable, '-m', 'pipelines.cli', 'build', '--input', str(other_corpus),
                           '--output', str(tmp_path / 'o'), '--embed_backend', 'openvino'], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    other = json.loads((tmp_path / 'o' / 'manifest.json').read_text())['embedding']['precision_check']
    assert other == {**check, 'remembered': True}
    assert first['kernels']['mode'] == kernels.NATIVE and not first['kernels']['byte_stable_across_machines']
    for table in ('chunks', 'index'):
        for part in sorted((tmp_path / 'a' / table).iterdir()):
            assert part.read_bytes() == (tmp_path / 'b' / table / part.name).read_bytes(), part
    # OpenVINO runs on the CPU's own units: portable kernels are refused, before any model loads.
    refused, _ = build(tmp_path / 'c', '--embed_kernels', 'portable')
    assert refused.returncode == 2 and not (tmp_path / 'c').exists()
    assert '--embed_kernels portable cannot run --embed_backend openvino' in refused.stderr


@needs_bf16
def test_a_build_in_bf16_checks_its_sample_first_and_gives_the_same_bytes_twice(tmp_path):
    def build(out, *flags):
        done = subprocess.run([sys.executable, '-m', 'pipelines.cli', 'build', '--input', str(REPO / "sample_corpus"),
                               '--output', str(out), '--chunk_size', '64', *flags], cwd=REPO,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads((out / 'manifest.json').read_text())

    first = build(tmp_path / 'a', '--embed_precision', 'bf16')
    second = build(tmp_path / 'b', '--embed_precision', 'bf16')
    check = first['embedding']['precision_check']
    assert first['embedding']['precision'] == 'bf16' and check['precision'] == 'bf16'
    assert check['sample'] == first['counts']['chunks_before_filters'] <= precision.SAMPLE
    assert check['min_cosine'] >= precision.MIN_COSINE and check['mean_cosine'] >= check['min_cosine']
    # The second build on this machine reads the check of the same sample back instead of redoing it.
    assert not check['remembered'] and second['embedding']['precision_check'] == {**check, 'remembered': True}
    assert first['kernels']['mode'] == kernels.NATIVE and not first['kernels']['byte_stable_across_machines']
    for table in ('chunks', 'index'):
        for part in sorted((tmp_path / 'a' / table).iterdir()):
            assert part.read_bytes() == (tmp_path / 'b' / table / part.name).read_bytes(), part
    # A bound no bf16 vector reaches stops the build before the pipeline, saying why (a remembered check too).
    done = subprocess.run([sys.executable, '-c', (
        'import sys; from transforms.features import precision; precision.MIN_COSINE = 1.0; '
        'from pipelines import cli; sys.exit(cli.main(sys.argv[1:]))'), 'build', '--input', str(REPO / "sample_corpus"),
        '--output', str(tmp_path / 'c'), '--chunk_size', '64', '--embed_precision', 'bf16'], cwd=REPO, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 2 and 'minimum cosine to fp32' in done.stderr and not (tmp_path / 'c').exists()


def test_a_cpu_without_bf16_units_gets_a_clear_message(monkeypatch):
    # A fake of OpenVINO's capability query only (the unit under test is the refusal, not the model).
    monkeypatch.setattr(precision, 'cpu_capabilities', lambda: ['FP32', 'INT8'])
    with pytest.raises(ValueError, match='no bf16 units .* use --embed_precision fp32'):
        precision.check_precision('bf16')
    assert precision.check_precision('fp32') == 'fp32'


def test_bad_precisions_and_settings_are_refused():
    with pytest.raises(ValueError, match='must be one of fp32, bf16'):
        precision.check_precision('int4')
    with pytest.raises(ValueError, match='--embed_backend must be one of torch, openvino'):
        precision.check_backend('onnx', 'fp32')
    with pytest.raises(ValueError, match='--embed_precision bf16 runs on --embed_backend openvino, not torch'):
        precision.check_backend('torch', 'bf16')
    with pytest.raises(ValueError, match='--embed_backend openvino runs on the CPU'):
        precision.check_backend('openvino', 'fp32', 'cuda')
    assert [precision.check_backend(None, 'fp32'), precision.check_backend(None, 'bf16')] == ['torch', 'openvino']
    if has_bf16():
        with pytest.raises(ValueError, match='runs on --embed_kernels native'):
            EmbeddingConfig(precision='bf16', kernels=kernels.PORTABLE)


def test_only_mean_pooling_is_run_by_openvino():
    assert precision._mean_pooling({'pooling_mode': 'mean'})
    assert precision._mean_pooling({'pooling_mode_mean_tokens': True, 'pooling_mode_cls_token': False})
    assert not precision._mean_pooling({'pooling_mode': 'cls'})
    assert not precision._mean_pooling({'pooling_mode_mean_tokens': True, 'pooling_mode_max_tokens': True})


def test_the_quality_bound_refuses_vectors_too_far_from_fp32():
    full = np.eye(3, dtype=np.float32)
    close = np.array([[1, 0.01, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    close /= np.linalg.norm(close, axis=1, keepdims=True)
    check = precision.check_quality('bf16', close, full)
    assert check.sample == 3 and check.min_cosine == pytest.approx(0.99995, abs=1e-5) and check.passed
    far = np.array([[1, 0.1, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    far /= np.linalg.norm(far, axis=1, keepdims=True)
    with pytest.raises(ValueError, match='minimum cosine to fp32 on 3 sampled chunks is 0.995037, below 0.999'):
        precision.check_quality('bf16', far, full)
    # OpenVINO in fp32 only reorders its sums: a bound 10x tighter, and the flag to drop is the backend.
    assert precision.check_quality('fp32', close, full).passed
    nearer_bf16 = np.array([[1, 0.02, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    nearer_bf16 /= np.linalg.norm(nearer_bf16, axis=1, keepdims=True)
    assert precision.check_quality('bf16', nearer_bf16, full).passed
    with pytest.raises(ValueError, match=r'^--embed_backend openvino: .* is 0.999800, below 0.9999: '
                                         'use --embed_backend torch$'):
        precision.check_quality('fp32', nearer_bf16, full)


def test_the_sample_is_fixed_and_seeded():
    texts = [f'text {i}' for i in range(1000)]
    assert precision.sample_texts(texts, 5) == precision.sample_texts(list(texts), 5)
    assert len(set(precision.sample_texts(texts, 256))) == 256 and precision.sample_texts(texts[:3]) == texts[:3]


@needs_bf16
def test_the_evaluation_embeds_chunks_in_bf16_and_questions_in_fp32(tmp_path):
    from tests.helpers import CHROMA

    def evaluate(precision_name):
        out = tmp_path / precision_name
        done = subprocess.run([sys.executable, '-m', 'pipelines.cli', 'evaluate', '--dataset', 'chroma',
                               '--data', str(CHROMA), '--output', str(out), '--chunkers', 'fixed:40:0',
                               '--filters', 'none', '--max_questions', '6', '--variants', 'raw', '--no_progress',
                               '--cache', str(tmp_path / 'cache'), '--embed_precision', precision_name],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads((out / 'summary.json').read_text())

    bf16, fp32 = evaluate('bf16'), evaluate('fp32')
    # One cache root, two precisions: the fp32 run reuses none of the bf16 vectors, and embeds through
    # its store the questions that the bf16 run embedded in fp32 outside it.
    questions = bf16['questions']
    assert bf16['cache']['computed']['embedding'] > 0 and questions == fp32['questions'] > 0
    assert fp32['cache']['computed']['embedding'] == bf16['cache']['computed']['embedding'] + questions


def has_int8() -> bool:
    try:
        return 'INT8' in precision.cpu_capabilities() and importlib.util.find_spec('nncf') is not None
    except ValueError:
        return False


needs_int8 = pytest.mark.skipif(not has_int8(), reason="needs a CPU with AVX-512 VNNI, AVX-VNNI or AMX and "
                                "pip install 'ragsieve[openvino]' (NNCF)")


@pytest.fixture(scope='module')
def int8_cache(tmp_path_factory):
    """One OpenVINO cache for the int8 tests: the model is quantized once (~20 s), as once per machine."""
    return str(tmp_path_factory.mktemp('openvino'))


@needs_int8
def test_int8_is_the_same_bits_alone_batched_and_with_1_or_2_threads(embedding_model, int8_cache, monkeypatch,
                                                                     tmp_path):
    from transforms.features.cache_settings import embedding_settings

    monkeypatch.setenv('RAGSIEVE_OPENVINO_CACHE', int8_cache)
    one = child(1, 1, 'int8')
    # The other quantizes the model again in a cache of its own (as a second machine of this kind would).
    monkeypatch.setenv('RAGSIEVE_OPENVINO_CACHE', str(tmp_path / 'other_machine'))
    two = child(2, 64, 'int8')
    assert np.array_equal(one['vectors'], two['vectors']) and one['probe'] == two['probe']
    assert one['vectors'].tobytes().hex() == ''.join(one['alone'])
    assert one['min_cosine'] >= precision.MIN_COSINE_INT8
    # The cache never mixes int8 vectors with fp32's: the key names the precision, and the probe differs.
    fp32 = embedding_settings('m', embedding_model, 'cpu')
    assert one['settings']['precision'] == 'int8' and one['settings']['kernels'] != fp32['kernels']
    assert one['settings']['quantized'] == quantize.calibration_digest(
        quantize.calibration_texts())


@needs_int8
def test_a_build_in_int8_gives_the_same_bytes_twice_and_its_model_does_not_follow_the_input(tmp_path, int8_cache,
                                                                                           monkeypatch):
    from tests.helpers import CHROMA

    monkeypatch.setenv('RAGSIEVE_OPENVINO_CACHE', int8_cache)

    def build(out, corpus=REPO / 'sample_corpus'):
        done = subprocess.run([sys.executable, '-m', 'pipelines.cli', 'build', '--input', str(corpus),
                               '--output', str(out), '--chunk_size', '64', '--embed_precision', 'int8'], cwd=REPO,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads((out / 'manifest.json').read_text())

    first, second = build(tmp_path / 'a'), build(tmp_path / 'b')
    check = first['embedding']['precision_check']
    assert first['embedding']['precision'] == 'int8' and check['precision'] == 'int8'
    assert check['min_cosine'] >= precision.MIN_COSINE_INT8
    assert second['embedding']['precision_check'] == {**check, 'remembered': True}
    for table in ('chunks', 'index'):
        for part in sorted((tmp_path / 'a' / table).iterdir()):
            assert part.read_bytes() == (tmp_path / 'b' / table / part.name).read_bytes(), part
    # Another corpus quantizes nothing again: the cache holds one fp32 graph and one int8 graph, whatever the input.
    models = sorted(os.listdir(os.path.join(int8_cache, 'models')))
    build(tmp_path / 'c', CHROMA)
    assert sorted(os.listdir(os.path.join(int8_cache, 'models'))) == models and len(models) == 2


@needs_int8
def test_an_int8_build_below_its_bound_stops_before_the_pipeline(tmp_path, int8_cache, monkeypatch):
    monkeypatch.setenv('RAGSIEVE_OPENVINO_CACHE', int8_cache)
    done = subprocess.run([sys.executable, '-c', (
        'import sys; from transforms.features import precision; precision.MEAN_COSINE_INT8 = 1.0; '
        'from pipelines import cli; sys.exit(cli.main(sys.argv[1:]))'), 'build', '--input', str(REPO / 'sample_corpus'),
        '--output', str(tmp_path / 'c'), '--chunk_size', '64', '--embed_precision', 'int8'], cwd=REPO,
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and not (tmp_path / 'c').exists()
    line = done.stderr.strip().splitlines()[-1]
    # (A check remembered from the other int8 tests says so before the fallback.)
    assert line.startswith('ragsieve build: error: --embed_precision int8: the mean cosine to fp32 on ') and (
        ', below 1.0' in line and line.endswith(': use --embed_precision fp32')), line


def test_int8_is_judged_by_the_mean_cosine_of_its_sample_and_its_minimum_only_guards_a_mangled_chunk():
    full = np.eye(4, dtype=np.float32)

    def moved(*offsets):  # each row of `full` moved off its axis by the given amount
        rows = full + np.array([[0, o, 0, 0] if i != 1 else [o, 0, 0, 0] for i, o in enumerate(offsets)], np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    # Cosines 0.9955 each: int8's measured level passes, bf16's bound would refuse it.
    good = moved(0.095, 0.095, 0.095, 0.095)
    assert precision.check_quality('int8', good, full).passed
    with pytest.raises(ValueError, match='minimum cosine'):
        precision.check_quality('bf16', good, full)
    # Every chunk a little further (mean 0.986): below the mean's bound, as the model calibrated on 8 texts.
    with pytest.raises(ValueError, match=r'^--embed_precision int8: the mean cosine to fp32 on 4 sampled chunks is '
                                         r'0\.98\d+, below 0\.993: use --embed_precision fp32$'):
        precision.check_quality('int8', moved(0.17, 0.17, 0.17, 0.17), full)
    # One chunk mangled (cosine 0.71) among close ones: the minimum's bound.
    with pytest.raises(ValueError, match='minimum cosine to fp32 on 4 sampled chunks is 0.707107, below 0.95'):
        precision.check_quality('int8', moved(0.0, 0.0, 0.0, 1.0), full)


def test_a_cpu_without_int8_units_gets_a_clear_message(monkeypatch):
    # A fake of the CPU's flags only (the unit under test is the refusal, not the model).
    monkeypatch.setattr(precision, 'cpu_capabilities', lambda: ['FP32', 'BF16'])
    with pytest.raises(ValueError, match='no int8 dot-product units .* use --embed_precision fp32'):
        precision.check_precision('int8')


def test_the_calibration_set_is_fixed_and_names_the_int8_model():
    texts = quantize.calibration_texts()
    # The shipped set: editing it changes every int8 vector, so it changes only with this digest.
    assert len(texts) == 300 and quantize.calibration_digest(texts) == CALIBRATION_DIGEST
    key = quantize.quantization_key
    assert key('graph', texts) == key('graph', list(texts)) != key('graph', texts[1:]) != key('other', texts[1:])
