"""The embedding's precision and backend: torch, or the model's transformer run by OpenVINO, pooled as the model pools.

`fp32` is the default precision, on the CPU family's faster backend when a
build names no embedding flag (`FASTEST_FP32`: OpenVINO on AMD AVX-512,
torch elsewhere). On torch it is bit-identical on one kind of CPU (native
kernels) or on every x86-64 CPU (`--embed_kernels portable`; `kernels`).
`bf16` compiles the same weights with OpenVINO for the CPU's bf16 units
(AVX-512 BF16, AMX): measured on an AMX Xeon, 0.20x the time of torch fp32
(native kernels) at a minimum cosine of 0.99997 to it. `fp32` on OpenVINO
(`--embed_backend openvino`) compiles them in fp32: measured on an AVX2 AMD
EPYC, 0.84x (256 chunks) to 0.97x (1,358) torch's encode time at a minimum
cosine of 0.9999999 (its sums run in another order). Both give the same bits whatever the batch and
threads on one CPU (the kernel probe checks it at every load) but other bits
on another CPU kind. The build checks the quality on a sample of its own
chunks first (`embedding.precision_check`). The conversion and the checks
passed are kept on the machine for the next build (`openvino_cache`).

`int8` quantizes the same graph with NNCF on a calibration set shipped with
ragsieve (`quantize`): measured on an AVX-512 VNNI AMD EPYC, 0.34x the time
of a bare torch fp32 encode, within 0.5 points of fp32's retrieval on every
measured set; its check bounds the sample's mean cosine (`MEAN_COSINE_INT8`).

OpenVINO is a dependency; NNCF, for int8 only, an extra (`pip install 'ragsieve[openvino]'`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import threading
import warnings
from typing import Optional, Sequence

import numpy as np

from transforms.features import openvino_cache
from transforms.features.models import model_fingerprint, padded_length, tokenize

FP32 = 'fp32'
BF16 = 'bf16'
INT8 = 'int8'
PRECISIONS = (FP32, BF16, INT8)
DEFAULT_PRECISION = FP32
TORCH = 'torch'
OPENVINO = 'openvino'
BACKENDS = (TORCH, OPENVINO)
# The sample `check_quality` embeds both ways, and the bound its minimum cosine must reach.
# 64 chunks (256 before issue 43): its fp32 half was most of a machine's first bf16 build's
# fixed cost (51 s of it on a loaded AVX-512 Xeon), and a conversion fault moves every vector,
# while the minimum over 256 (0.99996) sat 40x closer to 1 than the bound.
SAMPLE = 64
MIN_COSINE = 0.999
# OpenVINO in fp32 differs from torch only in the order of its sums: the minimum over 256 chunks was
# 0.99999988 on an AVX2 AMD EPYC, so a bound 10x tighter than bf16's still sits far from it.
MIN_COSINE_FP32 = 0.9999
# int8 moves every vector a little (mean cosine 0.996 to fp32), so its check bounds the sample's mean, which
# follows what retrieval loses: on the sets of docs/guarantees.md the shipped model's samples reached
# 0.9962-0.9971 (at most 0.5 points lost), a model calibrated on 8 texts 0.9871-0.9904 (1.0 point lost).
# The minimum's bound only catches a chunk the model mangles (the shipped model's: 0.9925-0.9953 on samples,
# 0.979 over all 1,358 Chroma chunks).
MEAN_COSINE_INT8 = 0.993
MIN_COSINE_INT8 = 0.95
_INPUTS = ('input_ids', 'attention_mask', 'token_type_ids')


def check_precision(precision: str, device: str = 'cpu') -> str:
    """Returns `precision` if this machine can embed in it.

    Raises:
      ValueError: For an unknown precision, bf16 or int8 off the CPU,
        without OpenVINO (or NNCF for int8), or on a CPU without bf16 units
        (int8: dot-product units), where it would be slower than fp32.
    """
    import importlib.util

    if precision not in PRECISIONS:
        raise ValueError(f'--embed_precision must be one of {", ".join(PRECISIONS)}, got {precision!r}')
    if precision == FP32:
        return precision
    if device != 'cpu':
        raise ValueError(f'--embed_precision {precision} runs on the CPU (OpenVINO); got --device {device}')
    if precision == BF16 and BF16.upper() not in cpu_capabilities():
        raise ValueError(f'--embed_precision {precision}: this CPU has no bf16 units (AVX-512 BF16 or AMX), '
                         'where bf16 would be slower than fp32: use --embed_precision fp32')
    if precision == INT8 and INT8.upper() not in cpu_capabilities():
        raise ValueError(f'--embed_precision {precision}: this CPU has no int8 dot-product units (AVX-512 VNNI, '
                         'AVX-VNNI or AMX), where int8 was not measured faster: use --embed_precision fp32')
    if precision == INT8 and importlib.util.find_spec('nncf') is None:
        raise ValueError(f"--embed_precision {precision} needs NNCF: pip install 'ragsieve[openvino]'")
    return precision


def default_backend(precision: str) -> str:
    """The precision's own backend: torch for fp32; OpenVINO, the one backend ragsieve runs bf16 and int8 on."""
    return TORCH if precision == FP32 else OPENVINO


# The faster fp32 backend per CPU family (`kernels.cpu_family`) on native kernels, where measured
# (benchmarks/build_throughput.py, docs/guarantees.md): a build given no embedding flag takes it.
# - AMD AVX-512 (issue 56): OpenVINO's build 0.89-0.95x a bare torch encode, torch's native build 1.04-1.20x.
# Elsewhere torch: AVX2 CPUs run portable kernels, whose bits every AVX2 CPU shares and OpenVINO's would
# not; Intel AVX-512 and AMX were not measured in fp32 on OpenVINO.
FASTEST_FP32 = {('AuthenticAMD', 'avx512'): OPENVINO}


def fastest_fp32_backend(kernel_mode: str, device: str = 'cpu', family: Optional[tuple[str, str]] = None) -> str:
    """The backend of a build that names none of precision, backend and kernels: `FASTEST_FP32`, else torch.

    OpenVINO runs on native kernels only, so `kernel_mode` portable (Dataflow's
    default) keeps torch, as does any device but the CPU.
    """
    from transforms.features import kernels

    if device != 'cpu' or kernel_mode != kernels.NATIVE:
        return TORCH
    return FASTEST_FP32.get(kernels.cpu_family() if family is None else family, TORCH)


def check_backend(backend: Optional[str], precision: str, device: str = 'cpu') -> str:
    """The backend a build embeds with: `backend`, or `precision`'s default when None.

    Raises:
      ValueError: For an unknown backend, bf16 on torch, OpenVINO off the
        CPU or without OpenVINO installed.
    """
    import importlib.util

    if backend is None:
        return default_backend(precision)
    if backend not in BACKENDS:
        raise ValueError(f'--embed_backend must be one of {", ".join(BACKENDS)}, got {backend!r}')
    if backend == TORCH and precision != FP32:
        raise ValueError(f'--embed_precision {precision} runs on --embed_backend {OPENVINO}, not {TORCH}')
    if backend == OPENVINO and device != 'cpu':
        raise ValueError(f'--embed_backend {OPENVINO} runs on the CPU; got --device {device}')
    if backend == OPENVINO and importlib.util.find_spec('openvino') is None:
        raise ValueError(f'--embed_backend {OPENVINO} needs OpenVINO, a dependency of ragsieve: pip install ragsieve')
    return backend


def flag_of(precision: str, backend: str) -> str:
    """The flag that asked for a model's OpenVINO forward, for messages."""
    return f'--embed_backend {backend}' if precision == FP32 else f'--embed_precision {precision}'


def min_cosine(precision: str) -> float:
    """The bound a precision's check must reach (read at call time: a test may tighten it)."""
    return {FP32: MIN_COSINE_FP32, INT8: MIN_COSINE_INT8}.get(precision, MIN_COSINE)


def mean_cosine(precision: str) -> float:
    """The bound of the sample's mean cosine: int8's own; elsewhere the minimum's bound already holds it."""
    return MEAN_COSINE_INT8 if precision == INT8 else min_cosine(precision)


def cpu_capabilities() -> list[str]:
    """The reduced precisions this CPU has units for (`BF16`, `INT8`), from its flags.

    Read from /proc/cpuinfo, not from OpenVINO: OpenVINO must not start
    before the kernels are pinned (it would keep a portable parent's
    ONEDNN_MAX_CPU_ISA=AVX2, which hides the bf16 units).
    """
    import importlib.util

    if importlib.util.find_spec('openvino') is None:
        raise ValueError('--embed_precision bf16 and int8 need OpenVINO, a dependency of ragsieve: pip install ragsieve')
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            flags = set(next((line for line in f if line.startswith('flags')), '').split())
    except OSError:
        return []
    return (['FP32'] + (['BF16'] if flags & {'avx512_bf16', 'amx_bf16'} else [])
            + (['INT8'] if flags & {'avx512_vnni', 'avx_vnni', 'amx_int8'} else []))


class OpenVINOForward:
    """Stands in for a SentenceTransformer's forward: its transformer compiled by OpenVINO, then mean pooling.

    In `precision`: fp32 or bf16 (OpenVINO's inference precision hint), or
    int8 (the graph quantized by NNCF, `quantize`).

    Takes the features `embed_texts` builds (token ids, masks) and returns
    `{'sentence_embedding': tensor}` as the model does, so every caller of
    the model (chunkers, deltas, the probe) embeds in the same precision.

    Args:
      converted: The transformer's `ov.Model` (`convert`, or read back from
        the machine's cache: `openvino_model`).
      names: The graph's inputs, in the tokenizer's names.
      weights: The torch model's hash (`models.model_fingerprint`): the key
        of its conversion and of the quality checks.
    """

    def __init__(self, converted, names: Sequence[str], weights: str, precision: str):
        import openvino as ov
        import torch

        # As many threads as torch is given (`--direct_num_workers` processes share the cores alike).
        # int8: what NNCF leaves unquantized (softmax, norms, GELU) runs in fp32.
        self._compiled = ov.Core().compile_model(converted, 'CPU', {
            'INFERENCE_PRECISION_HINT': precision if precision == BF16 else 'f32',
            'INFERENCE_NUM_THREADS': torch.get_num_threads()})
        # An infer request per thread: an engine's SDK worker runs the bundles of several task slots on threads
        # of one process, and a request infers one batch at a time ("Infer Request is busy").
        self._requests = threading.local()
        self.names = list(names)
        self.weights = weights
        self.precision = precision

    @classmethod
    def of(cls, model, precision: str) -> 'OpenVINOForward':
        """Converts a loaded SentenceTransformer's transformer (read back when this machine converted it before).

        Raises:
          ValueError: For a model that pools other than by the mean, or adds
            layers after pooling (they would be skipped).
        """
        import openvino as ov
        import torch

        flag = flag_of(precision, OPENVINO)
        pooling = model[1].get_config_dict() if len(model) > 1 else {}
        if not _mean_pooling(pooling):
            raise ValueError(f'{flag} supports models with mean pooling only '
                             f'(this one pools with {pooling or "none"})')
        after = [type(m).__name__ for m in list(model)[2:]]
        if set(after) - {'Normalize'}:  # a Dense layer after pooling would be skipped
            raise ValueError(f'{flag} supports a transformer, mean pooling and '
                             f'normalization only (this model adds {after})')
        transformer = model[0].auto_model
        example = tokenize(model.tokenizer, ['an example'], padding='max_length', max_length=16, return_tensors='pt')
        names = [n for n in _INPUTS if n in example]
        weights = model_fingerprint(model)

        def convert():
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter('ignore')  # the tracer's warnings about shape-dependent branches
                return ov.convert_model(transformer, example_input={n: example[n] for n in names})

        key = conversion_key(weights, names)
        converted = openvino_cache.converted_model(key, convert)
        if precision == INT8:
            converted = quantized(converted, key, model.tokenizer, model.max_seq_length, names)
        return cls(converted, names, weights, precision)

    def __call__(self, features: dict) -> dict:
        import torch

        request = getattr(self._requests, 'request', None)
        if request is None:
            request = self._requests.request = self._compiled.create_infer_request()
        tokens = request.infer({n: features[n].numpy() for n in self.names})[0]
        mask = features['attention_mask'].numpy()[..., None].astype(np.float32)
        pooled = (tokens * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return {'sentence_embedding': torch.from_numpy(np.ascontiguousarray(pooled, dtype=np.float32))}


def conversion_key(weights: str, names: Sequence[str]) -> str:
    """The key of a model's fp32 conversion in the OpenVINO cache: its weights, its inputs, the libraries."""
    return openvino_cache.digest({'weights': weights, 'inputs': list(names), 'libraries': openvino_cache.libraries()})


def quantized(converted, fp32_key: str, tokenizer, limit: int, names: Sequence[str]):
    """`converted` quantized to int8 on ragsieve's calibration set (`quantize`), kept in the OpenVINO cache."""
    from transforms.features import quantize

    texts = quantize.calibration_texts()

    def inputs(text: str) -> dict:  # padded as `embed_texts` pads it
        n = len(tokenize(tokenizer, [text], truncation=True, max_length=limit)['input_ids'][0])
        features = tokenize(tokenizer, [text], padding='max_length', truncation=True,
                            max_length=padded_length(n, limit), return_tensors='np')
        return {name: features[name] for name in names}

    key = openvino_cache.digest(quantize.quantization_key(fp32_key, texts))
    return openvino_cache.converted_model(key, lambda: quantize.quantize(converted, inputs, texts))


def _mean_pooling(config: dict) -> bool:
    # sentence-transformers 6 names the mode (`pooling_mode: mean`); older configs set one flag of several.
    if 'pooling_mode' in config:
        return config['pooling_mode'] == 'mean'
    modes = [k for k, v in config.items() if k.startswith('pooling_mode_') and v]
    return modes == ['pooling_mode_mean_tokens']


def kernel_mode(precision: str, requested: str, backend: Optional[str] = None) -> str:
    """The kernels a run uses: `requested` in fp32 on torch; native on OpenVINO (it needs the CPU's own units)."""
    from transforms.features import kernels

    return requested if (backend or default_backend(precision)) == TORCH else kernels.NATIVE


def check_kernels(precision: str, requested: Optional[str], backend: Optional[str] = None) -> str:
    """The `--embed_kernels` of a build: the one asked for, else the default of `precision` and `backend`.

    Raises:
      ValueError: For portable kernels asked for with OpenVINO, which runs
        on the CPU's own units (bf16's among them): never silently native.
    """
    from transforms.features import kernels

    backend = backend or default_backend(precision)
    if requested is None:
        return kernels.DEFAULT_MODE if backend == TORCH else kernels.NATIVE
    if backend != TORCH and requested == kernels.PORTABLE:
        raise ValueError(f'--embed_kernels {kernels.PORTABLE} cannot run {flag_of(precision, backend)}, which runs '
                         f'on the CPU\'s own units: drop --embed_kernels, or pass {kernels.NATIVE}')
    return requested


def set_precision(model, precision: str, backend: Optional[str] = None):
    """Makes `model` embed in `precision` on `backend` (OpenVINO: through `OpenVINOForward`); returns it."""
    if (backend or default_backend(precision)) == OPENVINO:
        model.forward = OpenVINOForward.of(model, precision)
    return model


def precision_of(model) -> str:
    forward = model.__dict__.get('forward')
    return forward.precision if isinstance(forward, OpenVINOForward) else FP32


def backend_of(model) -> str:
    return OPENVINO if isinstance(model.__dict__.get('forward'), OpenVINOForward) else TORCH


def weights_of(model) -> str:
    """The hash of the model's weights (`models.model_fingerprint`), computed once for a reduced precision."""
    forward = model.__dict__.get('forward')
    return forward.weights if isinstance(forward, OpenVINOForward) else model_fingerprint(model)


@dataclasses.dataclass(frozen=True)
class QualityCheck:
    """How close OpenVINO's vectors (bf16 or fp32) are to torch's fp32 on a sample (manifest: `precision_check`)."""

    precision: str
    sample: int
    min_cosine: float
    mean_cosine: float
    # True when a previous build on this machine checked the same sample (`openvino_cache`).
    remembered: bool = False

    @classmethod
    def from_json(cls, values: dict) -> 'QualityCheck':
        """A check stored as JSON (`openvino_cache`), its fields and their types verified.

        Raises:
          ValueError: For other fields, a precision ragsieve has no name for,
            a sample that is no positive integer, or cosines that are no
            finite numbers in [-1, 1] (mean at least min).
        """
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(values, dict) or sorted(values) != sorted(names):
            raise ValueError(f'not a check with fields {", ".join(names)}')
        precision, sample = values['precision'], values['sample']
        cosines = values['min_cosine'], values['mean_cosine']
        if precision not in PRECISIONS:
            raise ValueError(f'precision {precision!r} is not one of {", ".join(PRECISIONS)}')
        if not isinstance(sample, int) or isinstance(sample, bool) or sample < 1:
            raise ValueError(f'sample {sample!r} is not a positive integer')
        if not all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and -1 <= c <= 1
                   for c in cosines) or cosines[0] > cosines[1] + 1e-9:
            raise ValueError(f'cosines {list(cosines)!r} are not numbers in [-1, 1] with min <= mean')
        if not isinstance(values['remembered'], bool):
            raise ValueError(f'remembered {values["remembered"]!r} is not true or false')
        return cls(**values)

    @property
    def passed(self) -> bool:
        return self.min_cosine >= min_cosine(self.precision) and self.mean_cosine >= mean_cosine(self.precision)

    def enforce(self) -> 'QualityCheck':
        """Returns the check if it passed.

        Raises:
          ValueError: When the minimum cosine is below `min_cosine(precision)`
            or the mean below `mean_cosine(precision)`.
        """
        if not self.passed:
            remembered = (' (as an earlier build on this machine measured it; its OpenVINO cache holds that '
                          f'check: ${{{openvino_cache.ENV}}}=none measures again)' if self.remembered else '')
            fallback = '--embed_precision fp32' if self.precision != FP32 else f'--embed_backend {TORCH}'
            which, value, bound = (('minimum', self.min_cosine, min_cosine(self.precision))
                                   if self.min_cosine < min_cosine(self.precision)
                                   else ('mean', self.mean_cosine, mean_cosine(self.precision)))
            raise ValueError(f'{flag_of(self.precision, OPENVINO)}: the {which} cosine to fp32 on {self.sample} '
                             f'sampled chunks is {value:.6f}, below {bound}{remembered}: use {fallback}')
        return self


def sample_texts(texts: Sequence[str], n: int = SAMPLE, seed: int = 0) -> list[str]:
    """A fixed, seeded sample of `n` texts (all of them when fewer)."""
    texts = list(texts)
    return texts if len(texts) <= n else random.Random(seed).sample(texts, n)


def check_quality(precision: str, reduced: np.ndarray, full: np.ndarray) -> QualityCheck:
    """Compares a sample's unit vectors from OpenVINO in `precision` (`reduced`) with torch's fp32 (`full`).

    Raises:
      ValueError: When the minimum cosine is below `min_cosine(precision)`.
    """
    cosines = (reduced * full).sum(axis=1) if len(reduced) else np.ones(1)
    return QualityCheck(precision, len(reduced), round(float(cosines.min()), 7),
                        round(float(cosines.mean()), 7)).enforce()


@contextlib.contextmanager
def fp32_forward(model):
    """A context in which `model` runs its own fp32 forward, whatever precision it was set to."""
    reduced = model.__dict__.pop('forward', None)
    try:
        yield model
    finally:
        if reduced is not None:
            model.forward = reduced
