"""The shared checks of settings and values."""

import numpy as np
import pytest

from transforms.validate import vector_problem


def test_a_unit_vector_passes_and_float32_rounding_is_no_problem():
    v = np.random.default_rng(0).standard_normal(384)
    assert vector_problem((v / np.linalg.norm(v)).astype(np.float32)) is None


@pytest.mark.parametrize('vector, why', [
    ([float('nan'), 0.0], '1 of its 2 values are NaN or infinite'),
    ([float('inf'), 0.0], 'NaN or infinite'),
    ([1e31, 0.0], 'its norm is 1e+31, not 1'),
    ([0.0, 0.0], 'its norm is 0, not 1'),
    ([0.6, 0.7], 'not 1'),
    ([], 'not a vector'),
    ([[1.0]], 'not a vector'),
])
def test_what_no_index_may_hold(vector, why):
    assert why in vector_problem(vector)
