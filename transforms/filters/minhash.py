"""MinHash-LSH: lexical near-duplicates by estimated Jaccard (the study's `MinHash-LSH`)."""

from transforms import dedup
from transforms.filters import PAIRS, FilterDef


def decide(chunks, threshold, config):
    b, r = config.minhash_config(threshold).bands()
    return dedup.drop_minhash_groups(chunks, threshold, b, r)


def transform(index, spec, config):
    from transforms.filter_pairs import DropNearDuplicates

    b, r = config.minhash_config(spec.threshold).bands()
    return DropNearDuplicates(spec.threshold, b, r, index, config.scope)


FILTER = FilterDef(
    name='minhash', label='MinHash-LSH', position=1,
    removes='near-duplicates by MinHash-LSH: candidates from shared LSH band keys (a GroupByKey, '
            'never all pairs), each bucket member checked by estimated Jaccard against the '
            "bucket's first members and its predecessor in keep order (O(n) per bucket), "
            'grouped by connected components',
    default=0.8, needs=frozenset({'minhash'}), strategy=PAIRS, decide=decide, beam_transform=transform)
