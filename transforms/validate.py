"""The checks settings share: one place for the ranges thresholds and fractions must fall in."""

from __future__ import annotations

import math


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
