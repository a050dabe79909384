"""`--embed_precision int8`: the model's OpenVINO graph quantized statically by NNCF on a set that ships with ragsieve.

Static quantization fixes each activation's int8 scale from the ranges it
takes on a calibration set. Calibrated on the corpus being built, the model
(and every vector) would change with the input, so a rebuild and a fresh
build, or two corpora, would not share a model: the set is
`calibration/texts.txt` (ragsieve's own prose: its docs' paragraphs and
headings, `benchmarks/studies/calibration_set.py`), fixed in the package.

NNCF's defaults for transformers (SmoothQuant, then fast bias correction)
quantize the matrix products and keep softmax, layer norms and GELU in
fp32: measured on an AVX-512 VNNI AMD EPYC, 0.28x torch fp32's encode time
at a mean cosine of 0.996 to it (docs/guarantees.md has the retrieval
figures that decide it). Quantizing takes ~20 s, once per machine: the
quantized graph is kept in the OpenVINO cache (`openvino_cache`), keyed by
the fp32 graph's key, the calibration set, NNCF's version and the CPU (its
statistics are computed by this CPU's fp32 kernels).

NNCF comes with the `[openvino]` extra (`pip install 'ragsieve[openvino]'`); OpenVINO is a dependency.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
from pathlib import Path
from typing import Callable, Sequence

LOG = logging.getLogger('ragsieve.openvino')
CALIBRATION = Path(__file__).with_name('calibration') / 'texts.txt'


def calibration_texts(path: Path = CALIBRATION) -> list[str]:
    """The calibration set: one text per line."""
    texts = [line for line in path.read_text(encoding='utf-8').splitlines() if line.strip()]
    if not texts:
        raise ValueError(f'the int8 calibration set {path} is empty')
    return texts


def calibration_digest(texts: Sequence[str]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for text in texts:
        digest.update(text.encode('utf-8') + b'\0')
    return digest.hexdigest()


def quantization_key(fp32_key: str, texts: Sequence[str]) -> dict:
    """What the int8 graph depends on beside the fp32 graph (`fp32_key`): the set, NNCF and the CPU."""
    from importlib.metadata import version

    from transforms.features import kernels

    # NNCF's version from its metadata: importing it (~2 s) is for a machine's first int8 build only.
    return {'fp32': fp32_key, 'calibration': calibration_digest(texts), 'nncf': version('nncf'),
            'cpu': kernels.cpu_name(), 'flags': kernels.cpu_flags()}


def quantize(model, inputs: Callable[[str], dict], texts: Sequence[str]):
    """The `ov.Model` `model` quantized to int8 on `texts`, each turned into the graph's inputs by `inputs`.

    Each text is one calibration item, padded as `embed_texts` pads it, so
    the ranges seen are the ones a build's batches produce.
    """
    import nncf

    LOG.info('quantizing the embedding model to int8 on %d calibration texts (once per machine)', len(texts))
    # NNCF draws progress bars on stdout: a build's output is its own.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return nncf.quantize(model, nncf.Dataset([inputs(t) for t in texts]), model_type=nncf.ModelType.TRANSFORMER,
                             subset_size=len(texts))
