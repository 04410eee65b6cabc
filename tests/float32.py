"""Tolerances of float32 comparisons, scaled with what is summed.

Two programs that sum the same float32 terms in different orders (another XLA, another batch
shape, a loop against a matrix product) agree only up to the rounding of the partial sums: each
of the `terms` additions rounds by at most half an ulp of the running total, so the two results
differ by at most about `terms` · ε · the largest magnitude the sum reaches.
"""

from __future__ import annotations

import numpy as np

EPS = float(np.finfo(np.float32).eps)


def summed_atol(terms: int, reference) -> float:
    """The absolute tolerance of values that each sum `terms` float32 terms, for `reference` (the
    expected values, whose largest magnitude stands for the running totals')."""
    return terms * EPS * max(float(np.max(np.abs(reference))), 1.0)
