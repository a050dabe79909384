"""The one stable hash of ids: keyed or personalized blake2b, the same on every worker, run and machine."""

from __future__ import annotations

import hashlib


def stable_hash(text: str, *, person: bytes = b'', key: bytes = b'') -> int:
    """A 64-bit hash of `text` for sharding, sampling and seeded draws.

    Unlike `hash()` it is not salted per process, so every worker and run
    agrees. `person` separates uses (shards, samples) so that they are
    independent of each other; `key` seeds a draw.

    Args:
      text: What is hashed (a doc id, a chunk id, ...).
      person: A blake2b personalization of at most 16 bytes.
      key: A blake2b key of at most 64 bytes (e.g. a seed's digits).

    Returns:
      An integer in [0, 2**64), big-endian, so integers sort as their digests do.
    """
    digest = hashlib.blake2b(text.encode('utf-8'), digest_size=8, person=person, key=key).digest()
    return int.from_bytes(digest, 'big')
