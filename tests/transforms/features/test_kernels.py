"""The pinned CPU kernels: vectors independent of batch, threads and process, and checked.

This test process runs the default kernels of its CPU family (native on
AVX-512 and AMX CPUs, portable on AVX2-only ones), pinned by conftest;
kernels are pinned at a process's start, so the other mode runs in a child.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import PORTABLE_PROBE, REPO, TEXTS, portable_mkl_cbwr
from transforms.features import kernels
from transforms.features.embedding import embed_texts, kernel_probe

# Embeds TEXTS in a fresh process under the environment and thread count the
# test gives, and prints the vectors' bytes as hex with the kernel state.
CHILD = '''
import json, sys
import torch
from transforms.features.models import load_embedding_model
from transforms.features.embedding import embed_texts, kernel_probe
from transforms.features import kernels
from tests.helpers import TEXTS
mode, threads, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
model = load_embedding_model('all-MiniLM-L6-v2', kernel_mode=mode)
vectors = embed_texts(model, TEXTS, batch)
print(json.dumps({'hex': vectors.tobytes().hex(), 'probe': kernel_probe(model),
                  'describe': kernels.describe(mode)}))
'''


def child(mode, threads, batch, env=None):
    done = subprocess.run([sys.executable, '-c', CHILD, mode, str(threads), str(batch)], cwd=REPO,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out['vectors'] = np.frombuffer(bytes.fromhex(out.pop('hex')), dtype=np.float32).reshape(len(TEXTS), -1)
    return out


def test_the_default_is_the_faster_mode_of_the_cpu_family():
    # Pure: the table, whatever CPU runs the test (kernels.FASTEST, measured per family).
    amd_avx2 = {'avx2', 'fma', 'sse4_2'}
    assert kernels.cpu_family('AuthenticAMD', amd_avx2) == ('AuthenticAMD', 'avx2')
    assert kernels.default_mode(kernels.cpu_family('AuthenticAMD', amd_avx2)) == kernels.PORTABLE
    assert kernels.default_mode(kernels.cpu_family('GenuineIntel', amd_avx2 | {'avx512f'})) == kernels.NATIVE
    assert kernels.default_mode(kernels.cpu_family('GenuineIntel', {'avx2', 'avx512f', 'amx_tile'})) == kernels.NATIVE
    assert kernels.default_mode(kernels.cpu_family('GenuineIntel', amd_avx2)) == kernels.PORTABLE
    # Another architecture (no AVX2; aarch64 has no MKL, which portable needs): native.
    assert kernels.default_mode(kernels.cpu_family('', {'asimd', 'fp'})) == kernels.NATIVE
    assert kernels.DEFAULT_MODE == kernels.default_mode()


def test_this_process_runs_the_default_kernels(embedding_model):
    # conftest pins kernels.DEFAULT_MODE, as a build without --embed_kernels does.
    now = kernels.check(kernels.DEFAULT_MODE)
    assert now.mkl_strict
    described = kernels.describe(kernels.DEFAULT_MODE)
    assert described['mode'] == described['default_on_this_cpu'] == kernels.DEFAULT_MODE
    assert described['byte_stable_across_machines'] == (kernels.DEFAULT_MODE == kernels.PORTABLE)


def test_a_portable_process_runs_the_portable_kernels():
    out = child(kernels.PORTABLE, 2, 64)
    assert out['describe']['byte_stable_across_machines'] and out['describe']['aten_cpu_capability'] == 'AVX2'
    assert out['describe']['mkl_cbwr'] == portable_mkl_cbwr()


def test_vectors_do_not_depend_on_threads_or_batch(embedding_model):
    import torch

    threads = torch.get_num_threads()
    alone = np.stack([embed_texts(embedding_model, [t])[0] for t in TEXTS])
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            for batch in (1, 2, 5, 64):
                assert np.array_equal(embed_texts(embedding_model, TEXTS, batch), alone), (n, batch)
    finally:
        torch.set_num_threads(threads)


def test_portable_processes_with_other_threads_batches_and_settings_agree_with_other_cpus():
    one = child(kernels.PORTABLE, 1, 1)
    # A machine whose environment asks for its widest units: portable wins.
    wide = child(kernels.PORTABLE, 3, 64, env={
        'MKL_ENABLE_INSTRUCTIONS': 'AVX512', 'ATEN_CPU_CAPABILITY': 'avx512', 'MKL_CBWR': 'AUTO'})
    assert np.array_equal(one['vectors'], wide['vectors'])
    # The packaged model's portable probe is the digest recorded on other CPUs (tests/helpers.py).
    assert one['probe'] == wide['probe'] == PORTABLE_PROBE
    assert wide['describe']['byte_stable_across_machines']


def test_a_process_of_the_default_kernels_computes_this_process_bits(embedding_model):
    out = child(kernels.DEFAULT_MODE, 1, 1)
    assert np.array_equal(out['vectors'], embed_texts(embedding_model, TEXTS))
    assert out['probe'] == kernel_probe(embedding_model)


def test_native_kernels_are_stable_on_one_cpu_and_say_so():
    one, three = child(kernels.NATIVE, 1, 1), child(kernels.NATIVE, 3, 64)
    assert np.array_equal(one['vectors'], three['vectors']) and one['probe'] == three['probe']
    assert not one['describe']['byte_stable_across_machines']
    assert one['describe']['mode'] == kernels.NATIVE and one['describe']['mkl_cbwr'].endswith(',STRICT')
    # The portable caps this test process runs with are lifted in the child.
    assert one['describe']['onednn_max_cpu_isa'] is None
    if kernels.cpu_name().endswith(('(avx512)', '(amx)')):
        # Wider units sum in another order: without portable, another CPU's bits.
        assert one['describe']['aten_cpu_capability'] != 'AVX2' and one['probe'] != PORTABLE_PROBE


def test_kernels_fixed_before_the_model_loads_are_refused():
    # A softmax fixes ATen's capability and a matmul MKL's branch: refused on
    # every CPU (on an AVX2-only one ATen's own choice is already portable's).
    script = ('import torch; torch.ones(8).softmax(0); torch.ones(256, 256) @ torch.ones(256, 256)\n'
              'from transforms.features.models import load_embedding_model\n'
              'load_embedding_model("all-MiniLM-L6-v2")\n')
    env = {k: v for k, v in os.environ.items() if k not in ('MKL_CBWR', 'ATEN_CPU_CAPABILITY',
                                                             'MKL_ENABLE_INSTRUCTIONS', 'ONEDNN_MAX_CPU_ISA')}
    done = subprocess.run([sys.executable, '-c', script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert 'KernelError' in done.stderr and 'torch ran before ragsieve could pin them' in done.stderr


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match='embed kernels must be one of'):
        kernels.check_mode('fast')
