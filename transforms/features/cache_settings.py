"""What each cached feature depends on besides its text: the keys of the feature cache."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
from typing import Iterable, Mapping, Optional

# A document's chunk spans, keyed by the document's text: unchanged documents
# are not tokenized again, and semantic chunkers do not embed their pieces again.
SPANS = 'spans'
# Per-chunk features, keyed by the chunk's text.
CHUNK_FEATURES = ('embedding', 'entities', 'minhash')
# What a cache may hold, in the order a run lists its specs.
CACHED_FEATURES = (SPANS, 'embedding', 'minhash', 'entities')


@dataclasses.dataclass(frozen=True)
class CacheSpec:
    """One feature's cache: the feature and what its values depend on besides the text.

    Attributes:
      feature: One of CACHED_FEATURES.
      settings: JSON-able description of the model and parameters; equal
        settings must mean equal values for equal texts.
    """

    feature: str
    settings: Mapping

    def __post_init__(self):
        if self.feature not in CACHED_FEATURES:
            raise ValueError(f'unknown cached feature {self.feature!r}; one of {CACHED_FEATURES}')

    @property
    def settings_id(self) -> str:
        canonical = json.dumps(self.settings, sort_keys=True, separators=(',', ':'))
        return hashlib.blake2b(canonical.encode('utf-8'), digest_size=8).hexdigest()

    def directory(self, root: str) -> str:
        return posixpath.join(root, self.feature, self.settings_id)


def _versions(*packages: str) -> dict:
    from importlib import metadata

    return {p: metadata.version(p) for p in packages}


def embedding_settings(model_name: str, model, device: str) -> dict:
    """What a chunk's embedding depends on besides its text.

    The weights are identified by their hash (`models.model_fingerprint`), so
    two paths to one model share entries and a retrained model under an old
    name does not; `scheme` names ragsieve's padding, and `kernels` the
    digest of the arithmetic (`embedding.kernel_probe`), which the vectors'
    last bits depend on: vectors of other kernels are never mixed in.
    """
    from transforms.features.embedding import kernel_probe
    from transforms.features.models import LENGTH_BUCKET
    from transforms.features.precision import INT8, backend_of, default_backend, precision_of, weights_of
    from transforms.features.quantize import calibration_digest, calibration_texts

    return {
        'model': model_name,
        'weights': weights_of(model),
        'max_seq_length': model.max_seq_length,
        'device': device,
        'scheme': f'bucket-padding-{LENGTH_BUCKET}',
        'kernels': kernel_probe(model, device),
        # Also in the probe's digest; named so that a cache listing says why fp32 and bf16 never mix.
        'precision': precision_of(model),
        # Named only off the precision's own backend (OpenVINO in fp32), so that the keys of existing caches stay.
        **({} if backend_of(model) == default_backend(precision_of(model)) else {'backend': backend_of(model)}),
        # int8: the calibration set the model was quantized on (the probe's digest follows it too).
        **({'quantized': calibration_digest(calibration_texts())} if precision_of(model) == INT8 else {}),
        **_versions('torch', 'transformers', 'sentence-transformers'),
    }


def other_kernels(settings: Mapping, cached: Iterable[Mapping]) -> Optional[Mapping]:
    """Cached embedding settings that differ from `settings` in their kernels (and backend) alone, or None.

    Such entries are the same model's vectors from another CPU family, or
    from the other fp32 backend (a cache of torch's builds met by the
    default on OpenVINO, issue 56): a run embeds again rather than mix
    their last bits with its own.
    """
    def rest(values: Mapping) -> dict:
        return {k: v for k, v in values.items() if k not in ('kernels', 'backend')}

    return next((other for other in cached
                 if other.get('kernels') != settings.get('kernels') and rest(other) == rest(settings)), None)


def minhash_settings(config) -> dict:
    """What a MinHash signature depends on besides the text (not the threshold: it only bands)."""
    return {
        'num_perm': config.num_perm,
        'shingle_size': config.shingle_size,
        'seed': config.seed,
        'scheme': 'normalized-word-shingles',
        **_versions('datasketch'),
    }


def entity_settings(model_name: str, meta: Mapping, labels: Optional[Iterable[str]]) -> dict:
    """What a chunk's entities depend on besides its text; `meta` is the spaCy model's meta.json."""
    return {
        'model': model_name,
        'model_name': meta.get('name'),
        'model_version': meta.get('version'),
        'labels': None if labels is None else sorted(labels),
        'scheme': 'label-normalized-text',
        **_versions('spacy'),
    }


def spans_settings(chunker, embedding: Mapping) -> dict:
    """What a document's chunk spans depend on besides its text.

    Args:
      chunker: The `ChunkerConfig`.
      embedding: `embedding_settings` of the model: its tokenizer counts the
        tokens, and semantic chunkers embed with it.
    """
    return {
        # Default parameters leave the key out, so caches written before they existed stay valid.
        'chunker': {k: v for k, v in dataclasses.asdict(chunker).items() if k != 'params' or v},
        'scheme': 'token-spans-v2',  # v2: spans capped at chunking.max_chunk_chars
        'embedding': dict(embedding),
    }


def cache_specs(features: Iterable[str], embedding, model, settings, chunker=None,
                ner_meta: Optional[Mapping] = None) -> list[CacheSpec]:
    """The one place a run's cache specs are made: the build's and the evaluation's.

    Args:
      features: The features to cache, of `CACHED_FEATURES`.
      embedding: The run's `EmbeddingConfig` (model name, device).
      model: The loaded embedding model (its weights and kernels are hashed).
      settings: The run's `FeatureConfig` (MinHash, entities).
      chunker: The run's `ChunkerConfig`; needed to cache spans.
      ner_meta: The loaded spaCy model's meta.json; read from the package
        (`entities.model_meta`) when not given.

    Returns:
      One spec per feature, in `CACHED_FEATURES` order.
    """
    from transforms.features.entities import model_meta

    wanted = set(features)
    unknown = wanted - set(CACHED_FEATURES)
    if unknown:
        raise ValueError(f'features {sorted(unknown)} are not cached; expected some of {CACHED_FEATURES}')
    vectors = embedding_settings(embedding.model, model, embedding.device)
    made = {
        'spans': lambda: spans_settings(chunker, vectors),
        'embedding': lambda: vectors,
        'minhash': lambda: minhash_settings(settings.minhash_config()),
        'entities': lambda: entity_settings(
            settings.spacy_model, ner_meta if ner_meta is not None else model_meta(settings.spacy_model),
            settings.entity_labels),
    }
    return [CacheSpec(f, made[f]()) for f in CACHED_FEATURES if f in wanted]
