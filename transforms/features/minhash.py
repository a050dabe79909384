"""MinHash signatures of word shingles and LSH banding, for lexical near-duplicates."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import struct
from typing import Sequence

import numpy as np
from datasketch import MinHash
from datasketch.lsh import _optimal_param

from transforms.text import normalize_text
from transforms.validate import check_threshold


@dataclasses.dataclass(frozen=True)
class MinHashConfig:
    """How chunks are shingled, hashed and banded.

    Attributes:
      num_perm: Permutations, i.e. hash values per signature (default 128).
      shingle_size: Words per shingle (default 3).
      seed: Seed of datasketch's permutations (default 1, datasketch's own);
        signatures are comparable only when computed with the same seed.
      threshold: Estimated Jaccard at or above which two chunks are
        near-duplicates (default 0.8, as in the study); also picks the LSH
        bands (see `lsh_bands`).
    """

    num_perm: int = 128
    shingle_size: int = 3
    seed: int = 1
    threshold: float = 0.8

    def __post_init__(self):
        if self.num_perm <= 0:
            raise ValueError(f'minhash num_perm must be > 0, got {self.num_perm}')
        if self.shingle_size <= 0:
            raise ValueError(f'minhash shingle_size must be > 0, got {self.shingle_size}')
        if self.seed < 0:
            raise ValueError(f'minhash seed must be >= 0, got {self.seed}')
        check_threshold('minhash threshold', self.threshold)

    def bands(self) -> tuple[int, int]:
        """Returns `(b, r)` for this config's threshold and num_perm."""
        return lsh_bands(self.threshold, self.num_perm)


def shingles(text: str, n: int) -> set[str]:
    """Returns the set of `n`-word shingles of the normalized text.

    Words are the whitespace-separated tokens of `normalize_text(text)`, so
    case, Unicode form and spacing do not matter. A text of fewer than `n`
    words gives a single shingle of all its words, so short chunks still have
    a signature; an empty (or all-whitespace) text gives the empty set.

    Args:
      text: The text to shingle.
      n: Words per shingle, > 0.

    Returns:
      The shingles, each `n` words joined by single spaces.

    Raises:
      ValueError: If `n` is not positive.
    """
    if n <= 0:
        raise ValueError(f'shingle size must be > 0, got {n}')
    words = normalize_text(text).split(' ')
    if words == ['']:
        return set()
    if len(words) <= n:
        return {' '.join(words)}
    return {' '.join(words[i : i + n]) for i in range(len(words) - n + 1)}


@functools.lru_cache(maxsize=None)
def _empty_value() -> int:
    # datasketch's hash scheme fixes the maximum value; a fresh MinHash holds it.
    return int(MinHash(num_perm=1, gpu_mode='disable').hashvalues[0])


def is_empty_signature(signature: np.ndarray) -> bool:
    """Whether a signature is that of the empty shingle set (every value at its maximum).

    Two empty signatures estimate Jaccard 1.0, so grouping by signature must
    leave these out (`filters.minhash.drop_minhash_groups` does).
    """
    values = np.asarray(signature, dtype=np.uint64)
    return bool(np.all(values == np.uint64(_empty_value())))


def signatures(texts: Sequence[str], config: MinHashConfig = MinHashConfig()) -> np.ndarray:
    """Computes the MinHash signature of each text's shingle set.

    Each text's shingles are hashed in one batched `update_batch` call (via
    `MinHash.bulk`), which vectorizes the permutations over all shingles; the
    result equals per-shingle `update` calls.

    Args:
      texts: The texts.
      config: Shingle size, permutations and seed.

    Returns:
      A `(len(texts), config.num_perm)` uint64 array, one signature per row.
    """
    out = np.empty((len(texts), config.num_perm), dtype=np.uint64)
    if not texts:
        return out
    shingle_bytes = [
        [s.encode('utf-8') for s in shingles(text, config.shingle_size)]
        for text in texts
    ]
    minhashes = MinHash.bulk(
        shingle_bytes, num_perm=config.num_perm, seed=config.seed, gpu_mode='disable'
    )
    for i, m in enumerate(minhashes):
        out[i] = m.hashvalues
    return out


# Every candidate pair is verified by estimated Jaccard, so a false positive
# only costs one comparison while a false negative silently keeps a duplicate:
# the band search weighs misses 9:1. On the Chroma corpora (recursive 400/200)
# recall of the pairs over the threshold, against all pairs, rose from
# 0.91-0.95 with datasketch's default 0.5/0.5 to 0.997-1.0.
FALSE_NEGATIVE_WEIGHT = 0.9


def lsh_bands(
    threshold: float, num_perm: int, false_negative_weight: float = FALSE_NEGATIVE_WEIGHT
) -> tuple[int, int]:
    """Chooses LSH bands `b` and rows per band `r` for a Jaccard threshold.

    Uses datasketch's `MinHashLSH` parameter search (`datasketch.lsh._optimal_param`,
    a private helper), which minimizes the weighted false-positive and
    false-negative probability areas of the S-curve `1 - (1 - s**r)**b` around
    `threshold`, subject to `b * r <= num_perm`. Results equal what
    `MinHashLSH(threshold, num_perm, weights=(1 - w, w))` would use, e.g.
    `(14, 9)` for 0.8 and 128 with the default weight.

    Args:
      threshold: Jaccard threshold in (0, 1].
      num_perm: Signature length.
      false_negative_weight: Weight of missed pairs, in (0, 1).

    Returns:
      `(b, r)` with `b * r <= num_perm`.

    Raises:
      ValueError: If the arguments are out of range.
    """
    check_threshold('LSH threshold', threshold)
    if num_perm <= 0:
        raise ValueError(f'num_perm must be > 0, got {num_perm}')
    if not 0.0 < false_negative_weight < 1.0:
        raise ValueError(f'false_negative_weight must be in (0, 1), got {false_negative_weight}')
    b, r = _optimal_param(threshold, num_perm, 1.0 - false_negative_weight, false_negative_weight)
    return int(b), int(r)


def band_keys(signature: np.ndarray, b: int, r: int) -> list[bytes]:
    """Returns one bucket key per LSH band of a signature.

    A key is the band index (2 bytes, big-endian) followed by a 16-byte
    blake2b digest of the band's `r` values as little-endian uint64, so equal
    bands in different workers give equal keys, and equal values in different
    bands do not collide.

    Args:
      signature: One signature (at least `b * r` values).
      b: Number of bands.
      r: Values per band.

    Returns:
      `b` keys of 18 bytes each.

    Raises:
      ValueError: If the signature is shorter than `b * r`.
    """
    values = np.asarray(signature, dtype='<u8')
    if b <= 0 or r <= 0 or b * r > values.shape[0]:
        raise ValueError(f'need b, r > 0 and b * r <= {values.shape[0]}, got b={b}, r={r}')
    return [
        struct.pack('>H', i)
        + hashlib.blake2b(values[i * r : (i + 1) * r].tobytes(), digest_size=16).digest()
        for i in range(b)
    ]


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Returns the fraction of positions where two signatures agree.

    Raises:
      ValueError: If the signatures differ in length.
    """
    a = np.asarray(sig_a)
    b = np.asarray(sig_b)
    if a.shape != b.shape:
        raise ValueError(f'signature shapes differ: {a.shape} vs {b.shape}')
    return float(np.count_nonzero(a == b)) / float(a.shape[0])
