"""MinHash shingles, signatures and LSH banding, with the real datasketch."""

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH

from transforms.features.minhash import (
    MinHashConfig,
    band_keys,
    estimated_jaccard,
    is_empty_signature,
    lsh_bands,
    shingles,
    signatures,
)

TEXT = (
    'The Tower Building of the Little Rock Arsenal is a building located in MacArthur '
    'Park in downtown Little Rock, Arkansas. Built in 1840, it was part of the arsenal.'
)


def test_shingles_are_word_ngrams_of_normalized_text():
    assert shingles('A  b\nC d', 3) == {'a b c', 'b c d'}
    assert shingles('ONE two', 3) == {'one two'}
    assert shingles('one two three', 3) == {'one two three'}
    assert shingles('', 3) == set()
    assert shingles(' \n\t', 3) == set()
    with pytest.raises(ValueError):
        shingles('a b', 0)


def test_config_validation():
    assert MinHashConfig().bands() == (14, 9)
    bad_configs = [{'num_perm': 0}, {'shingle_size': 0}, {'threshold': 0.0}, {'threshold': 1.5}, {'seed': -1}]
    for bad in bad_configs:
        with pytest.raises(ValueError):
            MinHashConfig(**bad)


def test_signatures_equal_per_shingle_updates():
    config = MinHashConfig(num_perm=64, seed=7)
    texts = [TEXT, 'short text', TEXT.upper()]
    sigs = signatures(texts, config)
    assert sigs.shape == (3, 64) and sigs.dtype == np.uint64
    for text, sig in zip(texts, sigs):
        m = MinHash(num_perm=64, seed=7)
        for s in shingles(text, config.shingle_size):
            m.update(s.encode('utf-8'))
        np.testing.assert_array_equal(sig, m.hashvalues.astype(np.uint64))
    np.testing.assert_array_equal(sigs[0], sigs[2])  # normalization: case does not matter


def test_signatures_do_not_depend_on_batch():
    texts = [TEXT, 'another text entirely about something else', 'x y z w']
    together = signatures(texts)
    alone = np.concatenate([signatures([t]) for t in texts])
    np.testing.assert_array_equal(together, alone)
    assert signatures([]).shape == (0, 128)


def test_estimated_jaccard_tracks_true_jaccard():
    words = [f'w{i}' for i in range(200)]
    a = ' '.join(words)
    b = ' '.join(words[:150] + [f'v{i}' for i in range(50)])
    sa, sb = shingles(a, 3), shingles(b, 3)
    true = len(sa & sb) / len(sa | sb)
    sigs = signatures([a, b], MinHashConfig(num_perm=256))
    assert abs(estimated_jaccard(sigs[0], sigs[1]) - true) < 0.1
    assert estimated_jaccard(sigs[0], sigs[0]) == 1.0
    with pytest.raises(ValueError):
        estimated_jaccard(sigs[0], sigs[0][:10])


def test_empty_text_has_the_empty_signature():
    sigs = signatures(['', TEXT])
    assert is_empty_signature(sigs[0])
    assert not is_empty_signature(sigs[1])


def test_lsh_bands_match_datasketch_lsh():
    for threshold in (0.5, 0.7, 0.8, 0.9):
        b, r = lsh_bands(threshold, 128)
        assert b * r <= 128
        lsh = MinHashLSH(threshold=threshold, num_perm=128, weights=(0.1, 0.9))
        assert (b, r) == (lsh.b, lsh.r)
    with pytest.raises(ValueError):
        lsh_bands(0.0, 128)


def test_band_keys_are_deterministic_and_band_specific():
    sig = signatures([TEXT])[0]
    keys = band_keys(sig, 9, 13)
    assert len(keys) == 9 and len(set(keys)) == 9
    assert keys == band_keys(sig.copy(), 9, 13)
    # Equal values in different bands give different keys.
    flat = np.zeros(8, dtype=np.uint64)
    assert len(set(band_keys(flat, 4, 2))) == 4
    with pytest.raises(ValueError):
        band_keys(sig, 20, 13)


def test_near_duplicates_share_a_band_and_strangers_do_not():
    typo = TEXT.replace('located', 'locatd')
    other = 'Valkyria Chronicles III is a tactical role-playing game developed by Sega.'
    sigs = signatures([TEXT, typo, other])
    b, r = lsh_bands(0.8, 128)
    keys = [set(band_keys(s, b, r)) for s in sigs]
    assert keys[0] & keys[1]
    assert not keys[0] & keys[2]
