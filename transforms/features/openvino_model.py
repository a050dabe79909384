"""An OpenVINO embedding model read back from the machine's cache, without loading torch's copy.

A build on OpenVINO (the default fp32 on AMD AVX-512, bf16, int8) needs
torch's model only to convert it: once the conversion is saved
(`openvino_cache`), what embeds is the saved graph and the tokenizer. Loading
the SentenceTransformer anyway imports sentence-transformers, scikit-learn
and SciPy (~3 s of every build and SDK worker, measured on an AMD EPYC); the
tokenizer alone loads in ~0.8 s. So the first load of a model on a machine
records, beside its conversion, what a build reads of the model (`Loaded`:
its weights' hash, the graph's inputs, its max_seq_length and dimension, the
tokenizer's state), keyed by the digest of the model's files; later loads
read the graph back under that record. The tokenizer loaded so must have the
recorded state, or the model is loaded whole, as is every model whose record
or graph is missing or fails verification.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from pathlib import Path
from typing import Optional

from transforms.features import kernels, openvino_cache, precision as precisions
from transforms.features.models import load_embedding_model, resolve_model_path, tokenizer_state

LOG = logging.getLogger('ragsieve.openvino')
LOADS = 'loads'


@dataclasses.dataclass(frozen=True)
class Loaded:
    """What a build reads of a loaded model, recorded at its conversion (`remember`)."""

    weights: str
    inputs: list
    max_seq_length: int
    dimension: int
    tokenizer: str  # the digest of `models.tokenizer_state`

    @classmethod
    def from_json(cls, values: dict) -> 'Loaded':
        """A stored record, its fields and their types verified (ValueError where they differ)."""
        names = sorted(f.name for f in dataclasses.fields(cls))
        if not isinstance(values, dict) or sorted(values) != names:
            raise ValueError(f'not a record with fields {", ".join(names)}')
        loaded = cls(**values)
        if not (all(isinstance(v, str) for v in (loaded.weights, loaded.tokenizer))
                and all(isinstance(n, str) for n in loaded.inputs) and isinstance(loaded.inputs, list)
                and all(isinstance(v, int) and v > 0 for v in (loaded.max_seq_length, loaded.dimension))):
            raise ValueError('a field has the wrong type')
        return loaded


def files_digest(path: str) -> str:
    """Digest of a model directory's files, names and contents (~0.13 s for all-MiniLM-L6-v2's 90 MB)."""
    digest = hashlib.blake2b(digest_size=16)
    for folder, _, files in sorted(os.walk(path)):  # the whole walk, sorted by folder: one order on any disk
        for name in sorted(files):
            file = Path(folder) / name
            digest.update(str(file.relative_to(path)).encode('utf-8') + b'\0')
            with open(file, 'rb') as f:
                for block in iter(lambda: f.read(1 << 20), b''):
                    digest.update(block)
    return digest.hexdigest()


def load_key(path: str) -> str:
    """The record's key: the model's files and the libraries that load, convert and run it."""
    return openvino_cache.digest({'files': files_digest(path), 'libraries': openvino_cache.libraries()})


def _tokenizer_digest(tokenizer) -> str:
    return hashlib.blake2b((tokenizer_state(tokenizer) or '').encode('utf-8'), digest_size=16).hexdigest()


class SavedModel:
    """A model that embeds through its saved OpenVINO graph, with what ragsieve calls on a SentenceTransformer.

    Its own `forward` (torch fp32, for the precision check's other half:
    `precision.fp32_forward`) loads the SentenceTransformer on first use.
    """

    device = 'cpu'

    def __init__(self, path: str, loaded: Loaded, tokenizer, forward: precisions.OpenVINOForward, kernel_mode: str):
        self._path = path
        self._loaded = loaded
        self._kernel_mode = kernel_mode
        self._torch_model = None
        self.tokenizer = tokenizer
        self.max_seq_length = loaded.max_seq_length
        self.__dict__['forward'] = forward  # what `precision.precision_of` and `backend_of` read

    def get_embedding_dimension(self) -> int:
        return self._loaded.dimension

    def __call__(self, features: dict) -> dict:
        return self.forward(features)

    def forward(self, features: dict) -> dict:
        """torch's fp32 forward, run while `precision.fp32_forward` takes the OpenVINO one off."""
        import torch

        if self._torch_model is None:
            self._torch_model = load_embedding_model(self._path, self.device, self._kernel_mode)
        with torch.inference_mode():
            return self._torch_model(features)


def load(name_or_path: str, precision: str, kernel_mode: str = kernels.NATIVE):
    """The model embedding in `precision` on OpenVINO: read back as a `SavedModel` when this machine converted
    it before, else loaded whole and converted (`precision.set_precision`), its record kept for the next load."""
    path = resolve_model_path(name_or_path)
    key = load_key(path) if openvino_cache.root() and os.path.isdir(path) else None
    saved = _saved(path, key, precision, kernel_mode) if key else None
    if saved is not None:
        return saved
    model = precisions.set_precision(load_embedding_model(path, 'cpu', kernel_mode), precision, precisions.OPENVINO)
    if key:
        forward = model.__dict__['forward']
        openvino_cache.remember(LOADS, key, dataclasses.asdict(Loaded(
            forward.weights, list(forward.names), model.max_seq_length, model.get_embedding_dimension(),
            _tokenizer_digest(model.tokenizer))))
    return model


def _saved(path: str, key: str, precision: str, kernel_mode: str) -> Optional[SavedModel]:
    """The `SavedModel` of `path` (its record under `key`), or None where its record, its graph or its
    tokenizer's state is missing or differs (the model is then loaded whole)."""
    kernels.pin(kernel_mode)
    loaded = openvino_cache.remembered(LOADS, key, Loaded.from_json, 'loading the model whole')
    if loaded is None:
        return None
    os.environ.setdefault('HF_HUB_OFFLINE', '1')
    os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')
    from transformers import AutoTokenizer

    # As sentence-transformers loads it (its Transformer module): the model's max_seq_length as its maximum.
    tokenizer = AutoTokenizer.from_pretrained(path, model_max_length=loaded.max_seq_length)
    if _tokenizer_digest(tokenizer) != loaded.tokenizer:
        LOG.info('the tokenizer of %s loaded alone differs from the one sentence-transformers loads: loading the '
                 'model whole', path)
        return None
    key = precisions.conversion_key(loaded.weights, loaded.inputs)
    converted = openvino_cache.saved_model(key)
    if converted is None:
        return None
    if precision == precisions.INT8:
        converted = precisions.quantized(converted, key, tokenizer, loaded.max_seq_length, loaded.inputs)
    forward = precisions.OpenVINOForward(converted, loaded.inputs, loaded.weights, precision)
    kernels.check(kernel_mode, 'cpu')
    return SavedModel(path, loaded, tokenizer, forward, kernel_mode)
