"""How the per-chunk features other than embeddings are computed: MinHash, entities, topics."""

from __future__ import annotations

import dataclasses
from typing import Optional

from transforms.features.entities import DEFAULT_LABELS, DEFAULT_NER_MODEL
from transforms.features.minhash import MinHashConfig


@dataclasses.dataclass(frozen=True)
class FeatureConfig:
    """The settings of the MinHash signatures, the entities and the topics.

    Attributes:
      minhash_num_perm: MinHash signature length (default 128).
      minhash_shingle_size: Words per shingle (default 3).
      minhash_seed: Seed of the MinHash permutations (default 1, datasketch's).
      spacy_model: spaCy package or path whose `ner` extracts entities.
      entity_labels: Entity labels kept, sorted; None keeps every label
        (default: the eleven OntoNotes name types, `entities.DEFAULT_LABELS`).
      entity_batch_size: Texts per `nlp.pipe` batch (default 64).
      n_topics: KMeans clusters of the topics; None picks
        `topics.default_n_topics(n)`.
      topic_seed: KMeans random state (default 0); also seeds the clusters
        that propose the similarity filters' candidates.
    """

    minhash_num_perm: int = 128
    minhash_shingle_size: int = 3
    minhash_seed: int = 1
    spacy_model: str = DEFAULT_NER_MODEL
    entity_labels: Optional[tuple[str, ...]] = tuple(sorted(DEFAULT_LABELS))
    entity_batch_size: int = 64
    n_topics: Optional[int] = None
    topic_seed: int = 0

    def __post_init__(self):
        # Builds (and so validates) the MinHash settings even if unused.
        self.minhash_config()
        if self.entity_labels is not None and not self.entity_labels:
            raise ValueError('entity_labels must name at least one label (or be None for all)')
        if self.entity_batch_size <= 0:
            raise ValueError(f'entity_batch_size must be > 0, got {self.entity_batch_size}')
        if self.n_topics is not None and self.n_topics <= 0:
            raise ValueError(f'n_topics must be > 0, got {self.n_topics}')

    def minhash_config(self, threshold: float = 0.8) -> MinHashConfig:
        """The MinHash settings; `threshold` only picks the LSH bands, never the signatures."""
        return MinHashConfig(self.minhash_num_perm, self.minhash_shingle_size, self.minhash_seed, threshold)
