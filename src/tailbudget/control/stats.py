"""Confidence bounds the controller uses so it does not act on noise."""

from __future__ import annotations

import math
from statistics import NormalDist


def z_of(confidence: float) -> float:
    """One-sided normal quantile for a confidence level (0.975 -> 1.96)."""
    return NormalDist().inv_cdf(confidence)


def wilson(errors: float, count: float, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval (lower, upper) of a binomial rate; None without trials."""
    if count <= 0:
        return None
    p = min(1.0, max(0.0, errors / count))
    denom = 1.0 + z * z / count
    centre = p + z * z / (2.0 * count)
    spread = z * math.sqrt(p * (1.0 - p) / count + z * z / (4.0 * count * count))
    return max(0.0, (centre - spread) / denom), min(1.0, (centre + spread) / denom)


def quantile_rank_bounds(q: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Ranks (as fractions) whose order statistics bound the true q-quantile.

    The number of samples below the true q-quantile is Binomial(n, q); its
    normal-approximation interval gives distribution-free bounds on the
    quantile: [x_(lo), x_(hi)] with lo, hi = q -/+ z * sqrt(q (1 - q) / n).
    """
    if n <= 0:
        return 0.0, 1.0
    half = z * math.sqrt(q * (1.0 - q) / n)
    return max(0.0, q - half), min(1.0, q + half)
