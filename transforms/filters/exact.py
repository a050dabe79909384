"""ExactNorm: identical normalized text (the study's `ExactNorm`)."""

from transforms import dedup
from transforms.filters import GROUPED, FilterDef


def content_hash_of(chunk) -> str:
    """The group key: the hash of the normalized text."""
    return chunk.content_hash


def decide(chunks, threshold, config):
    return dedup.drop_exact(chunks)


FILTER = FilterDef(
    name='exact', label='ExactNorm', position=0,
    removes='identical normalized text (NFKC, casefold, whitespace collapsed), corpus-wide',
    default=None, needs=frozenset(), strategy=GROUPED, decide=decide, group_key=content_hash_of)
