"""The checks settings and values share: the ranges thresholds and fractions must fall in, unit vectors."""

from __future__ import annotations

import math
from typing import Optional

# How far from 1 the norm of a normalized float32 embedding may be (bf16 models included).
UNIT_TOLERANCE = 1e-3


def check_threshold(what: str, value: float) -> float:
    """Returns `value` if it is in (0, 1] (a cosine, a Jaccard); otherwise names `what` in a ValueError."""
    if not (isinstance(value, (int, float)) and 0.0 < value <= 1.0):
        raise ValueError(f'{what} must be in (0, 1], got {value}')
    return value


def check_fraction(what: str, value: float) -> float:
    """Returns `value` if it is in [0, 1] (a share, a ratio); otherwise names `what` in a ValueError."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f'{what} must be in [0, 1], got {value}')
    return value


def vector_problem(vector) -> Optional[str]:
    """Why an embedding must not be indexed (a NaN or infinity, a norm that is not 1), or None.

    Every embedding ragsieve stores is L2-normalized, so its scores are
    cosines; whatever its source (the model, the feature cache), a vector
    that is not is damage, never data.
    """
    import numpy as np

    x = np.asarray(vector, dtype=np.float64)
    if x.ndim != 1 or not x.size:
        return f'not a vector (shape {x.shape})'
    if not np.isfinite(x).all():
        return f'{int((~np.isfinite(x)).sum())} of its {x.size} values are NaN or infinite'
    norm = float(np.linalg.norm(x))
    if abs(norm - 1.0) > UNIT_TOLERANCE:
        return f'its norm is {norm:.6g}, not 1'
    return None
